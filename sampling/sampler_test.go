package sampling

import (
	"context"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// t0 is the simulated clock's origin: tests call Tick with explicit times.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newSampler(t testing.TB, c Config) *Sampler {
	t.Helper()
	s, err := New(c)
	if err != nil {
		t.Fatalf("New(%+v): %v", c, err)
	}
	return s
}

// traceIDs generates random W3C trace ids from a fixed seed.
type traceIDs struct{ r *rand.Rand }

func newTraceIDs(seed uint64) *traceIDs {
	return &traceIDs{rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

func (g *traceIDs) next() [16]byte {
	var id [16]byte
	a, b := g.r.Uint64(), g.r.Uint64()
	for i := range 8 {
		id[i] = byte(a >> (8 * i))
		id[8+i] = byte(b >> (8 * i))
	}
	return id
}

// roots makes n root Head decisions for k and returns how many were kept.
func roots(s *Sampler, k Key, n int, ids *traceIDs) int {
	kept := 0
	for range n {
		if s.Head(k, ids.next(), Parent{}).Sampled {
			kept++
		}
	}
	return kept
}

// noisyCount is the calls in one interval at qps: Poisson-like noise
// (normal approximation) when noisy, the exact mean otherwise.
func noisyCount(r *rand.Rand, qps float64, interval time.Duration, noisy bool) int {
	mean := qps * interval.Seconds()
	if !noisy {
		return int(math.Round(mean))
	}
	return max(0, int(math.Round(mean+r.NormFloat64()*math.Sqrt(mean))))
}

func TestAdaptation(t *testing.T) {
	tests := []struct {
		name      string
		cfg       Config
		steps     []float64 // QPS of each load step
		intervals int       // intervals simulated per step
		settle    int       // intervals after a step before the rate must be on target
	}{
		// Rises are taken at once (riseJump), so an upward step settles in
		// one interval; 5 is the "short settling time".
		{"up 100-1000-5000 default", Config{}, []float64{100, 1000, 5000}, 20, 5},
		{"up, target 50, 500ms interval", Config{TargetPerSecond: 50, Interval: 500 * time.Millisecond}, []float64{100, 1000, 5000}, 20, 5},
		// Falls are smoothed (the EMA at 0.3 reaches within 15% of a 10x
		// fall in 11 intervals): the probability rises slowly, never past
		// what the load allows.
		{"down 5000-1000-100 default", Config{}, []float64{5000, 1000, 100}, 30, 12},
		{"up then down, smoothing 0.5", Config{Smoothing: 0.5}, []float64{200, 3000, 400}, 20, 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSampler(t, tt.cfg)
			target := s.target
			interval := s.interval
			k := Key{Route: "/v2/models/m/infer", Model: "m"}
			ids := newTraceIDs(1)
			noise := rand.New(rand.NewPCG(2, 3))
			now := t0
			s.Tick(now) // baseline
			for _, qps := range tt.steps {
				var kept, secs float64
				var ps []float64
				for i := range tt.intervals {
					n := noisyCount(noise, qps, interval, true)
					k1 := roots(s, k, n, ids)
					now = now.Add(interval)
					if i >= tt.settle {
						kept += float64(k1)
						secs += interval.Seconds()
						ps = append(ps, s.Probability(k))
					}
					s.Tick(now)
				}
				// Kept rate: the load itself when it is below target.
				want := min(target, qps)
				if rate := kept / secs; math.Abs(rate-want) > 0.15*want {
					t.Errorf("%v QPS: kept %.1f traces/s after settling, want %.0f ±15%%", qps, rate, want)
				}
				// Once settled, the probability only moves with the counting
				// noise the average lets through: relative noise of a count
				// is 1/sqrt(n); a step moves by about α of it, and the
				// average wanders by sqrt(α/(2-α)) of it. Bounds at 5σ and
				// ±4σ, the band at least 15% for the tail of a fall's slow
				// approach; an oscillating controller swings far wider.
				alpha := s.alpha
				rel := 1 / math.Sqrt(qps*interval.Seconds())
				maxStep := max(0.06, 5*alpha*rel)
				maxBand := max(1.15, 1+8*rel*math.Sqrt(alpha/(2-alpha)))
				lo, hi := ps[0], ps[0]
				for i, p := range ps {
					lo, hi = min(lo, p), max(hi, p)
					if i > 0 && math.Abs(p-ps[i-1]) > maxStep*ps[i-1] {
						t.Errorf("%v QPS: probability moved %.4f -> %.4f between settled intervals", qps, ps[i-1], p)
					}
				}
				if hi > maxBand*lo {
					t.Errorf("%v QPS: settled probability spans %.4f..%.4f, want within x%.2f", qps, lo, hi, maxBand)
				}
				if qps == 1000 && target == DefaultTargetPerSecond {
					mean := 0.0
					for _, p := range ps {
						mean += p
					}
					mean /= float64(len(ps))
					if math.Abs(mean-0.1) > 0.005 {
						t.Errorf("1000 QPS with the default target: probability %.4f, want about 0.10", mean)
					}
				}
			}
		})
	}
}

// TestNoOvershoot: with exact (noise-free) load steps, the probability
// moves monotonically to its new value after each step and stays there:
// no overshoot, no ringing.
func TestNoOvershoot(t *testing.T) {
	for _, smoothing := range []float64{0.1, 0.3, 0.7, 1} {
		s := newSampler(t, Config{Smoothing: smoothing})
		k := Key{Route: "r"}
		ids := newTraceIDs(4)
		now := t0
		// Intervals for the average to close all but 0.02% of a step.
		steps := 3
		if smoothing < 1 {
			steps += int(math.Ceil(math.Log(0.0002) / math.Log(1-smoothing)))
		}
		for _, qps := range []float64{300, 4000, 150, 2000, 2000, 500} {
			var ps []float64
			for range steps {
				roots(s, k, int(qps), ids)
				now = now.Add(time.Second)
				s.Tick(now)
				ps = append(ps, s.Probability(k))
			}
			up := ps[len(ps)-1] >= ps[0]
			for i := 1; i < len(ps); i++ {
				if d := ps[i] - ps[i-1]; up && d < 0 || !up && d > 0 {
					t.Fatalf("smoothing %v, %v QPS: probability not monotone: %v", smoothing, qps, ps)
				}
			}
			want := min(1, DefaultTargetPerSecond/qps)
			if got := ps[len(ps)-1]; math.Abs(got-want) > 0.02*want {
				t.Errorf("smoothing %v, %v QPS: probability settled at %.4f, want %.4f", smoothing, qps, got, want)
			}
		}
	}
}

func TestFloorCeiling(t *testing.T) {
	tests := []struct {
		name   string
		cfg    Config
		perMs  int // calls per simulated millisecond
		wantP  float64
		anyKey bool
	}{
		{"floor holds at 1M QPS", Config{}, 1000, 0.001, false},
		{"ceiling at low QPS", Config{}, 0, 1, false}, // 0 calls/ms, 5 calls in the seed tick
		{"custom floor", Config{Floor: 0.01, Ceiling: 0.5}, 1000, 0.01, false},
		{"custom ceiling", Config{Floor: 0.01, Ceiling: 0.5}, 0, 0.5, false},
		{"ceiling below default floor", Config{Ceiling: 0.0005}, 1, 0.0005, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSampler(t, tt.cfg)
			k := Key{Route: "r", Model: "m"}
			ids := newTraceIDs(5)
			now := t0
			roots(s, k, 5, ids)
			s.Tick(now)
			for range 30 {
				roots(s, k, tt.perMs, ids)
				now = now.Add(time.Millisecond)
				s.Tick(now)
			}
			want := newThreshold(tt.wantP).p
			if got := s.Probability(k); got != want {
				t.Errorf("Probability = %v, want %v", got, want)
			}
			if d := s.Head(k, ids.next(), Parent{}); d.Probability != want {
				t.Errorf("Decision.Probability = %v, want %v", d.Probability, want)
			}
		})
	}
}

// TestWarmup: a new key does not keep a whole interval of a heavy load
// before its first recompute.
func TestWarmup(t *testing.T) {
	s := newSampler(t, Config{})
	k := Key{Route: "r", Model: "new"}
	ids := newTraceIDs(6)
	if p := s.Probability(k); p != 1 {
		t.Fatalf("new key starts at %v, want the ceiling", p)
	}
	kept := roots(s, k, 5000, ids)
	// target·interval at the ceiling, then the floor: 100 + 0.001·4900.
	if kept < 100 || kept > 120 {
		t.Errorf("first interval at 5000 QPS kept %d, want about 105", kept)
	}
	s.Tick(t0)
	if p := s.Probability(k); math.Abs(p-0.02) > 0.001 {
		t.Errorf("after the first tick p = %v, want 0.02", p)
	}
	// A key whose first interval saw nothing stays warm.
	s.Tick(t0.Add(time.Second))
	k2 := Key{Route: "r2"}
	s.controller(k2)
	s.Tick(t0.Add(2 * time.Second))
	if st := s.controller(k2).state.Load(); !st.warm {
		t.Error("a key with no calls left warm-up on a tick")
	}
}

func TestMaxKeysAndEviction(t *testing.T) {
	// Interval 1m: keys idle 5 ticks are evicted.
	s := newSampler(t, Config{MaxKeys: 2, Interval: time.Minute})
	ids := newTraceIDs(7)
	a, b, c, d := Key{"a", ""}, Key{"b", ""}, Key{"c", ""}, Key{"d", "x"}
	now := t0
	roots(s, a, 60*1000, ids) // 1000 QPS
	roots(s, b, 60*10, ids)   // 10 QPS
	roots(s, c, 60*2000, ids) // beyond the cap: other
	roots(s, d, 60*2000, ids) // other too: 4000 QPS together
	now = now.Add(time.Minute)
	s.Tick(now)
	if got := len(*s.keys.Load()); got != 2 {
		t.Fatalf("%d keys tracked, want 2", got)
	}
	for _, tt := range []struct {
		k    Key
		want float64
	}{{a, 0.1}, {b, 1}, {c, 0.025}, {d, 0.025}, {otherKey, 0.025}, {Key{"unseen", ""}, 0.025}} {
		if got := s.Probability(tt.k); math.Abs(got-tt.want) > 0.0005 {
			t.Errorf("Probability(%v) = %v, want %v", tt.k, got, tt.want)
		}
	}
	// a goes idle; after evictAfter its slot is free for a new key.
	for range 5 {
		roots(s, b, 600, ids)
		now = now.Add(time.Minute)
		s.Tick(now)
	}
	if _, ok := (*s.keys.Load())[a]; ok {
		t.Fatal("idle key a was not evicted")
	}
	if s.controller(c) == s.other {
		t.Error("after eviction a new key still went to other")
	}
}

func TestConfigValidation(t *testing.T) {
	bad := []struct {
		name string
		cfg  Config
		msg  string
	}{
		{"negative target", Config{TargetPerSecond: -1}, "TargetPerSecond"},
		{"NaN target", Config{TargetPerSecond: math.NaN()}, "TargetPerSecond"},
		{"infinite target", Config{TargetPerSecond: math.Inf(1)}, "TargetPerSecond"},
		{"floor above ceiling", Config{Floor: 0.5, Ceiling: 0.2}, "Floor"},
		{"negative floor", Config{Floor: -0.1}, "Floor"},
		{"ceiling above 1", Config{Ceiling: 1.5}, "Ceiling"},
		{"negative interval", Config{Interval: -time.Second}, "Interval"},
		{"smoothing above 1", Config{Smoothing: 1.2}, "Smoothing"},
		{"negative max keys", Config{MaxKeys: -1}, "MaxKeys"},
		{"negative budget", Config{TailBudgetPerSecond: -5}, "TailBudgetPerSecond"},
		{"zero SLO", Config{SLO: map[string]time.Duration{"m": 0}}, `SLO for model "m"`},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.msg) || !strings.HasPrefix(err.Error(), "sampling: ") {
				t.Errorf("New: error %v, want one naming %s", err, tt.msg)
			}
		})
	}
	s := newSampler(t, Config{})
	if s.target != 100 || s.floor.p != newThreshold(0.001).p || s.ceil.p != 1 || s.interval != time.Second ||
		s.alpha != 0.3 || s.maxKeys != 1000 || s.budget.rate != 20 {
		t.Errorf("defaults not applied: %+v", s)
	}
}

func TestRunStopsOnCancel(t *testing.T) {
	s := newSampler(t, Config{Interval: time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		s.Run(ctx)
		close(done)
	}()
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

// TestTickOrder: a tick at or before the previous one changes nothing.
func TestTickOrder(t *testing.T) {
	s := newSampler(t, Config{})
	k := Key{Route: "r"}
	ids := newTraceIDs(8)
	roots(s, k, 1000, ids)
	s.Tick(t0)
	p := s.Probability(k)
	roots(s, k, 50, ids)
	s.Tick(t0)
	s.Tick(t0.Add(-time.Second))
	if got := s.Probability(k); got != p {
		t.Errorf("probability changed on a non-advancing tick: %v -> %v", p, got)
	}
	if n := s.controller(k).count.Load(); n != 50 {
		t.Errorf("non-advancing tick consumed the count: %d left, want 50", n)
	}
}
