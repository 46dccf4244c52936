package baseline

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func TestFitKindFollowsHistory(t *testing.T) {
	for _, tc := range []struct {
		days int
		want string
	}{
		{1, KindTrailing},
		{3, KindDaily},
		{13, KindDaily},
		{14, KindSeasonal},
		{16, KindSeasonal},
	} {
		pts := synth{days: tc.days, k: 1, seed: 1}.points()
		m, err := Fit(pts, FitOptions{})
		if err != nil {
			t.Fatalf("%d days: %v", tc.days, err)
		}
		if m.Kind != tc.want {
			t.Errorf("%d days: kind %q, want %q", tc.days, m.Kind, tc.want)
		}
	}
}

func TestFitTooFew(t *testing.T) {
	pts := synth{days: 1, seed: 1}.points()[:10]
	if _, err := Fit(pts, FitOptions{}); !errors.Is(err, ErrTooFew) {
		t.Fatalf("err %v, want ErrTooFew", err)
	}
}

func TestFitOptionsNameTheField(t *testing.T) {
	for _, tc := range []struct {
		o     FitOptions
		field string
	}{
		{FitOptions{DailyOrder: -1}, "daily_order"},
		{FitOptions{WeeklyOrder: 99}, "weekly_order"},
		{FitOptions{FitBin: -time.Minute}, "fit_bin"},
		{FitOptions{Ridge: -1}, "ridge"},
	} {
		_, err := Fit(synth{days: 3, seed: 1}.points(), tc.o)
		if err == nil || !contains(err.Error(), tc.field) {
			t.Errorf("%+v: err %v, want one naming %s", tc.o, err, tc.field)
		}
	}
}

// The fitted mean must follow the truth a week past the fit, with and
// without load, and with an incident in the history.
func TestFitPredictsNextWeek(t *testing.T) {
	for _, tc := range []struct {
		name    string
		s       synth
		noLoad  bool
		maxRMSE float64
	}{
		{"load", synth{days: 21, k: 1.2, seed: 2}, false, 0.03},
		{"no load", synth{days: 21, k: 1.2, seed: 3}, true, 0.08},
		// A +100% incident for six hours on day 10 and many outliers must not bend it.
		{"incident in history", synth{days: 21, k: 0.8, seed: 4, mult: func(i int) float64 {
			if i >= 10*1440+600 && i < 10*1440+960 {
				return 2
			}
			if i%97 == 0 {
				return 2.5
			}
			return 1
		}}, false, 0.03},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pts := tc.s.points()
			if tc.noLoad {
				for i := range pts {
					pts[i].Q = math.NaN()
				}
			}
			m, err := Fit(pts[:14*1440], FitOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if m.UsesLoad == tc.noLoad {
				t.Fatalf("UsesLoad %v", m.UsesLoad)
			}
			var se float64
			n := 0
			for i := 14 * 1440; i < 21*1440; i++ {
				mu, _ := m.Predict(pts[i].T, pts[i].Q)
				d := mu - tc.s.truth(i)
				se += d * d
				n++
			}
			rmse := math.Sqrt(se / float64(n))
			t.Logf("RMSE of log mean over the next week: %.4f", rmse)
			if rmse > tc.maxRMSE {
				t.Errorf("RMSE %.4f > %.4f", rmse, tc.maxRMSE)
			}
		})
	}
}

// Bands must be wider at quiet hours than at busy ones (noise grows when
// traffic is low), and cover about 99% of clean points.
func TestScaleVariesWithLoad(t *testing.T) {
	s := synth{days: 21, k: 1, seed: 5, sigma: 0.08}
	pts := s.points()
	m, err := Fit(pts[:14*1440], FitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	night := pts[14*1440+3*60] // 03:00
	noon := pts[14*1440+15*60] // 15:00
	_, sn := m.Predict(night.T, night.Q)
	_, sd := m.Predict(noon.T, noon.Q)
	// The truth: 1+1.5/sqrt(q/50) is 1.97 at 03:00 (120 QPS), 1.375 at 15:00 (800).
	if r := sn / sd; r < 1.3 || r > 1.6 {
		t.Errorf("scale at 03:00 %.3f over 15:00's %.3f is %.2f, want about 1.43", sn, sd, r)
	}
	out := 0
	for _, p := range pts[14*1440:] {
		mu, sc := m.Predict(p.T, p.Q)
		if math.Abs(math.Log(p.V)-mu) > 3*sc {
			out++
		}
	}
	share := float64(out) / float64(7*1440)
	t.Logf("share outside ±3 scales: %.4f", share)
	if share > 0.02 {
		t.Errorf("%.4f of clean points outside the band", share)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// BenchmarkFitTwoWeeks is the target: two weeks of one-minute
// points, with load, fitted in at most 10 ms.
func BenchmarkFitTwoWeeks(b *testing.B) {
	for _, tc := range []struct {
		name string
		bin  time.Duration
	}{
		{"bin=5m", 0},
		{"bin=1m", time.Minute},
	} {
		b.Run(tc.name, func(b *testing.B) {
			pts := synth{days: 14, k: 1, seed: 9}.points()
			b.ResetTimer()
			for b.Loop() {
				if _, err := Fit(pts, FitOptions{FitBin: tc.bin}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestPredictWithUnknownLoad: a minute whose load is missing (a gap in the
// load series, a scrape lost) is predicted at the load typical of its hour
// of the week, not at no traffic: at peak that was half the latency, and
// the band fell below every point. Also when the gaps are in the history.
func TestPredictWithUnknownLoad(t *testing.T) {
	for _, tc := range []struct {
		name    string
		fit     int // days fitted, from Monday
		predict int // days predicted after them
		holes   int // every holes-th fitted point lacks its load; 0 none
		maxRMSE float64
	}{
		{"known history", 14, 7, 0, 0.08},
		{"history with gaps", 14, 7, 20, 0.08},
		// Thursday and Friday are hours of the week a daily model has not
		// seen: they take the load of the same hours on the days it has.
		{"three days", 3, 2, 0, 0.03},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := synth{days: tc.fit + tc.predict, k: 1.2, seed: 5}
			pts := s.points()
			if tc.holes > 0 {
				for i := 0; i < tc.fit*1440; i += tc.holes {
					pts[i].Q = math.NaN()
				}
			}
			m, err := Fit(pts[:tc.fit*1440], FitOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !m.UsesLoad {
				t.Fatal("load not used")
			}
			var se float64
			n, outside := 0, 0
			for i := tc.fit * 1440; i < len(pts); i++ {
				mu, sc := m.Predict(pts[i].T, math.NaN())
				d := mu - s.truth(i)
				se += d * d
				n++
				if math.Abs(math.Log(pts[i].V)-mu) > 4*sc {
					outside++
				}
			}
			rmse := math.Sqrt(se / float64(n))
			t.Logf("RMSE of log mean over the next %d days, load unknown: %.4f; %d of %d points outside ±4 scales", tc.predict, rmse, outside, n)
			if rmse > tc.maxRMSE {
				t.Errorf("RMSE %.4f > %.4f", rmse, tc.maxRMSE)
			}
			if outside > n/100 {
				t.Errorf("%d of %d clean points outside ±4 scales", outside, n)
			}
		})
	}
}
