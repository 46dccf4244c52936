package alerting

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/windowstats"
)

// TestExplainAnnotates checks that Options.Explain's annotations reach the
// alert, with the snapshot's breaching window start, and never overwrite
// the rule's own.
func TestExplainAnnotates(t *testing.T) {
	var calls int
	var gotFrom time.Time
	s := newSim(t, Options{Explain: func(model, version string, from time.Time, w windowstats.WindowView, host *HostBreakdown) map[string]string {
		calls++
		gotFrom = from
		if model == "" || w.Count == 0 {
			t.Errorf("explain(%q, %q, %v, %+v)", model, version, from, w)
		}
		return map[string]string{"top_causes": "cpu_throttling 0.9", "summary": "must not replace the rule's"}
	}})
	const from = 10
	for k := range from + 4 {
		gen := steady
		if k >= from {
			gen = func(r *rand.Rand, i int) shape {
				sh := steady(r, i)
				sh.upstream = lognormal(r, 60*time.Millisecond, 0.3)
				return sh
			}
		}
		s.window(500, gen)
	}
	notes := s.rec.of(RuleLatencyStdDevJump)
	if len(notes) == 0 {
		t.Fatal("no LatencyStdDevJump notification")
	}
	a := notes[0].alert
	if a.Annotations["top_causes"] != "cpu_throttling 0.9" || a.Annotations["summary"] == "must not replace the rule's" {
		t.Errorf("annotations %v", a.Annotations)
	}
	if calls == 0 || !gotFrom.Equal(a.Snapshot.Current.Start) {
		t.Errorf("explain called %d times, from %v, want the snapshot's %v", calls, gotFrom, a.Snapshot.Current.Start)
	}
}
