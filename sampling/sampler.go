package sampling

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// Defaults of Config.
const (
	DefaultTargetPerSecond     = 100 // 1000 QPS → 10%
	DefaultFloor               = 0.001
	DefaultCeiling             = 1.0
	DefaultInterval            = time.Second
	DefaultSmoothing           = 0.3
	DefaultMaxKeys             = 1000
	DefaultTailBudgetPerSecond = 20
)

const (
	// riseJump, riseSigmas: an observed QPS more than riseJump above the
	// smoothed one, and further above it than riseSigmas standard deviations
	// of Poisson counting noise, is taken at once instead of smoothed. A
	// surge then cuts the probability within one interval, so the trace
	// volume overshoots the target for one interval only, while counting
	// noise (small counts included) does not trigger it.
	riseJump   = 0.5
	riseSigmas = 5

	// evictAfter: a key that saw no call for this long gives its slot back.
	evictAfter = 5 * time.Minute
)

// OtherRoute and OtherModel name the controller that keys beyond MaxKeys
// share (also the labels of its probability gauge).
const (
	OtherRoute = "other"
	OtherModel = "other"
)

var otherKey = Key{Route: OtherRoute, Model: OtherModel}

// Config configures a Sampler. Zero values take the defaults; negative or
// out-of-range values are an error.
type Config struct {
	// TargetPerSecond is the head-sampled (root) traces per second to keep
	// per Key. Default 100, so 1000 QPS gives 10%.
	TargetPerSecond float64
	// Floor and Ceiling bound the head probability. Defaults 0.001 and 1
	// (Floor defaults to Ceiling when Ceiling is set below 0.001).
	Floor, Ceiling float64
	// Interval is how often Run recomputes the probabilities. Default 1s.
	Interval time.Duration
	// Smoothing is the weight of the newest QPS observation in the moving
	// average the probability follows. Default 0.3. The probability does
	// not oscillate whatever the weight: it is computed from the offered
	// QPS, which every call is counted in whether sampled or not, so the
	// probability never feeds back into its own input (see docs/sampling.md).
	Smoothing float64
	// MaxKeys bounds the keys with a probability of their own; beyond it
	// keys share one "other" controller. Default 1000.
	MaxKeys int
	// TailBudgetPerSecond caps tail keeps per second across keys (token
	// bucket, burst of one second's worth). Default 20.
	TailBudgetPerSecond float64
	// SLO is the latency objective per model: a call slower than its
	// model's SLO is tail-kept.
	SLO map[string]time.Duration
	// Metrics receives the inferwatch_traces_* metrics; may be nil.
	Metrics *metrics.Set
}

// Key is what head probabilities are kept per. Model is "" when the head
// decision happens before the model is known (a gRPC model name is in the
// body).
type Key struct{ Route, Model string }

// Parent describes the incoming trace context.
type Parent struct {
	// Present: a valid traceparent came in. When false the call starts a
	// trace and TraceState is ignored (W3C: no tracestate without
	// traceparent).
	Present bool
	// Sampled is traceparent's sampled flag.
	Sampled bool
	// TraceState is the incoming tracestate header, as received.
	TraceState string
}

// Decision is the head sampling decision for one call.
type Decision struct {
	// Sampled: record and export the trace; propagate the sampled flag.
	Sampled bool
	// Probability is the probability the decision was made with: for a
	// root, the key's (exactly what TraceState's th encodes when sampled);
	// for a sampled parent, its th's. 0 when unknown: the parent decided
	// without a usable threshold, or did not sample.
	Probability float64
	// TraceState is the tracestate to record on the spans and propagate:
	// the parent's, its OpenTelemetry `ot=th` set to the threshold used
	// when sampled with a known probability, and without th otherwise (a
	// span kept later by Tail then has no adjusted count). A parent
	// tracestate that is not a valid W3C list is dropped. "" when there is
	// nothing to propagate.
	TraceState string
}

// Sampler makes head and tail sampling decisions. Its methods are safe for
// concurrent use.
type Sampler struct {
	target      float64
	ceil, floor *state // shared states: new keys start at ceil (warm), then floor
	alpha       float64
	interval    time.Duration
	maxKeys     int
	warmCalls   int64 // root calls a new key keeps at the ceiling before its first tick
	evictTicks  int
	slo         map[string]time.Duration
	budget      bucket
	m           *samplerMetrics // nil without Config.Metrics

	// keys maps Key to its controller. It is copied on write (new keys are
	// rare, lookups are every call), so Head reads it without a lock.
	keys  atomic.Pointer[map[Key]*controller]
	full  atomic.Bool // keys holds MaxKeys: unknown keys go to other without the lock
	other *controller
	mu    sync.Mutex // serialises writers of keys and latency

	lat atomic.Pointer[map[string]*latency] // per model, copied on write like keys

	tickMu   sync.Mutex
	lastTick time.Time
}

// state is one key's current probability, swapped whole by Tick.
type state struct {
	threshold
	traceState string // "ot=th:<th>": what a sampled root propagates
	// warm: the key has not been through a tick yet; after warmCalls root
	// calls it samples at the floor until the first recompute.
	warm bool
}

func newState(th threshold, warm bool) *state {
	return &state{threshold: th, traceState: "ot=th:" + th.th, warm: warm}
}

// controller adapts the probability of one Key.
type controller struct {
	key   Key
	count atomic.Int64 // root calls since the last tick
	state atomic.Pointer[state]

	// Owned by Tick (tickMu).
	qps    float64 // smoothed root calls per second
	seeded bool    // qps holds an observation
	idle   int     // consecutive ticks without a call
	gauge  string  // probability gauge registered for this controller, "" if none
}

// New returns a Sampler for c, or an error naming the first bad setting.
func New(c Config) (*Sampler, error) {
	c, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Sampler{
		target:     c.TargetPerSecond,
		ceil:       newState(newThreshold(c.Ceiling), true),
		floor:      newState(newThreshold(c.Floor), false),
		alpha:      c.Smoothing,
		interval:   c.Interval,
		maxKeys:    c.MaxKeys,
		evictTicks: max(1, int(math.Ceil(float64(evictAfter)/float64(c.Interval)))),
		slo:        make(map[string]time.Duration, len(c.SLO)),
	}
	s.budget.init(c.TailBudgetPerSecond)
	// At the ceiling, keeping one interval's target takes target·interval/ceiling calls.
	s.warmCalls = max(1, int64(math.Ceil(c.TargetPerSecond*c.Interval.Seconds()/s.ceil.p)))
	for model, d := range c.SLO {
		s.slo[model] = d
	}
	keys := make(map[Key]*controller)
	s.keys.Store(&keys)
	lat := make(map[string]*latency)
	s.lat.Store(&lat)
	s.other = s.newController(otherKey)
	if c.Metrics != nil {
		s.m = newSamplerMetrics(c.Metrics)
	}
	return s, nil
}

func (c Config) withDefaults() (Config, error) {
	if c.TargetPerSecond == 0 {
		c.TargetPerSecond = DefaultTargetPerSecond
	}
	if !(c.TargetPerSecond > 0) || math.IsInf(c.TargetPerSecond, 0) {
		return c, fmt.Errorf("sampling: TargetPerSecond %v must be a positive number of traces per second", c.TargetPerSecond)
	}
	if c.Ceiling == 0 {
		c.Ceiling = DefaultCeiling
	}
	if !(c.Ceiling > 0 && c.Ceiling <= 1) {
		return c, fmt.Errorf("sampling: Ceiling %v must be in (0, 1]", c.Ceiling)
	}
	if c.Floor == 0 {
		c.Floor = min(DefaultFloor, c.Ceiling)
	}
	if !(c.Floor > 0 && c.Floor <= c.Ceiling) {
		return c, fmt.Errorf("sampling: Floor %v must be in (0, Ceiling %v]", c.Floor, c.Ceiling)
	}
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.Interval < 0 {
		return c, fmt.Errorf("sampling: Interval %v must be positive", c.Interval)
	}
	if c.Smoothing == 0 {
		c.Smoothing = DefaultSmoothing
	}
	if !(c.Smoothing > 0 && c.Smoothing <= 1) {
		return c, fmt.Errorf("sampling: Smoothing %v must be in (0, 1]", c.Smoothing)
	}
	if c.MaxKeys == 0 {
		c.MaxKeys = DefaultMaxKeys
	}
	if c.MaxKeys < 0 {
		return c, fmt.Errorf("sampling: MaxKeys %d must be positive", c.MaxKeys)
	}
	if c.TailBudgetPerSecond == 0 {
		c.TailBudgetPerSecond = DefaultTailBudgetPerSecond
	}
	if !(c.TailBudgetPerSecond > 0) || math.IsInf(c.TailBudgetPerSecond, 0) {
		return c, fmt.Errorf("sampling: TailBudgetPerSecond %v must be a positive number of traces per second", c.TailBudgetPerSecond)
	}
	for model, d := range c.SLO {
		if d <= 0 {
			return c, fmt.Errorf("sampling: SLO for model %q is %v; it must be positive", model, d)
		}
	}
	return c, nil
}

func (s *Sampler) newController(k Key) *controller {
	c := &controller{key: k}
	c.state.Store(s.ceil)
	return c
}

// Head decides at call start whether the call's trace is sampled. traceID
// is the W3C trace id; its last 7 bytes must be random when the sidecar
// starts the trace. Calls with a parent follow the parent's decision and do
// not count towards k's QPS: the target is about the traces this sidecar
// starts.
func (s *Sampler) Head(k Key, traceID [16]byte, parent Parent) Decision {
	var d Decision
	if parent.Present {
		d = headParent(traceID, parent)
	} else {
		c := s.controller(k)
		n := c.count.Add(1)
		st := c.state.Load()
		if st.warm && n > s.warmCalls {
			st = s.floor
		}
		d.Probability = st.p
		if traceRandomness(traceID) >= st.t {
			d.Sampled = true
			d.TraceState = st.traceState
		}
	}
	if s.m != nil {
		s.m.considered.Inc()
		if d.Sampled {
			s.m.headKept.Inc()
		}
	}
	return d
}

// headParent follows an incoming decision (parent-based sampling).
func headParent(traceID [16]byte, parent Parent) Decision {
	d := Decision{Sampled: parent.Sampled}
	if parent.TraceState == "" {
		return d
	}
	ts := parseTraceState(parent.TraceState)
	if !ts.valid {
		// W3C lets a vendor discard a tracestate it cannot parse. Passing it
		// on could carry a threshold we cannot vouch for onto our spans.
		return d
	}
	if parent.Sampled && ts.otOK && ts.thOK && (!ts.rvSet || ts.rvOK) {
		r := traceRandomness(traceID)
		if ts.rvOK {
			r = ts.rv
		}
		// The spec asks parent-based samplers to check the threshold
		// against the randomness and erase it when inconsistent.
		if r >= ts.th {
			d.Probability = thresholdProbability(ts.th)
			d.TraceState = parent.TraceState
			if !ts.clean {
				d.TraceState = canonicalTraceState(parent.TraceState)
			}
			return d
		}
	}
	// Not sampled, or sampled without a usable threshold: the outgoing
	// tracestate must not claim one.
	if ts.thSet || ts.hasOT && !ts.otOK {
		d.TraceState = rewriteTraceState(parent.TraceState, &ts, "")
	} else if ts.clean {
		d.TraceState = parent.TraceState
	} else {
		d.TraceState = canonicalTraceState(parent.TraceState)
	}
	return d
}

// controller returns k's controller, creating it while there is room.
func (s *Sampler) controller(k Key) *controller {
	if c, ok := (*s.keys.Load())[k]; ok {
		return c
	}
	if k == otherKey || s.full.Load() {
		return s.other
	}
	return s.addKey(k)
}

func (s *Sampler) addKey(k Key) *controller {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := *s.keys.Load()
	if c, ok := old[k]; ok {
		return c
	}
	if len(old) >= s.maxKeys {
		s.full.Store(true)
		if s.m != nil && s.other.gauge == "" {
			s.other.gauge = s.m.addGauge(s.other)
		}
		return s.other
	}
	c := s.newController(k)
	keys := make(map[Key]*controller, len(old)+1)
	for kk, cc := range old {
		keys[kk] = cc
	}
	keys[k] = c
	s.keys.Store(&keys)
	if s.m != nil {
		c.gauge = s.m.addGauge(c)
	}
	return c
}

// Probability is k's current head probability (the one its th encodes). A
// key not seen yet reports what it would start with.
func (s *Sampler) Probability(k Key) float64 {
	if c, ok := (*s.keys.Load())[k]; ok {
		return c.state.Load().p
	}
	if k == otherKey || s.full.Load() {
		return s.other.state.Load().p
	}
	return s.ceil.p
}

// Tick recomputes every key's probability from the root calls Head counted
// since the previous tick, refills the tail budget for the time elapsed,
// and rolls the local P99 windows. The first tick takes Interval as the
// time elapsed; a tick not after the previous one does nothing. Run calls
// it every Interval; tests call it with simulated times.
func (s *Sampler) Tick(now time.Time) {
	s.tickMu.Lock()
	defer s.tickMu.Unlock()
	elapsed := s.interval
	if !s.lastTick.IsZero() {
		elapsed = now.Sub(s.lastTick)
		if elapsed <= 0 {
			return
		}
	}
	s.lastTick = now
	secs := elapsed.Seconds()

	keys := *s.keys.Load()
	idle := 0
	for _, c := range keys {
		s.recompute(c, secs)
		if c.idle >= s.evictTicks {
			idle++
		}
	}
	s.recompute(s.other, secs)
	if idle > 0 {
		s.evict()
	}
	s.budget.refill(secs)
	s.tickLatency(now)
}

// recompute moves c's probability towards target/QPS. The QPS is smoothed
// by an exponential moving average, except that a clear surge is taken at
// once (riseJump).
func (s *Sampler) recompute(c *controller, secs float64) {
	n := c.count.Swap(0)
	if n == 0 {
		c.idle++
	} else {
		c.idle = 0
	}
	obs := float64(n) / secs
	switch {
	case !c.seeded:
		if n == 0 {
			return // stay warm until there is something to measure
		}
		c.qps, c.seeded = obs, true
	case obs > c.qps*(1+riseJump) && float64(n) > c.qps*secs+riseSigmas*math.Sqrt(c.qps*secs):
		c.qps = obs
	default:
		c.qps += s.alpha * (obs - c.qps)
	}
	p := s.ceil.p
	if c.qps > 0 {
		p = min(max(s.target/c.qps, s.floor.p), s.ceil.p)
	}
	cur := c.state.Load()
	if a := acceptCount(p); cur.warm || a != maxAdjusted-cur.t {
		c.state.Store(newState(newThreshold(p), false))
	}
}

// evict drops keys idle for evictAfter, freeing their slots.
func (s *Sampler) evict() {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := *s.keys.Load()
	keys := make(map[Key]*controller, len(old))
	for k, c := range old {
		if c.idle >= s.evictTicks {
			if s.m != nil && c.gauge != "" {
				s.m.removeGauge(c.gauge)
			}
			continue
		}
		keys[k] = c
	}
	s.keys.Store(&keys)
	s.full.Store(false)
}

// Run calls Tick every Interval until ctx is done.
func (s *Sampler) Run(ctx context.Context) {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.Tick(now)
		}
	}
}
