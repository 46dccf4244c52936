package diagnosis

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode"
)

// WriteText prints the report a person reads in ten seconds: the verdict,
// where the latency went, the top causes with their numbers, example traces.
func (r Report) WriteText(w io.Writer) error {
	var b strings.Builder
	head := oneLine(r.Model)
	if r.Alert != "" {
		head += " (alert " + oneLine(r.Alert) + ")"
	}
	fmt.Fprintf(&b, "%s %s → %s\n", head, r.From.UTC().Format("2006-01-02 15:04:05"), r.To.UTC().Format("15:04:05"))
	fmt.Fprintf(&b, "verdict: %s\n", oneLine(r.Summary))
	fmt.Fprintf(&b, "latency: mean %s → %s, p99 %s → %s, load %.1f → %.1f call/s (%d vs %d windows)\n",
		dur(r.Baseline.Mean), dur(r.Breach.Mean), dur(r.Baseline.P99), dur(r.Breach.P99),
		r.Baseline.QPS, r.Breach.QPS, r.Baseline.Windows, r.Breach.Windows)
	if len(r.Moved) > 0 && r.Added >= 0.001 {
		var parts []string
		for _, p := range r.Moved[:min(3, len(r.Moved))] {
			parts = append(parts, fmt.Sprintf("%s +%s (%.0f%%)", oneLine(p.Name), dur(p.Added), 100*p.Share))
		}
		fmt.Fprintf(&b, "where:   %s\n", strings.Join(parts, ", "))
	}
	for i, c := range r.Causes[:min(3, len(r.Causes))] {
		fmt.Fprintf(&b, "%d. %-16s %.2f  %s\n", i+1, c.Name, c.Score, oneLine(c.Summary))
	}
	if len(r.Traces) > 0 {
		fmt.Fprintf(&b, "traces:  %s\n", oneLine(strings.Join(r.Traces, " ")))
	}
	if r.Prose != "" {
		fmt.Fprintf(&b, "\n%s\n", prose(r.Prose))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// oneLine is a field from the admin API (a model name, a summary quoting
// one) as the terminal gets it: quoted when it holds a control character,
// so that it cannot forge lines of the report or drive the terminal. The
// CLI trusts whatever --admin answers no more than the sidecar trusted the
// request the name came from.
func oneLine(s string) string {
	if strings.IndexFunc(s, notPrintable) < 0 {
		return s
	}
	return strconv.Quote(s)
}

// prose is the LLM's summary with its line breaks kept and every other
// control character (an escape sequence) dropped.
func prose(s string) string {
	return strings.Map(func(r rune) rune {
		if r != '\n' && notPrintable(r) {
			return -1
		}
		return r
	}, s)
}

func notPrintable(r rune) bool { return !unicode.IsPrint(r) && r != ' ' }
