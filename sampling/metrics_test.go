package sampling

import (
	"bytes"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/inferwatch/inferwatch/internal/exposition"
)

// scrape returns the set's series as written → value.
func scrape(t *testing.T, set *metrics.Set) map[string]float64 {
	t.Helper()
	var b bytes.Buffer
	set.WritePrometheus(&b)
	p, err := exposition.Parse(b.String())
	if err != nil {
		t.Fatal(err)
	}
	return p.Series("")
}

func TestMetrics(t *testing.T) {
	set := metrics.NewSet()
	s := newSampler(t, Config{Metrics: set, MaxKeys: 2, SLO: map[string]time.Duration{"m": time.Second}})
	k := Key{Route: "/v2/models/m/infer", Model: "m"}
	ids := newTraceIDs(30)
	kept := roots(s, k, 1000, ids)
	s.Tick(t0)
	kept += roots(s, Key{Route: "/x", Model: `we"ird`}, 10, ids) // label sanitised
	kept += roots(s, Key{Route: "/y", Model: "z"}, 5, ids)       // beyond MaxKeys: other
	s.Head(k, ids.next(), Parent{Present: true, Sampled: true})
	kept++
	s.Tail(k, "m", time.Millisecond, true, false)
	s.Tail(k, "m", 2*time.Second, false, false)
	for range 30 {
		s.Tail(k, "m", time.Millisecond, true, false)
	}
	got := scrape(t, set)
	want := map[string]float64{
		"inferwatch_traces_considered_total":                                  1016,
		"inferwatch_traces_head_kept_total":                                   float64(kept),
		`inferwatch_traces_tail_kept_total{reason="error"}`:                   19,
		`inferwatch_traces_tail_kept_total{reason="slo"}`:                     1,
		`inferwatch_traces_tail_kept_total{reason="p99"}`:                     0,
		"inferwatch_traces_tail_budget_exhausted_total":                       12,
		`inferwatch_traces_probability{route="/v2/models/m/infer",model="m"}`: s.Probability(k),
		`inferwatch_traces_probability{route="other",model="other"}`:          1,
		`inferwatch_traces_probability{route="/x",model="we_ird"}`:            1,
	}
	for name, v := range want {
		if g, ok := got[name]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", name, g, ok, v)
		}
	}
	if p := got[`inferwatch_traces_probability{route="/v2/models/m/infer",model="m"}`]; p < 0.09 || p > 0.11 {
		t.Errorf("probability gauge %v, want about 0.1", p)
	}
}

// TestMetricsEviction: an evicted key's gauge goes; a new sampler on the
// same set does not panic.
func TestMetricsEviction(t *testing.T) {
	set := metrics.NewSet()
	s := newSampler(t, Config{Metrics: set, Interval: time.Minute})
	k := Key{Route: "r", Model: "m"}
	roots(s, k, 10, newTraceIDs(31))
	now := t0
	for range 6 {
		now = now.Add(time.Minute)
		s.Tick(now)
	}
	if _, ok := scrape(t, set)[`inferwatch_traces_probability{route="r",model="m"}`]; ok {
		t.Error("gauge of an evicted key still exported")
	}
	s2 := newSampler(t, Config{Metrics: set})
	roots(s2, k, 10, newTraceIDs(32))
	if _, ok := scrape(t, set)[`inferwatch_traces_probability{route="r",model="m"}`]; !ok {
		t.Error("gauge missing for a key of a second sampler")
	}
}

// TestConcurrent exercises every method at once (run with -race).
func TestConcurrent(t *testing.T) {
	s := newSampler(t, Config{Metrics: metrics.NewSet(), MaxKeys: 8})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			ids := newTraceIDs(uint64(40 + g))
			for i := range 5000 {
				k := Key{Route: strconv.Itoa(i % 13), Model: strconv.Itoa(g)}
				d := s.Head(k, ids.next(), Parent{Present: i%3 == 0, Sampled: i%2 == 0, TraceState: "rojo=1,ot=th:8"})
				s.ObserveLatency(k.Model, time.Duration(i%100)*time.Millisecond)
				s.Tail(k, k.Model, time.Duration(i%100)*time.Millisecond, i%50 == 0, d.Sampled)
				s.Probability(k)
				if i%500 == 0 {
					s.SetP99(k.Model, 90*time.Millisecond)
				}
			}
		})
	}
	wg.Go(func() {
		now := t0
		for range 200 {
			now = now.Add(time.Second)
			s.Tick(now)
		}
	})
	wg.Wait()
}
