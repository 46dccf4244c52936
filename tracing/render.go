package tracing

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Render writes traces as indented trees with durations, one block per trace:
//
//	trace 4bf92f3577b34da6a3ce929d0e0e4736  mnist-mlp  2.41ms  OK  (head p=0.10)
//	└─ inference ModelInfer mnist-mlp   2.41ms
//	   ├─ ingress                       0.05ms
//	   ├─ upstream                      2.10ms
//	   │  └─ infer                      1.80ms
//	   └─ egress                        0.01ms
//
// Siblings are in start order. A span placed after its parent (the deferred
// decode) says so; a span in error shows its error. Write errors are
// ignored; FetchAndRender reports them.
func Render(w io.Writer, traces []Trace) {
	render(w, traces)
}

func render(w io.Writer, traces []Trace) error {
	bw := bufio.NewWriter(w)
	for i, t := range traces {
		if i > 0 {
			bw.WriteByte('\n')
		}
		renderTrace(bw, &t)
	}
	return bw.Flush()
}

type line struct {
	prefix, name, dur, note string
}

func renderTrace(w *bufio.Writer, t *Trace) {
	head := "trace " + t.TraceID
	if t.Model != "" {
		head += "  " + shown(t.Model)
	}
	head += "  " + fmtDuration(t.DurationNS) + "  " + t.Status
	if t.Status != "OK" && t.Code != "" {
		head += " " + t.Code
	}
	switch {
	case t.Sampling == "tail":
		head += "  (tail " + t.TailReason + ")"
	case t.Probability > 0:
		head += "  (head p=" + strconv.FormatFloat(t.Probability, 'f', probDigits(t.Probability), 64) + ")"
	default:
		head += "  (head, parent's decision)"
	}
	w.WriteString(head)
	w.WriteByte('\n')

	ids := make(map[string]bool, len(t.Spans))
	for _, s := range t.Spans {
		ids[s.SpanID] = true
	}
	children := make(map[string][]int, len(t.Spans))
	var roots []int
	for i, s := range t.Spans {
		if s.ParentSpanID != "" && ids[s.ParentSpanID] && s.ParentSpanID != s.SpanID {
			children[s.ParentSpanID] = append(children[s.ParentSpanID], i)
		} else {
			roots = append(roots, i)
		}
	}
	byStart := func(idx []int) {
		sort.SliceStable(idx, func(a, b int) bool { return t.Spans[idx[a]].Start.Before(t.Spans[idx[b]].Start) })
	}
	var lines []line
	seen := make(map[int]bool, len(t.Spans))
	var walk func(i int, lead string, last bool)
	walk = func(i int, lead string, last bool) {
		if seen[i] {
			return
		}
		seen[i] = true
		s := &t.Spans[i]
		branch, more := "├─ ", "│  "
		if last {
			branch, more = "└─ ", "   "
		}
		l := line{prefix: lead + branch, name: shown(s.Name), dur: fmtDuration(s.DurationNS)}
		if d, _ := s.Attributes[attrDeferred].(bool); d {
			l.note = "(ran after the call, off the data path)"
		}
		if r, ok := s.Attributes[attrStageReported].(float64); ok && math.Abs(r-float64(s.DurationNS)/1e6) >= 0.005 {
			l.note = "(reported " + strconv.FormatFloat(r, 'f', 2, 64) + "ms, cut at the first response byte)"
		}
		if s.Error != "" {
			l.note = strings.TrimSpace(l.note + " ERROR " + shown(s.Error))
		}
		lines = append(lines, l)
		kids := children[s.SpanID]
		byStart(kids)
		for j, k := range kids {
			walk(k, lead+more, j == len(kids)-1)
		}
	}
	byStart(roots)
	for j, r := range roots {
		walk(r, "", j == len(roots)-1)
	}

	width, dw := 40, 0
	for _, l := range lines {
		width = max(width, utf8.RuneCountInString(l.prefix)+utf8.RuneCountInString(l.name)+2)
		dw = max(dw, len(l.dur))
	}
	for _, l := range lines {
		n := utf8.RuneCountInString(l.prefix) + utf8.RuneCountInString(l.name)
		w.WriteString(l.prefix)
		w.WriteString(l.name)
		w.WriteString(strings.Repeat(" ", width-n+dw-len(l.dur)))
		w.WriteString(l.dur)
		if l.note != "" {
			w.WriteString("  ")
			w.WriteString(l.note)
		}
		w.WriteByte('\n')
	}
}

// shown is a string from a request (a model name from the path, an error
// text) as the page prints it: quoted when it holds a control character, so
// that "%0a" or an escape sequence cannot forge lines on the page or drive
// the terminal of whoever reads it (the demo prints these trees).
func shown(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) && r != ' ' }) < 0 {
		return s
	}
	return strconv.Quote(s)
}

// fmtDuration prints milliseconds with two decimals, as the seed's example.
func fmtDuration(ns int64) string {
	return strconv.FormatFloat(float64(ns)/1e6, 'f', 2, 64) + "ms"
}

// probDigits shows small probabilities with enough digits to tell them apart.
func probDigits(p float64) int {
	switch {
	case p >= 0.01:
		return 2
	case p >= 0.001:
		return 3
	}
	return 4
}

// FetchAndRender gets the last traces from a running sidecar's admin server
// (GET /api/v1/traces) and renders them as trees: the `inferwatch traces`
// command. adminURL is "http://host:port" or "host:port"; limit <= 0 asks
// for all the sidecar holds.
func FetchAndRender(adminURL string, w io.Writer, limit int) error {
	base := adminURL
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	u, err := url.Parse(base)
	if err != nil {
		return fmt.Errorf("traces: admin URL %q: %w", adminURL, err)
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/api/v1/traces"
	if limit > 0 {
		u.RawQuery = "limit=" + strconv.Itoa(limit)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return fmt.Errorf("traces: request %s: %w", u, err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("traces: fetch %s: %w", u, err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(res.Body, 512))
		return fmt.Errorf("traces: fetch %s: %s: %s", u, res.Status, strings.TrimSpace(string(msg)))
	}
	var body TracesResponse
	if err := json.NewDecoder(res.Body).Decode(&body); err != nil {
		return fmt.Errorf("traces: decode the answer of %s: %w", u, err)
	}
	if len(body.Traces) == 0 {
		_, err := io.WriteString(w, "no traces kept yet\n")
		return err
	}
	if err := render(w, body.Traces); err != nil {
		return fmt.Errorf("traces: write: %w", err)
	}
	return nil
}
