package sampling

import (
	"sync"
	"sync/atomic"
	"time"
)

// Tail keep reasons, also the `reason` label of
// inferwatch_traces_tail_kept_total.
const (
	ReasonError = "error" // the call failed
	ReasonSLO   = "slo"   // slower than its model's SLO
	ReasonP99   = "p99"   // slower than its model's current P99
)

// TailAttribute is the span attribute that marks a tail-kept span, with the
// reason as value. Tail-kept spans carry no `th` in their tracestate, so a
// backend gives them no adjusted count and does not count them as part of
// the probability sample.
const TailAttribute = "sampling.tail"

const (
	// minP99Samples: the local P99 estimate is used once it rests on this
	// many calls (about two above the P99).
	minP99Samples = 200
	// p99Window: the local estimate in use is that of the last complete
	// window of at least this long (and minP99Samples calls), so it follows
	// a model whose latency changes; before the first window completes, the
	// running estimate is used.
	p99Window = time.Minute
)

// Tail decides at call end whether to keep the trace of a call the head did
// not sample: calls that failed, that were slower than their model's SLO, or
// slower than the model's current P99 (SetP99's, else the local estimate
// once it has minP99Samples calls). model is the model the call named; ""
// falls back to k.Model. Keeps draw on the budget; when it is exhausted the
// call is not kept and counted. reason is set whenever the call qualified,
// so keep=false with a reason means the budget refused it; a call the head
// sampled returns (false, "") because it is kept already. Errors and SLO
// misses may use the whole budget, P99 keeps only its upper half: they are
// the weakest signal and about 1% of all calls by definition.
func (s *Sampler) Tail(k Key, model string, total time.Duration, failed bool, headSampled bool) (keep bool, reason string) {
	if headSampled {
		return false, ""
	}
	if model == "" {
		model = k.Model
	}
	var r int
	switch {
	case failed:
		r = reasonError
	case s.overSLO(model, total):
		r = reasonSLO
	case s.overP99(model, total):
		r = reasonP99
	default:
		return false, ""
	}
	if !s.budget.take(r == reasonP99) {
		if s.m != nil {
			s.m.budgetExhausted.Inc()
		}
		return false, reasonNames[r]
	}
	if s.m != nil {
		s.m.tailKept[r].Inc()
	}
	return true, reasonNames[r]
}

const (
	reasonError = iota
	reasonSLO
	reasonP99
	numReasons
)

var reasonNames = [numReasons]string{ReasonError, ReasonSLO, ReasonP99}

func (s *Sampler) overSLO(model string, total time.Duration) bool {
	slo, ok := s.slo[model]
	return ok && total > slo
}

func (s *Sampler) overP99(model string, total time.Duration) bool {
	l := (*s.lat.Load())[model]
	if l == nil {
		return false
	}
	p99 := l.external.Load()
	if p99 <= 0 {
		p99 = l.local.Load()
	}
	return p99 > 0 && int64(total) > p99
}

// ObserveLatency feeds a finished call's total duration into the model's
// local P99 estimate. Call it for every finished call, sampled or not.
func (s *Sampler) ObserveLatency(model string, total time.Duration) {
	if total <= 0 {
		return
	}
	l := s.latency(model)
	if l == nil {
		return
	}
	l.hits.Add(1)
	l.mu.Lock()
	l.est.add(float64(total))
	if !l.published && l.est.n >= minP99Samples {
		l.local.Store(int64(l.est.value()))
	}
	l.mu.Unlock()
}

// SetP99 sets the model's P99 from an outside source (window statistics);
// it takes precedence over the local estimate. p99 <= 0 clears it.
func (s *Sampler) SetP99(model string, p99 time.Duration) {
	l := s.latency(model)
	if l == nil {
		return
	}
	l.hits.Add(1)
	l.external.Store(int64(max(p99, 0)))
}

// latency is the P99 state of one model.
type latency struct {
	external atomic.Int64 // SetP99, ns; 0 = none
	local    atomic.Int64 // local estimate in use, ns; 0 = not enough calls yet
	hits     atomic.Int64 // observations since the last tick

	mu          sync.Mutex
	est         p2
	published   bool      // local holds a complete window's estimate
	windowStart time.Time // Tick-owned
	idle        int       // Tick-owned: consecutive ticks without a hit
}

// latency returns the model's latency state, creating it while the models
// tracked stay within MaxKeys; nil beyond.
func (s *Sampler) latency(model string) *latency {
	if l, ok := (*s.lat.Load())[model]; ok {
		return l
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := *s.lat.Load()
	if l, ok := old[model]; ok {
		return l
	}
	if len(old) >= s.maxKeys {
		return nil
	}
	l := &latency{est: newP2(0.99)}
	lat := make(map[string]*latency, len(old)+1)
	for m, ll := range old {
		lat[m] = ll
	}
	lat[model] = l
	s.lat.Store(&lat)
	return l
}

// tickLatency closes P99 windows that are long and full enough, and drops
// models not heard of for evictAfter. Called under tickMu.
func (s *Sampler) tickLatency(now time.Time) {
	lat := *s.lat.Load()
	idle := 0
	for _, l := range lat {
		if l.hits.Swap(0) == 0 {
			l.idle++
		} else {
			l.idle = 0
		}
		if l.idle >= s.evictTicks {
			idle++
		}
		l.mu.Lock()
		if l.windowStart.IsZero() {
			l.windowStart = now
		}
		if now.Sub(l.windowStart) >= p99Window && l.est.n >= minP99Samples {
			l.local.Store(int64(l.est.value()))
			l.published = true
			l.est = newP2(0.99)
			l.windowStart = now
		}
		l.mu.Unlock()
	}
	if idle == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := *s.lat.Load()
	kept := make(map[string]*latency, len(old))
	for m, l := range old {
		if l.idle < s.evictTicks {
			kept[m] = l
		}
	}
	s.lat.Store(&kept)
}

// bucket is the tail budget: a token bucket refilled by Tick, holding at
// most one second's worth (at least one token). Tokens are fixed-point so
// fractional rates work without a lock.
type bucket struct {
	tokens   atomic.Int64
	rate     float64 // tokens per second
	capacity int64
	reserve  int64 // tokens below which P99 keeps are refused
}

const tokenUnit = 1 << 20

func (b *bucket) init(perSecond float64) {
	b.rate = perSecond
	b.capacity = max(int64(perSecond*tokenUnit), tokenUnit)
	if b.capacity >= 2*tokenUnit {
		b.reserve = b.capacity / 2
	}
	b.tokens.Store(b.capacity)
}

// take spends one token; a P99 keep must leave the reserve.
func (b *bucket) take(p99 bool) bool {
	need := int64(tokenUnit)
	if p99 {
		need += b.reserve
	}
	for {
		t := b.tokens.Load()
		if t < need {
			return false
		}
		if b.tokens.CompareAndSwap(t, t-tokenUnit) {
			return true
		}
	}
}

func (b *bucket) refill(secs float64) {
	add := int64(b.rate * secs * tokenUnit)
	for {
		t := b.tokens.Load()
		n := min(t+add, b.capacity)
		if b.tokens.CompareAndSwap(t, n) {
			return
		}
	}
}
