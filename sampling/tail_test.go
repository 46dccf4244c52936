package sampling

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestTailKeepsSlowAndFailing: with 1% of calls slow and 0.5% failing, every
// one of them is kept (head or tail) while the head rate stays on target.
func TestTailKeepsSlowAndFailing(t *testing.T) {
	tests := []struct {
		name      string
		qps       int
		budget    float64 // 0: default 20/s
		slowEvery int
		failEvery int
	}{
		// 1000 QPS: 15 slow or failing calls a second plus ~1% above the
		// P99; a budget of 40/s covers them.
		{"1000 QPS, budget sized to the load", 1000, 40, 100, 200},
		{"500 QPS, default budget", 500, 0, 100, 200},
		{"200 QPS, default budget", 200, 0, 100, 200},
	}
	const secs = 30
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSampler(t, Config{TailBudgetPerSecond: tt.budget, SLO: map[string]time.Duration{"m": 200 * time.Millisecond}})
			k := Key{Route: "/v2/models/m/infer", Model: "m"}
			ids := newTraceIDs(20)
			lat := rand.New(rand.NewPCG(21, 22))
			now := t0
			s.Tick(now)
			var interesting, interestingKept, headSettled, tailKept int
			for sec := range secs {
				for i := range tt.qps {
					call := sec*tt.qps + i
					d := s.Head(k, ids.next(), Parent{})
					total := time.Duration(10+lat.IntN(40)) * time.Millisecond
					slow := call%tt.slowEvery == 0
					failed := call%tt.failEvery == 7
					if slow {
						total = time.Duration(600+lat.IntN(200)) * time.Millisecond
					}
					s.ObserveLatency("m", total)
					keep, reason := s.Tail(k, "m", total, failed, d.Sampled)
					if keep {
						tailKept++
					}
					if slow || failed {
						interesting++
						if d.Sampled || keep {
							interestingKept++
						} else {
							t.Errorf("second %d call %d (slow %v, failed %v) not kept: reason %q", sec, i, slow, failed, reason)
						}
						if !d.Sampled {
							want := ReasonSLO
							if failed {
								want = ReasonError
							}
							if reason != want {
								t.Errorf("call %d: reason %q, want %q", call, reason, want)
							}
						}
					}
					if d.Sampled && sec >= 5 {
						headSettled++
					}
				}
				now = now.Add(time.Second)
				s.Tick(now)
			}
			if interestingKept != interesting {
				t.Errorf("kept %d of %d slow or failing calls, want all", interestingKept, interesting)
			}
			target := math.Min(DefaultTargetPerSecond, float64(tt.qps))
			if rate := float64(headSettled) / (secs - 5); math.Abs(rate-target) > 0.15*target {
				t.Errorf("head rate %.1f/s, want %.0f ±15%%", rate, target)
			}
			budget := cmpOr(tt.budget, DefaultTailBudgetPerSecond)
			if limit := budget*secs + budget; float64(tailKept) > limit {
				t.Errorf("tail kept %d in %ds, over the budget (%v)", tailKept, secs, limit)
			}
		})
	}
}

func cmpOr(v, def float64) float64 {
	if v == 0 {
		return def
	}
	return v
}

// TestTailStorm: a storm of failing calls is capped by the budget, and the
// refusals are counted.
func TestTailStorm(t *testing.T) {
	s := newSampler(t, Config{})
	k := Key{Route: "r", Model: "m"}
	now := t0
	kept, refused := 0, 0
	for range 10 {
		for range 1000 {
			keep, reason := s.Tail(k, "m", 5*time.Millisecond, true, false)
			if reason != ReasonError {
				t.Fatalf("reason %q, want error", reason)
			}
			if keep {
				kept++
			} else {
				refused++
			}
		}
		now = now.Add(time.Second)
		s.Tick(now)
	}
	// 20 in the bucket to start with, then 20 per second refilled.
	if kept < 200 || kept > 220 {
		t.Errorf("storm: kept %d in 10s, want 200..220 (budget 20/s)", kept)
	}
	if kept+refused != 10000 {
		t.Errorf("kept %d + refused %d != 10000", kept, refused)
	}
}

// TestTailBudgetReserve: P99 keeps cannot take the lower half of the
// bucket, so errors and SLO misses still find tokens after a burst of them.
func TestTailBudgetReserve(t *testing.T) {
	s := newSampler(t, Config{})
	k := Key{Route: "r", Model: "m"}
	s.SetP99("m", 10*time.Millisecond)
	count := func(failed bool, wantReason string) int {
		n := 0
		for range 100 {
			keep, reason := s.Tail(k, "m", 20*time.Millisecond, failed, false)
			if reason != wantReason {
				t.Fatalf("reason %q, want %q", reason, wantReason)
			}
			if keep {
				n++
			}
		}
		return n
	}
	if n := count(false, ReasonP99); n != 10 {
		t.Errorf("P99 keeps from a full bucket of 20: %d, want 10", n)
	}
	if n := count(true, ReasonError); n != 10 {
		t.Errorf("error keeps after the P99 burst: %d, want the 10 reserved", n)
	}
	s.Tick(t0)
	if n := count(true, ReasonError); n != 20 {
		t.Errorf("error keeps after a refill: %d, want 20", n)
	}
}

func TestTailP99(t *testing.T) {
	s := newSampler(t, Config{TailBudgetPerSecond: 1e6})
	k := Key{Route: "/v2/models/m/infer", Model: "m"}
	lat := rand.New(rand.NewPCG(23, 24))
	fastKept, fast := 0, 0
	for i := range 20_000 {
		total := time.Duration(10+lat.IntN(40)) * time.Millisecond
		slow := i%200 == 0
		if slow {
			total = 400 * time.Millisecond
		}
		s.ObserveLatency("m", total)
		keep, reason := s.Tail(k, "", total, false, false) // model from the key
		switch {
		case i < minP99Samples-1:
			if keep || reason != "" {
				t.Fatalf("call %d kept (%q) before the P99 estimate had enough calls", i, reason)
			}
		case slow:
			if !keep || reason != ReasonP99 {
				t.Fatalf("slow call %d: keep %v reason %q, want p99", i, keep, reason)
			}
		default:
			fast++
			if keep {
				fastKept++
			}
		}
	}
	// About 1% of the fast calls are above the P99, by definition.
	if frac := float64(fastKept) / float64(fast); frac > 0.02 {
		t.Errorf("%.2f%% of fast calls kept as above P99, want about 1%%", 100*frac)
	}
	// An outside P99 takes precedence; clearing it returns to the estimate.
	s.SetP99("m", 30*time.Millisecond)
	if keep, reason := s.Tail(k, "m", 40*time.Millisecond, false, false); !keep || reason != ReasonP99 {
		t.Errorf("with SetP99 30ms a 40ms call: keep %v reason %q", keep, reason)
	}
	s.SetP99("m", 0)
	if keep, _ := s.Tail(k, "m", 40*time.Millisecond, false, false); keep {
		t.Error("after clearing SetP99 a 40ms call was kept")
	}
	if keep, reason := s.Tail(k, "other-model", time.Hour, false, false); keep || reason != "" {
		t.Errorf("model without estimate: keep %v reason %q", keep, reason)
	}
	if keep, reason := s.Tail(k, "m", time.Hour, true, true); keep || reason != "" {
		t.Errorf("head-sampled call: keep %v reason %q, want (false, \"\")", keep, reason)
	}
}

// TestP99Window: the local estimate follows a model whose latency changes,
// one complete window later.
func TestP99Window(t *testing.T) {
	s := newSampler(t, Config{})
	lat := rand.New(rand.NewPCG(25, 26))
	p99 := func() time.Duration { return time.Duration((*s.lat.Load())["m"].local.Load()) }
	observe := func(base time.Duration) {
		for range 5000 {
			s.ObserveLatency("m", base+time.Duration(lat.IntN(int(base))))
		}
	}
	now := t0
	observe(10 * time.Millisecond) // 10..20ms: P99 ≈ 19.9ms
	if got := p99(); got < 19*time.Millisecond || got > 20*time.Millisecond {
		t.Errorf("running estimate %v, want about 19.9ms", got)
	}
	s.Tick(now)
	now = now.Add(p99Window)
	s.Tick(now) // closes the first window
	observe(100 * time.Millisecond)
	if got := p99(); got > 20*time.Millisecond {
		t.Errorf("estimate moved to %v before the window closed", got)
	}
	now = now.Add(p99Window)
	s.Tick(now)
	if got := p99(); got < 190*time.Millisecond || got > 200*time.Millisecond {
		t.Errorf("estimate after the latency change %v, want about 199ms", got)
	}
}

func TestP2Accuracy(t *testing.T) {
	r := rand.New(rand.NewPCG(27, 28))
	tests := []struct {
		name string
		gen  func() float64
	}{
		{"uniform", func() float64 { return r.Float64() }},
		{"exponential", func() float64 { return r.ExpFloat64() }},
		{"lognormal", func() float64 { return math.Exp(r.NormFloat64()) }},
		{"0.5% slow", func() float64 {
			if r.IntN(200) == 0 {
				return 10 + r.Float64()
			}
			return 1 + r.Float64()
		}},
	}
	for _, tt := range tests {
		e := newP2(0.99)
		xs := make([]float64, 100_000)
		for i := range xs {
			xs[i] = tt.gen()
			e.add(xs[i])
		}
		slices.Sort(xs)
		exact := xs[int(0.99*float64(len(xs)))]
		if got := e.value(); math.Abs(got-exact)/exact > 0.15 {
			t.Errorf("%s: P² p99 %v, exact %v", tt.name, got, exact)
		}
	}
	var e p2 = newP2(0.99)
	for _, x := range []float64{3, 1, 2} {
		e.add(x)
	}
	if e.value() != 3 {
		t.Errorf("estimate from 3 values = %v, want their max", e.value())
	}
}
