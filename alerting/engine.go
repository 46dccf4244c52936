package alerting

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/inferwatch/inferwatch/record"
	"github.com/inferwatch/inferwatch/windowstats"
)

// Options configure an Engine. Zero fields take the defaults.
type Options struct {
	Stats     windowstats.Options
	Config    Config
	Metrics   *metrics.Set // where the gauges go; nil: no gauges
	Notifiers []Notifier
	// InFlight reports the upstream calls in flight for a snapshot; nil: 0.
	InFlight func(model, version string) int64
	// Host returns the upstream's GPU and kernel facts over [from, to] for
	// a snapshot, once for each of its two windows; nil: snapshots carry
	// no host facts. It runs on the Tick goroutine under the engine's lock,
	// so it must answer from memory without blocking.
	//
	// The facts are queried for the window's span rather than summed from
	// the calls' record.HostFacts: a call's facts are the upstream's over
	// the call's own span, shared by every call in flight with it, so a sum
	// over a window's calls counts the same run-queue wait once per
	// concurrent call and misses whatever happened between calls; OOM kills
	// are not in the record at all. A span query counts each sample once,
	// costs nothing per call, and runs only when an alert is captured. The
	// facts are the upstream process's, shared by every model it serves.
	Host func(model, version string, from, to time.Time) *HostBreakdown
	// Baseline, when set, sees every closed window of a model (so it can
	// keep its history) and gives the model's seasonal P99 band (seconds)
	// for it, at its end and QPS, from a fitted baseline.Model; ok is false
	// while the model's history is too short (under two cycles), and then
	// P99OverBaseline keeps its trailing median. It runs under the engine's
	// lock on the Tick goroutine, so it must answer from memory.
	Baseline func(model, version string, w *windowstats.WindowView) (expected, upper float64, ok bool)
	// Explain returns annotations added to an alert as it is made (the
	// diagnosis' top causes, docs/diagnose.md): model and version, the
	// snapshot's breaching window start (from), the window being judged
	// and the snapshot's host facts of it. nil: none. It runs on the Tick
	// goroutine under the engine's lock, so it must answer from memory.
	Explain func(model, version string, from time.Time, w windowstats.WindowView, host *HostBreakdown) map[string]string
	// Labels are added to every alert's labels (instance, pod, namespace).
	Labels       map[string]string
	GeneratorURL string
	Resend       time.Duration // re-send of firing alerts; default 1m
	KeepResolved time.Duration // how long Alerts lists resolved ones; default 1h (at most 100)
	SlowCalls    int           // slowest calls in a snapshot; default 10
	// Grace is how long after a window's end Run closes it, so that records
	// still in the pipeline's queue land in it; default 250ms.
	Grace time.Duration
}

// maxResolved bounds the resolved alerts kept for Alerts.
const maxResolved = 100

// Engine is the sidecar's live alerting: a record.Sink feeding window
// statistics, and at each window's close the window rules per model (the
// seed's four and the TTFT SLO), their alerts, the gauges and the
// notifiers. Observe runs on the pipeline goroutine; Tick (or Run) on the
// owner's; Stats and Alerts on any.
type Engine struct {
	o        Options
	stats    *windowstats.Stats
	defaults Thresholds
	models   map[string]Thresholds
	fitSpan  int

	// notifyMu is held from deciding what to notify until the notifiers
	// have it, by Tick and SetCondition, which run on different
	// goroutines: otherwise a re-send decided by Tick could reach a
	// notifier after the resolve SetCondition decided later, and re-open
	// the episode there. Notifiers do not block (Notifier), so neither
	// waits long. Taken before mu.
	notifyMu sync.Mutex

	mu       sync.Mutex
	states   map[modelKey]*modelState
	resolved []Alert             // newest last
	conds    map[string]*episode // raised by SetCondition, by fingerprint
	lastTick time.Time           // now of the latest Tick
}

type modelKey struct{ model, version string }

// modelState is one (model, version) as the engine follows it.
type modelState struct {
	key    modelKey
	rules  *rules
	last   time.Time // start of the last window evaluated
	prev   windowstats.WindowView
	refs   [numRules]windowstats.WindowView // last clear window before each rule's streak
	alerts [numRules]*episode
	g      *gauges
}

// episode is an active alert and when it was last sent.
type episode struct {
	alert    Alert
	lastSent time.Time
}

// NewEngine checks the options and returns an engine with no models yet.
func NewEngine(o Options) (*Engine, error) {
	def, models, err := o.Config.resolved()
	if err != nil {
		return nil, err
	}
	s, err := windowstats.New(o.Stats)
	if err != nil {
		return nil, fmt.Errorf("alerting: window statistics: %w", err)
	}
	if o.Resend <= 0 {
		o.Resend = time.Minute
	}
	if o.KeepResolved <= 0 {
		o.KeepResolved = time.Hour
	}
	if o.SlowCalls <= 0 {
		o.SlowCalls = 10
	}
	if o.Grace <= 0 {
		o.Grace = 250 * time.Millisecond
	}
	if o.Metrics != nil {
		for model, th := range models {
			exportSLA(o.Metrics, model, th)
		}
	}
	return &Engine{
		o:        o,
		stats:    s,
		defaults: def,
		models:   models,
		fitSpan:  s.History(),
		states:   make(map[modelKey]*modelState),
	}, nil
}

// Observe feeds a finished call to the window statistics.
func (e *Engine) Observe(c *record.Call) { e.stats.Observe(c) }

// Stats returns the window statistics of every model, for /api/v1/stats.
func (e *Engine) Stats() []windowstats.ModelView { return e.stats.Snapshot() }

// Window is the window statistics' window length.
func (e *Engine) Window() time.Duration { return e.stats.Window() }

// Run ticks just after each window's end until ctx is done.
func (e *Engine) Run(ctx context.Context) {
	w := e.stats.Window()
	for {
		now := time.Now()
		next := now.Truncate(w).Add(w + e.o.Grace)
		if next.Sub(now) > w { // still inside the grace of the last end
			next = next.Add(-w)
		}
		t := time.NewTimer(next.Sub(now))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		e.Tick(ctx, time.Now().Add(-e.o.Grace))
	}
}

// Tick closes the windows that ended by now, evaluates the rules on every
// window closed since the last Tick, in order, updates the gauges, and hands
// the transitions and due re-sends to the notifiers. Calling it again with
// the same now does nothing new.
func (e *Engine) Tick(ctx context.Context, now time.Time) {
	e.notifyMu.Lock()
	defer e.notifyMu.Unlock()
	e.stats.Roll(now)
	views := e.stats.Snapshot()
	var out []Alert
	e.mu.Lock()
	for i := range views {
		v := &views[i]
		ms := e.state(v)
		for j := range v.Closed {
			if w := &v.Closed[j]; w.Start.After(ms.last) {
				out = e.evaluate(ms, w, out)
			}
		}
		e.setGauges(ms, v)
	}
	out = e.resend(now, out)
	if now.After(e.lastTick) {
		e.lastTick = now
	}
	e.mu.Unlock()
	if len(out) > 0 {
		for _, n := range e.o.Notifiers {
			n.Notify(ctx, out)
		}
	}
}

// state finds or makes a model's state. Held: e.mu.
func (e *Engine) state(v *windowstats.ModelView) *modelState {
	k := modelKey{v.Model, v.Version}
	ms := e.states[k]
	if ms == nil {
		th, ok := e.models[v.Model]
		if !ok {
			th = e.defaults
		}
		ms = &modelState{key: k, rules: newRules(th, e.fitSpan)}
		if e.o.Metrics != nil {
			ms.g = newGauges(e.o.Metrics, k)
			exportSLA(e.o.Metrics, k.model, th)
		}
		e.states[k] = ms
	}
	return ms
}

// checkP99 judges P99OverBaseline against the seasonal band when
// Options.Baseline has one for the model, else against the trailing median.
func (e *Engine) checkP99(ms *modelState, w *windowstats.WindowView) check {
	if e.o.Baseline != nil {
		if exp, up, ok := e.o.Baseline(ms.key.model, ms.key.version, w); ok {
			return ms.rules.checkP99Band(w.P99, w.Count, exp, up)
		}
	}
	return ms.rules.checkP99(w.P99, w.Count)
}

// evaluate runs the rules on one closed window. Held: e.mu.
func (e *Engine) evaluate(ms *modelState, w *windowstats.WindowView, out []Alert) []Alert {
	r := ms.rules
	th := r.th
	at := w.End()
	checks := [numRules]check{
		ruleMean:   r.checkMean(w),
		ruleP99:    e.checkP99(ms, w),
		ruleStdDev: r.checkStdDev(w),
		ruleSlope:  r.checkSlope(w.Fit),
		ruleTTFT:   r.checkTTFT(w),
	}
	for i, c := range checks {
		if th.disabled(ruleNames[i]) {
			continue
		}
		m := &r.machines[i]
		before := m.state
		v := c.v
		if v == unknown && w.Count == 0 && m.state == StateFiring {
			// Too few calls to judge holds a firing alert; no calls at all
			// is the episode over.
			v = clear
		}
		switch m.step(v, th.forWindows(i), th.HoldDown) {
		case toPending:
			// The root cause is captured at the first breaching window: by
			// the time the rule has held long enough to fire, the window
			// that moved may already be the reference.
			a := e.newAlert(ms, i, c, StatePending, at, w, e.snapshot(ms, i, w, at))
			ms.alerts[i] = &episode{alert: a}
		case toFiring:
			var snap *Snapshot
			if ep := ms.alerts[i]; ep != nil && ep.alert.Snapshot != nil {
				snap = e.firingSnapshot(ms, i, w, at, ep.alert.Snapshot)
			} else {
				snap = e.snapshot(ms, i, w, at) // fired on its first breach
			}
			a := e.newAlert(ms, i, c, StateFiring, at, w, snap)
			ms.alerts[i] = &episode{alert: a, lastSent: at}
			out = append(out, a)
		case toResolved:
			if ep := ms.alerts[i]; ep != nil {
				a := ep.alert
				a.State, a.EndsAt = StateResolved, at
				e.resolved = append(e.resolved, a)
				if len(e.resolved) > maxResolved {
					e.resolved = slices.Delete(e.resolved, 0, len(e.resolved)-maxResolved)
				}
				out = append(out, a)
			}
			ms.alerts[i] = nil
		case dropped:
			ms.alerts[i] = nil
		}
		// The reference window of a snapshot is the last one judged clear
		// before a streak began.
		if before == "" && m.state == "" && c.v == clear {
			ms.refs[i] = *w
		}
	}
	ms.prev = *w
	ms.last = w.Start
	return out
}

// newAlert makes an alert for rule i of ms from check c on window w, with
// its snapshot.
func (e *Engine) newAlert(ms *modelState, i int, c check, st State, at time.Time, w *windowstats.WindowView, snap *Snapshot) Alert {
	labels := make(map[string]string, 3+len(e.o.Labels))
	maps.Copy(labels, e.o.Labels)
	labels["alertname"] = ruleNames[i]
	labels["model"] = ms.key.model
	labels["version"] = ms.key.version
	a := Alert{
		Labels:       labels,
		Annotations:  annotations(ms, i, c, w),
		State:        st,
		StartsAt:     at,
		GeneratorURL: e.o.GeneratorURL,
		Snapshot:     snap,
	}
	if h := hostText(snap); h != "" {
		a.Annotations["host_facts"] = h
	}
	if e.o.Explain != nil && snap != nil {
		for k, v := range e.o.Explain(ms.key.model, ms.key.version, snap.Current.Start, *w, snap.Current.Host) {
			if _, taken := a.Annotations[k]; !taken {
				a.Annotations[k] = v
			}
		}
	}
	return a
}

func annotations(ms *modelState, i int, c check, w *windowstats.WindowView) map[string]string {
	th := ms.rules.th
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }
	name := ms.key.model + ":" + ms.key.version
	a := map[string]string{
		"value":     f(c.value),
		"threshold": f(c.threshold),
		"window":    w.Start.UTC().Format(time.RFC3339) + "/" + f(w.Seconds) + "s",
	}
	switch i {
	case ruleMean:
		a["sla"] = f(c.ref)
		a["summary"] = fmt.Sprintf("%s: mean latency (EMA) %s is over %v× its SLA of %s",
			name, durationText(c.value), th.SLAFactor, durationText(c.ref))
	case ruleP99:
		a["baseline"] = f(c.ref)
		a["summary"] = fmt.Sprintf("%s: P99 latency %s is over %v× its baseline of %s for %d windows",
			name, durationText(c.value), th.P99Factor, durationText(c.ref), th.P99For)
	case ruleStdDev:
		a["reference"] = f(c.ref)
		a["summary"] = fmt.Sprintf("%s: latency standard deviation %s jumped over %v× its reference of %s",
			name, durationText(c.value), 1+th.StdDevJump, durationText(c.ref))
	case ruleTTFT:
		a["slo"] = f(c.ref)
		a["summary"] = fmt.Sprintf("%s: P99 time to first token %s is over its SLO of %s for %d windows",
			name, durationText(c.value), durationText(c.ref), th.TTFTFor)
	case ruleSlope:
		a["reference"] = f(c.ref)
		a["summary"] = fmt.Sprintf("%s: latency against throughput slope %s s per call/s moved from %s beyond its band of ±%s",
			name, f(c.value), f(c.ref), f(c.threshold))
	}
	return a
}

// snapshot captures what the sidecar saw as rule i fired on window w: w
// against the last window judged clear before the streak (the previous
// window when there is none), the slowest calls of the two, and the
// upstream's in-flight calls.
func (e *Engine) snapshot(ms *modelState, i int, w *windowstats.WindowView, at time.Time) *Snapshot {
	ref := ms.refs[i]
	if ref.Start.IsZero() {
		ref = ms.prev
	}
	return e.capture(ms, w, &ref, e.host(ms, &ref), at)
}

// capture builds the snapshot of w against ref, whose host facts are
// refHost.
func (e *Engine) capture(ms *modelState, w, ref *windowstats.WindowView, refHost *HostBreakdown, at time.Time) *Snapshot {
	s := &Snapshot{
		Taken:    at,
		Current:  breakdown(w),
		Previous: breakdown(ref),
	}
	s.Current.Host = e.host(ms, w)
	s.Previous.Host = refHost
	s.Moved = moved(s.Current, s.Previous)
	// ms.prev is still the window before w here.
	slow := slices.Concat(w.Slowest, ms.prev.Slowest)
	sort.SliceStable(slow, func(a, b int) bool { return slow[a].Seconds > slow[b].Seconds })
	s.Slowest = make([]SlowCall, 0, min(len(slow), e.o.SlowCalls))
	for _, c := range slow[:min(len(slow), e.o.SlowCalls)] {
		sc := SlowCall{At: c.At, Duration: c.Seconds, Code: c.Code}
		if !c.TraceID.IsZero() {
			sc.TraceID = c.TraceID.String()
		}
		s.Slowest = append(s.Slowest, sc)
	}
	if e.o.InFlight != nil {
		s.InFlight = e.o.InFlight(ms.key.model, ms.key.version)
	}
	return s
}

// lateStepFactor is how much further the firing window's top part must
// have moved than the first breaching window's for the firing window's
// snapshot to replace it.
const lateStepFactor = 2

// firingSnapshot returns the snapshot a firing alert carries: the one
// captured when it went pending, unless the firing window, held against the
// same pre-streak reference, shows its top part moved at least
// lateStepFactor times as far. That is a step that landed late in the first
// breaching window: a few stepped calls there lift the P99 past the
// threshold while every mean barely moves, and the SRE would be shown a
// diluted move. The reference does not change during a streak, so the
// firing window cannot be compared with a window already past the jump.
// The source of host facts is asked only for the firing window, and only
// when its snapshot is kept.
func (e *Engine) firingSnapshot(ms *modelState, i int, w *windowstats.WindowView, at time.Time, pending *Snapshot) *Snapshot {
	ref := ms.refs[i]
	if ref.Start.IsZero() || !ref.Start.Equal(pending.Previous.Start) {
		return pending
	}
	cur := breakdown(w)
	mv := moved(cur, pending.Previous)
	if topMove(cur, pending.Previous, mv) < lateStepFactor*topMove(pending.Current, pending.Previous, pending.Moved) {
		return pending
	}
	return e.capture(ms, w, &ref, pending.Previous.Host, at)
}

// topMove is how far the first part named in mv moved between cur and
// prev, as moved measured it.
func topMove(cur, prev Breakdown, mv []string) float64 {
	if len(mv) == 0 {
		return 0
	}
	name := mv[0]
	if slices.Contains(record.Phases[:], name) {
		return math.Abs(cur.Phases[name] - prev.Phases[name])
	}
	return math.Abs(cur.Stages[name] - prev.Stages[name])
}

// host asks Options.Host for the facts of window w's span; nil without a
// source or a window.
func (e *Engine) host(ms *modelState, w *windowstats.WindowView) *HostBreakdown {
	if e.o.Host == nil || w.Start.IsZero() || w.Seconds <= 0 {
		return nil
	}
	return e.o.Host(ms.key.model, ms.key.version, w.Start, w.End())
}

func breakdown(w *windowstats.WindowView) Breakdown {
	b := Breakdown{
		Start:  w.Start,
		Count:  w.Count,
		Mean:   w.Mean,
		StdDev: w.StdDev,
		P99:    w.P99,
		Phases: make(map[string]float64, len(w.Phases)),
		Stages: make(map[string]float64, len(w.Stages)),
	}
	for _, p := range w.Phases {
		b.Phases[p.Name] = p.Mean
	}
	for _, p := range w.Stages {
		b.Stages[p.Name] = p.Mean
	}
	return b
}

// moved lists the phases, then the stages, by how far their mean moved
// between the two windows, largest first; a part missing from one window
// counts as 0 there. Ties keep phases first, in pipeline order, so a phase
// and the server stage inside it that moved alike name the phase.
func moved(cur, prev Breakdown) []string {
	type mv struct {
		name string
		d    float64
	}
	var ms []mv
	add := func(name string, a, b map[string]float64) {
		if d := a[name] - b[name]; d != 0 {
			ms = append(ms, mv{name, max(d, -d)})
		}
	}
	for _, p := range record.Phases {
		add(p, cur.Phases, prev.Phases)
	}
	stages := slices.Sorted(maps.Keys(cur.Stages))
	for _, p := range slices.Sorted(maps.Keys(prev.Stages)) {
		if _, ok := cur.Stages[p]; !ok {
			stages = append(stages, p)
		}
	}
	for _, p := range stages {
		add(p, cur.Stages, prev.Stages)
	}
	sort.SliceStable(ms, func(i, j int) bool { return ms[i].d > ms[j].d })
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.name
	}
	return out
}

// resend appends the firing alerts not sent for the resend interval. Held:
// e.mu.
func (e *Engine) resend(now time.Time, out []Alert) []Alert {
	due := func(ep *episode) {
		if ep != nil && ep.alert.State == StateFiring && now.Sub(ep.lastSent) >= e.o.Resend {
			ep.lastSent = now
			out = append(out, ep.alert)
		}
	}
	for _, ms := range e.states {
		for _, ep := range ms.alerts {
			due(ep)
		}
	}
	for _, ep := range e.conds {
		due(ep)
	}
	return out
}

// Alerts returns the active alerts (firing, then pending, each newest first)
// and those resolved within KeepResolved before the latest Tick, newest
// first, for /api/v1/alerts.
func (e *Engine) Alerts() []Alert {
	e.mu.Lock()
	defer e.mu.Unlock()
	var active []Alert
	for _, ms := range e.states {
		for _, ep := range ms.alerts {
			if ep != nil {
				active = append(active, ep.alert)
			}
		}
	}
	for _, ep := range e.conds {
		active = append(active, ep.alert)
	}
	sort.Slice(active, func(i, j int) bool {
		a, b := active[i], active[j]
		if a.State != b.State {
			return a.State == StateFiring
		}
		if !a.StartsAt.Equal(b.StartsAt) {
			return a.StartsAt.After(b.StartsAt)
		}
		return a.Fingerprint() < b.Fingerprint()
	})
	out := active
	for i := len(e.resolved) - 1; i >= 0; i-- {
		if a := e.resolved[i]; e.lastTick.Sub(a.EndsAt) <= e.o.KeepResolved {
			out = append(out, a)
		}
	}
	if out == nil {
		out = []Alert{}
	}
	return out
}
