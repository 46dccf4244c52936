package diagnosis

import (
	"fmt"
	"io"
	"strings"
)

// WriteText prints the report a person reads in ten seconds: the verdict,
// where the latency went, the top causes with their numbers, example traces.
func (r Report) WriteText(w io.Writer) error {
	var b strings.Builder
	head := r.Model
	if r.Alert != "" {
		head += " (alert " + r.Alert + ")"
	}
	fmt.Fprintf(&b, "%s %s → %s\n", head, r.From.UTC().Format("2006-01-02 15:04:05"), r.To.UTC().Format("15:04:05"))
	fmt.Fprintf(&b, "verdict: %s\n", r.Summary)
	fmt.Fprintf(&b, "latency: mean %s → %s, p99 %s → %s, load %.1f → %.1f call/s (%d vs %d windows)\n",
		dur(r.Baseline.Mean), dur(r.Breach.Mean), dur(r.Baseline.P99), dur(r.Breach.P99),
		r.Baseline.QPS, r.Breach.QPS, r.Baseline.Windows, r.Breach.Windows)
	if len(r.Moved) > 0 && r.Added >= 0.001 {
		var parts []string
		for _, p := range r.Moved[:min(3, len(r.Moved))] {
			parts = append(parts, fmt.Sprintf("%s +%s (%.0f%%)", p.Name, dur(p.Added), 100*p.Share))
		}
		fmt.Fprintf(&b, "where:   %s\n", strings.Join(parts, ", "))
	}
	for i, c := range r.Causes[:min(3, len(r.Causes))] {
		fmt.Fprintf(&b, "%d. %-16s %.2f  %s\n", i+1, c.Name, c.Score, c.Summary)
	}
	if len(r.Traces) > 0 {
		fmt.Fprintf(&b, "traces:  %s\n", strings.Join(r.Traces, " "))
	}
	if r.Prose != "" {
		fmt.Fprintf(&b, "\n%s\n", r.Prose)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
