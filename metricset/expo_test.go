package metricset

import (
	"bytes"
	"math"
	"sort"
	"strconv"
	"testing"

	"github.com/inferwatch/inferwatch/internal/exposition"
)

// page is a parsed /metrics page, with lookups these tests share.
type page struct{ exposition.Page }

func scrape(t *testing.T, s *Set) page {
	t.Helper()
	var buf bytes.Buffer
	s.WritePrometheus(&buf)
	p, err := exposition.Parse(buf.String())
	if err != nil {
		t.Fatal(err)
	}
	return page{p}
}

// near reports whether got is within tol of want; a missing sample (NaN)
// is near nothing, so an assertion on a series that is not there fails.
func near(got, want, tol float64) bool {
	return !math.IsNaN(got) && math.Abs(got-want) <= tol
}

// value returns the sample with exactly these labels, or NaN.
func (e page) value(name string, labels map[string]string) float64 {
	for _, s := range e.Samples {
		if s.Name == name && sameLabels(s.Labels, labels) {
			return s.Value
		}
	}
	return math.NaN()
}

// count is how many samples of name there are.
func (e page) count(name string) int {
	n := 0
	for _, s := range e.Samples {
		if s.Name == name {
			n++
		}
	}
	return n
}

type bucket struct{ le, count float64 }

// buckets returns the cumulative buckets of histogram name with these labels
// (le aside), in order of le.
func (e page) buckets(name string, labels map[string]string) []bucket {
	var out []bucket
	for _, s := range e.Samples {
		if s.Name != name+"_bucket" {
			continue
		}
		rest := map[string]string{}
		for k, v := range s.Labels {
			if k != "le" {
				rest[k] = v
			}
		}
		if !sameLabels(rest, labels) {
			continue
		}
		le, err := strconv.ParseFloat(s.Labels["le"], 64)
		if err != nil {
			continue
		}
		out = append(out, bucket{le, s.Value})
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
		if got, ok := e.Help[tc.name]; !ok || got != tc.want {
			t.Errorf("# HELP %s = %q (present %v), want %q", tc.name, got, ok, tc.want)
		}
	}
}
