package metricset

import (
	"bytes"
	"math"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// sample is one line of exposition text.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// exposition is a parsed /metrics page plus its # TYPE and # HELP lines.
type exposition struct {
	samples []sample
	types   map[string]string
	help    map[string]string
}

func scrape(t *testing.T, s *Set) exposition {
	t.Helper()
	var buf bytes.Buffer
	s.WritePrometheus(&buf)
	return parseExposition(t, buf.String())
}

// parseExposition reads the subset of the text format the library writes:
// no timestamps, label values without escapes.
func parseExposition(t *testing.T, text string) exposition {
	t.Helper()
	e := exposition{types: map[string]string{}, help: map[string]string{}}
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, typ, _ := strings.Cut(rest, " ")
			e.types[name] = typ
			continue
		}
		if rest, ok := strings.CutPrefix(line, "# HELP "); ok {
			name, text, _ := strings.Cut(rest, " ")
			e.help[name] = text
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			t.Fatalf("line without value: %q", line)
		}
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		smp := sample{labels: map[string]string{}, value: v}
		series := line[:sp]
		name, lbls, hasLabels := strings.Cut(series, "{")
		smp.name = name
		if hasLabels {
			for _, kv := range strings.Split(strings.TrimSuffix(lbls, "}"), ",") {
				k, v, _ := strings.Cut(kv, "=")
				smp.labels[k] = strings.Trim(v, `"`)
			}
		}
		e.samples = append(e.samples, smp)
	}
	return e
}

// value returns the sample with exactly these labels, or NaN.
func (e exposition) value(name string, labels map[string]string) float64 {
	for _, s := range e.samples {
		if s.name == name && sameLabels(s.labels, labels) {
			return s.value
		}
	}
	return math.NaN()
}

// count is how many samples of name there are.
func (e exposition) count(name string) int {
	n := 0
	for _, s := range e.samples {
		if s.name == name {
			n++
		}
	}
	return n
}

type bucket struct{ le, count float64 }

// buckets returns the cumulative buckets of histogram name with these labels
// (le aside), in order of le.
func (e exposition) buckets(name string, labels map[string]string) []bucket {
	var out []bucket
	for _, s := range e.samples {
		if s.name != name+"_bucket" {
			continue
		}
		rest := map[string]string{}
		for k, v := range s.labels {
			if k != "le" {
				rest[k] = v
			}
		}
		if !sameLabels(rest, labels) {
			continue
		}
		le, err := strconv.ParseFloat(s.labels["le"], 64)
		if err != nil {
			continue
		}
		out = append(out, bucket{le, s.value})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].le < out[j].le })
	return out
}

func sameLabels(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if bv, ok := b[k]; !ok || bv != v {
			return false
		}
	}
	return true
}

// quantile is Prometheus' histogram_quantile over cumulative buckets:
// linear interpolation inside the bucket that holds the rank.
func quantile(q float64, bs []bucket) float64 {
	if len(bs) == 0 {
		return math.NaN()
	}
	total := bs[len(bs)-1].count
	rank := q * total
	lower, below := 0.0, 0.0
	for _, b := range bs {
		if b.count >= rank {
			if math.IsInf(b.le, 1) {
				return lower
			}
			if b.count == below {
				return b.le
			}
			return lower + (b.le-lower)*(rank-below)/(b.count-below)
		}
		lower, below = b.le, b.count
	}
	return lower
}

// TestAddHelp checks that other packages' families get the texts handed
// over, that this package's own texts win, and that families nobody
// described keep a bare # HELP line.
func TestAddHelp(t *testing.T) {
	s := New(Options{})
	s.Metrics().NewCounter("inferwatch_other_total").Inc()
	s.Metrics().NewCounter("inferwatch_undescribed_total").Inc()
	s.AddHelp(map[string]string{
		"inferwatch_other_total":           "Other things.",
		"inferwatch_records_dropped_total": "Must not replace this package's own text.",
	})
	e := scrape(t, s)
	for _, tc := range []struct{ name, want string }{
		{"inferwatch_other_total", "Other things."},
		{"inferwatch_records_dropped_total", help["inferwatch_records_dropped_total"]},
		{"inferwatch_undescribed_total", ""},
	} {
		if got, ok := e.help[tc.name]; !ok || got != tc.want {
			t.Errorf("# HELP %s = %q (present %v), want %q", tc.name, got, ok, tc.want)
		}
	}
}
