package alerting

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/windowstats"
)

// The absolute floors: a fast model's doubling under the floor does not
// fire; the same doubling of a slower model, or with the floor off, does.
func TestAbsoluteFloors(t *testing.T) {
	off := -time.Nanosecond
	for _, tc := range []struct {
		name       string
		rule       int
		base, step float64 // seconds: the statistic before and after
		floor      time.Duration
		fires      bool
	}{
		{"p99 1 -> 2 ms, default floor", ruleP99, 0.001, 0.002, 0, false},
		{"p99 1 -> 2 ms, floor off", ruleP99, 0.001, 0.002, off, true},
		{"p99 10 -> 20 ms, default floor", ruleP99, 0.010, 0.020, 0, true},
		{"p99 1 -> 4 ms, default floor", ruleP99, 0.001, 0.004, 0, true},
		{"stddev 1 -> 2.5 ms, default floor", ruleStdDev, 0.001, 0.0025, 0, false},
		{"stddev 1 -> 2.5 ms, floor off", ruleStdDev, 0.001, 0.0025, off, true},
		{"stddev 4 -> 8 ms, default floor", ruleStdDev, 0.004, 0.008, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			th := DefaultThresholds().over(Thresholds{P99MinExcess: tc.floor, StdDevMinExcess: tc.floor})
			if err := th.validate(); err != nil {
				t.Fatal(err)
			}
			r := newRules(th, 30)
			fired := false
			for i := range 40 {
				v := tc.base * (1 + 0.01*float64(i%3))
				if i >= 20 {
					v = tc.step * (1 + 0.01*float64(i%3))
				}
				var c check
				if tc.rule == ruleP99 {
					c = r.checkP99(v, int64(th.MinCount))
				} else {
					c = r.checkStdDev(&windowstats.WindowView{Count: int64(th.MinCount), StdDev: v})
				}
				r.machines[tc.rule].step(c.v, th.forWindows(tc.rule), th.HoldDown)
				fired = fired || r.machines[tc.rule].state == StateFiring
			}
			if fired != tc.fires {
				t.Fatalf("fired %v, want %v", fired, tc.fires)
			}
		})
	}
}

// TestP99FloorOnLabelledIncidents is how the default floor was chosen:
// P99OverBaseline over the latency-incidents bench with floors from none to
// 20 ms. The default must cost no recall against no floor.
func TestP99FloorOnLabelledIncidents(t *testing.T) {
	if testing.Short() {
		t.Skip("replays 28 days of ten series, several times")
	}
	if raceEnabled {
		t.Skip("one goroutine's replay: the plain pass runs it, the race detector has nothing to find")
	}
	data := filepath.Join(incidentsDir, "data")
	if _, err := os.Stat(filepath.Join(data, "incidents.json")); err != nil {
		t.Skipf("benchmark not present: %v", err)
	}
	series, _ := filepath.Glob(filepath.Join(data, "model_*_p99_ms.csv"))
	var none score
	for _, f := range []time.Duration{-1, time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond} {
		sc, _ := replayP99(t, series, DefaultThresholds().over(Thresholds{P99MinExcess: f}))
		t.Logf("p99_min_excess %v: %s", f, sc)
		if f < 0 {
			none = sc
		}
		if f == DefaultThresholds().P99MinExcess && sc.recall < none.recall {
			t.Errorf("the default floor %v costs recall: %.3f against %.3f without", f, sc.recall, none.recall)
		}
	}
}

// A load-proportional rise: P99 doubles as traffic climbs from quiet to
// busy over twenty windows. The trailing median fires on it; the seasonal
// band, which expects latency to follow load, does not, yet still fires on
// a real +60% on top.
func TestP99SeasonalBandFollowsLoad(t *testing.T) {
	const base, k = 0.040, 1.0
	expect := func(u float64) float64 { return base * (1 + k*u*u) }
	for _, tc := range []struct {
		name     string
		seasonal bool
		incident float64 // multiplier from window 40 on
		fires    bool
	}{
		{"trailing median, load rise", false, 1, true},
		{"seasonal band, load rise", true, 1, false},
		{"seasonal band, load rise and +60%", true, 1.6, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			th := DefaultThresholds()
			r := newRules(th, 30)
			fired := false
			for i := range 60 {
				u := 0.2 + 0.8*min(1, max(0, float64(i-20)/20)) // quiet, then a 20-window climb
				noise := 1 + 0.01*float64(i%3)
				p99 := expect(u) * noise
				if i >= 40 {
					p99 *= tc.incident
				}
				var c check
				if tc.seasonal {
					c = r.checkP99Band(p99, int64(th.MinCount), expect(u), expect(u)*1.15)
				} else {
					c = r.checkP99(p99, int64(th.MinCount))
				}
				r.machines[ruleP99].step(c.v, th.P99For, th.HoldDown)
				fired = fired || r.machines[ruleP99].state == StateFiring
			}
			if fired != tc.fires {
				t.Fatalf("fired %v, want %v", fired, tc.fires)
			}
		})
	}
}

// The engine asks Options.Baseline for the band of each window and uses it
// when it answers: a tail spike the trailing median fires on stays quiet
// under a band that expects it, and fires again once the band is gone.
func TestEngineUsesSeasonalBaseline(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ok    bool
		fires bool
	}{
		{"band present", true, false},
		{"no band yet", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			s := newSim(t, Options{Baseline: func(model, version string, w *windowstats.WindowView) (float64, float64, bool) {
				calls++
				if model != "m" || version != "1" || w.QPS <= 0 || w.P99 <= 0 {
					t.Errorf("Baseline(%q, %q, %+v)", model, version, w)
				}
				return 1.0, 2.0, tc.ok // a band of seconds: the spike is well inside it
			}})
			for k := range 25 {
				gen := steady
				if k >= 12 && k < 17 {
					gen = tailSpike
				}
				s.window(1000, gen)
			}
			fired := s.firstState(RuleP99OverBaseline, StateFiring, 0) >= 0
			if calls == 0 {
				t.Fatal("Baseline never asked")
			}
			if fired != tc.fires {
				t.Fatalf("fired %v, want %v", fired, tc.fires)
			}
		})
	}
}
