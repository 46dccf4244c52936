package alerting

import (
	"strings"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/record"
)

// TestTTFTOverSLO: the P99 time to first token over the model's TTFT SLO
// for three windows fires LLMTimeToFirstTokenOverSLO; back under it, it
// resolves after the hold-down; a model without a TTFT SLO, or windows
// with too few generations, are not judged.
func TestTTFTOverSLO(t *testing.T) {
	s := newSim(t, Options{Config: Config{Models: map[string]Thresholds{"m": {TTFTSLO: 200 * time.Millisecond}}}})
	feed := func(n int, ttft time.Duration) {
		start := t0.Add(time.Duration(s.k) * window)
		for i := range n {
			end := start.Add(time.Duration(i) * window / time.Duration(n))
			for _, m := range []string{"m", "no-slo"} {
				c := steady(s.r, i).call(m, end)
				c.LLM = &record.LLM{Streamed: true, FirstToken: lognormal(s.r, ttft, 0.1), ContentEvents: 2}
				c.LLM.Gaps.Add(5 * time.Millisecond)
				s.e.Observe(c)
			}
		}
		s.tick(start.Add(window), "m")
	}
	for range 5 {
		feed(200, 100*time.Millisecond)
	}
	for range 5 {
		feed(10, time.Second) // too few generations to judge
	}
	for range 4 {
		feed(200, 400*time.Millisecond)
	}
	for range 4 {
		feed(200, 100*time.Millisecond)
	}
	st := s.state[RuleTTFTOverSLO]
	if k := s.firstState(RuleTTFTOverSLO, StateFiring, 0); k != 12 {
		t.Fatalf("fired at window %d, want 12 (the third over the SLO): %v", k, st)
	}
	if k := s.firstState(RuleTTFTOverSLO, "", 12); k != 15 {
		t.Fatalf("resolved at window %d, want 15: %v", k, st)
	}
	for _, n := range s.rec.of(RuleTTFTOverSLO) {
		if n.alert.Labels["model"] != "m" {
			t.Fatalf("alert for %q, which has no TTFT SLO", n.alert.Labels["model"])
		}
		if n.alert.State == StateFiring && !strings.Contains(n.alert.Annotations["summary"], "time to first token") {
			t.Errorf("summary %q", n.alert.Annotations["summary"])
		}
	}
}
