package baseline

import (
	"math"
	"testing"
	"time"
)

// run streams pts through a fresh detector.
func run(t *testing.T, pts []Point) []Output {
	t.Helper()
	d, err := NewDetector(DetectorOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]Output, len(pts))
	for i, p := range pts {
		out[i] = d.Step(p)
	}
	return out
}

const incidentDay = 16 * 1440

// Each kind of incident, injected on day 16 at 10:00 into a clean series,
// is found within its delay budget and named; nothing alerts outside it
// from day 8 on.
func TestDetectorNamesEachKind(t *testing.T) {
	at := incidentDay + 10*60
	for _, tc := range []struct {
		name     string
		s        synth
		from, to int // the incident, minutes
		kind     string
		maxDelay int // minutes
		period   time.Duration
	}{
		{"step +50%", synth{mult: window(at, at+180, 1.5)}, at, at + 180, KindLevelShift, 10, 0},
		{"neighbour burst +150%", synth{mult: window(at, at+12, 2.5)}, at, at + 12, KindBurst, 4, 0},
		{"periodic every 30m", synth{mult: func(i int) float64 {
			if i >= at && i < at+300 && (i-at)%30 < 2 {
				return 2.5
			}
			return 1
		}}, at, at + 300, KindPeriodic, 65, 30 * time.Minute},
		{"drift to +70% over 10h", synth{mult: func(i int) float64 {
			if i >= at && i < at+600 {
				return 1 + 0.7*float64(i-at)/600
			}
			return 1
		}}, at, at + 600, KindDrift, 400, 0},
		{"spread x3", synth{noiseMul: func(i int) float64 {
			if i >= at && i < at+240 {
				return 3
			}
			return 1
		}}, at, at + 240, KindSpread, 30, 0},
		{"load slope doubles", synth{slope: func(i int) float64 {
			if i >= incidentDay+6*60 && i < incidentDay+20*60 {
				return 2.4
			}
			return 1.2
		}}, incidentDay + 6*60, incidentDay + 20*60, KindLoadSensitivity, 8 * 60, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.s
			s.days, s.seed = 18, 11
			if s.k == 0 && s.slope == nil {
				s.k = 1
			}
			out := run(t, s.points())
			first := -1
			kinds := map[string]int{}
			for i, o := range out {
				if !o.Alert || i < 8*1440 {
					continue
				}
				if i >= tc.from && i <= tc.to+30 {
					if first < 0 {
						first = i
					}
					kinds[o.Kind]++
					if tc.period > 0 && o.Kind == KindPeriodic && o.Period != tc.period {
						t.Errorf("period %v, want %v", o.Period, tc.period)
					}
					continue
				}
				t.Errorf("false alarm at %s (%s, value %.1f expected %.1f)", o.T.Format(time.DateTime), o.Kind, o.Value, o.Expected)
				break
			}
			if first < 0 {
				t.Fatalf("not detected")
			}
			delay := first - tc.from
			t.Logf("delay %d min, kinds %v", delay, kinds)
			if delay > tc.maxDelay {
				t.Errorf("delay %d min > %d", delay, tc.maxDelay)
			}
			if kinds[tc.kind] == 0 {
				t.Errorf("kind %s never named: %v", tc.kind, kinds)
			}
			// Load and time rise together in the morning, so a load-slope
			// incident is named drift or level_shift at first; no other
			// kind of incident may be named load_sensitivity.
			if tc.kind != KindLoadSensitivity && kinds[KindLoadSensitivity] > 0 {
				t.Errorf("%d minutes named %s: %v", kinds[KindLoadSensitivity], KindLoadSensitivity, kinds)
			}
			// Once load has turned, the slope incident keeps its name.
			if tc.kind == KindLoadSensitivity {
				for k, n := range kinds {
					if n > kinds[tc.kind] {
						t.Errorf("named %s more often than %s: %v", k, tc.kind, kinds)
					}
				}
			}
		})
	}
}

// What must not alert: a clean series, a two-minute GC pause, one-minute
// outliers, a harmless 8% shift lasting days.
func TestDetectorHarmless(t *testing.T) {
	for _, tc := range []struct {
		name string
		mult func(int) float64
	}{
		{"clean", nil},
		{"two-minute GC pause x1.6", window(incidentDay+600, incidentDay+602, 1.6)},
		{"one-minute outliers x2.5", func(i int) float64 {
			if i%(5*60+7) == 0 {
				return 2.5
			}
			return 1
		}},
		{"harmless +8% for three days", window(incidentDay-1440, incidentDay+2*1440, 1.08)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := run(t, synth{days: 19, k: 1, seed: 12, mult: tc.mult}.points())
			n := 0
			for i, o := range out[8*1440:] {
				if o.Alert && (i == 0 || !out[8*1440+i-1].Alert) {
					n++
					t.Logf("alert at %s: %s", o.T.Format(time.DateTime), o.Kind)
				}
			}
			if n > 0 {
				t.Errorf("%d alert events", n)
			}
		})
	}
}

// Output rows carry a band around the expected and a score in [0,1]; the
// model becomes seasonal after two weeks.
func TestDetectorOutputsAndModelKinds(t *testing.T) {
	out := run(t, synth{days: 16, k: 1, seed: 13}.points())
	kinds := map[string]int{}
	for i, o := range out {
		kinds[o.Model]++
		if o.Score < 0 || o.Score > 1 || math.IsNaN(o.Score) {
			t.Fatalf("row %d: score %v", i, o.Score)
		}
		if !math.IsNaN(o.Expected) && !(o.Lower < o.Expected && o.Expected < o.Upper) {
			t.Fatalf("row %d: band %v < %v < %v", i, o.Lower, o.Expected, o.Upper)
		}
	}
	for _, k := range []string{KindTrailing, KindDaily, KindSeasonal} {
		if kinds[k] == 0 {
			t.Errorf("model kind %s never used: %v", k, kinds)
		}
	}
	if out[len(out)-1].Model != KindSeasonal {
		t.Errorf("last model %s", out[len(out)-1].Model)
	}
}

func TestDetectorOptionsNameTheField(t *testing.T) {
	for _, tc := range []struct {
		o     DetectorOptions
		field string
	}{
		{DetectorOptions{History: time.Hour}, "history"},
		{DetectorOptions{RefitEvery: time.Second}, "refit_every"},
		{DetectorOptions{Band: -1}, "band"},
		{DetectorOptions{MinExcess: -0.1}, "min_excess"},
		{DetectorOptions{Band: math.NaN()}, "band"}, // no comparison holds for NaN
		{DetectorOptions{MinExcess: math.NaN()}, "min_excess"},
		{DetectorOptions{SpikeExcess: math.NaN()}, "spike_excess"},
		{DetectorOptions{BurstMinutes: -2}, "burst_minutes"},
		{DetectorOptions{Fit: FitOptions{DailyOrder: 30}}, "daily_order"},
	} {
		_, err := NewDetector(tc.o)
		if err == nil || !contains(err.Error(), tc.field) {
			t.Errorf("%+v: err %v, want one naming %s", tc.o, err, tc.field)
		}
	}
}

// BenchmarkDetect28Days is one benchmark series: 28 days of minutes.
func BenchmarkDetect28Days(b *testing.B) {
	pts := synth{days: 28, k: 1, seed: 14}.points()
	for b.Loop() {
		d, _ := NewDetector(DetectorOptions{})
		for _, p := range pts {
			d.Step(p)
		}
	}
}

// TestFollowsLoad: quarter-hour means of a level alert's residuals, and
// which shapes are latency's response to load.
func TestFollowsLoad(t *testing.T) {
	// A weekday's load, 06:00 to 21:00 by quarter hours: up to a peak at
	// 15:00 and down again.
	load := func(i int) float64 {
		h := 6 + float64(i)/4
		x := math.Max(0, math.Cos(2*math.Pi*(h-15)/24))
		return 0.05 + 0.95*x*x*x
	}
	noise := func(i int) float64 { return 0.02 * math.Sin(float64(i)*2.3) }
	span := func(n int, r func(i int) float64) []spanMean {
		out := make([]spanMean, n)
		for i := range out {
			out[i] = spanMean{from: t0.Add(time.Duration(i) * spanStep), r: r(i) + noise(i), u: load(i)}
		}
		return out
	}
	excess := func(u float64) float64 { return math.Log((1 + 2.4*u) / (1 + 1.2*u)) }
	for _, tc := range []struct {
		name string
		span []spanMean
		want bool
	}{
		{"load's response doubled, through the peak", span(60, func(i int) float64 { return excess(load(i)) }), true},
		{"a drift while load rises", span(24, func(i int) float64 { return 0.01 * float64(i) }), false},
		{"too short to say", span(8, func(i int) float64 { return excess(load(i)) }), false},
		{"a level shift", span(60, func(int) float64 { return 0.3 }), false},
		{"a step at 11:00", span(60, func(i int) float64 { return 0.4 * float64(min(1, max(0, i-20))) }), false},
		{"a drift", span(60, func(i int) float64 { return 0.006 * float64(i) }), false},
		{"an excess that falls as load rises", span(60, func(i int) float64 { return 0.5 - 0.4*load(i) }), false},
		{"load flat", func() []spanMean {
			s := span(60, func(i int) float64 { return 0.3 })
			for i := range s {
				s[i].u = 0.8 + 0.01*math.Sin(float64(i))
			}
			return s
		}(), false},
	} {
		if got := followsLoad(tc.span); got != tc.want {
			t.Errorf("%s: followsLoad = %v, want %v", tc.name, got, tc.want)
		}
	}
}
