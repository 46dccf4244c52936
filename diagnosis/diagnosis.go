package diagnosis

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/inferwatch/inferwatch/alerting"
	"github.com/inferwatch/inferwatch/baseline"
	"github.com/inferwatch/inferwatch/record"
	"github.com/inferwatch/inferwatch/windowstats"
)

// Window is one closed window of one model as the diagnosis reads it:
// latency figures in seconds, the phases' and stages' means, the host facts
// over its span and the upstream's resident memory at its end.
type Window struct {
	Start   time.Time               `json:"start"`
	Seconds float64                 `json:"seconds"`
	Version string                  `json:"version"`
	Count   int64                   `json:"count"`
	QPS     float64                 `json:"qps"`
	Mean    float64                 `json:"mean"`
	P99     float64                 `json:"p99"`
	Phases  map[string]float64      `json:"phases,omitempty"`
	Stages  map[string]float64      `json:"stages,omitempty"`
	Host    *alerting.HostBreakdown `json:"host,omitempty"`
	// RSS is the upstream's resident memory in bytes sampled at the
	// window's end; 0: not sampled.
	RSS     float64             `json:"rss,omitempty"`
	Slowest []alerting.SlowCall `json:"slowest,omitempty"`
}

// End is when the window's span ends.
func (w Window) End() time.Time { return w.Start.Add(time.Duration(w.Seconds * float64(time.Second))) }

// FromView converts a window statistics view, with its host facts (nil:
// absent) and the upstream's RSS (0: absent).
func FromView(v windowstats.WindowView, version string, host *alerting.HostBreakdown, rss float64) Window {
	w := Window{
		Start: v.Start, Seconds: v.Seconds, Version: version, Count: v.Count,
		QPS: v.QPS, Mean: v.Mean, P99: v.P99, Host: host, RSS: rss,
		Phases: make(map[string]float64, len(v.Phases)),
		Stages: make(map[string]float64, len(v.Stages)),
	}
	for _, p := range v.Phases {
		if p.Count > 0 {
			w.Phases[p.Name] = p.Mean
		}
	}
	for _, p := range v.Stages {
		if p.Count > 0 {
			w.Stages[p.Name] = p.Mean
		}
	}
	for _, c := range v.Slowest {
		sc := alerting.SlowCall{At: c.At, Duration: c.Seconds, Code: c.Code}
		if !c.TraceID.IsZero() {
			sc.TraceID = c.TraceID.String()
		}
		w.Slowest = append(w.Slowest, sc)
	}
	return w
}

// Request is one diagnosis: a model's windows (oldest first, any versions)
// and the range under question. Windows starting in [From, To) are the
// breach; up to Options.BaselineWindows before From are the baseline; all
// of them (and earlier ones) feed the periodicity and leak checks.
type Request struct {
	Model   string
	From    time.Time
	To      time.Time // zero: up to the last window
	Windows []Window
	// MemoryLimit is the upstream's memory limit in bytes the leak is
	// projected against; 0: none known.
	MemoryLimit float64
	// Alert names the alert that asked, when one did.
	Alert string
}

// Options tune the checks; zero fields take the defaults.
type Options struct {
	BaselineWindows int     // windows before From compared against: 30
	MinIncrease     float64 // relative rise of mean or P99 that is an anomaly: 0.2 (mean) and twice that for P99
	MinAdded        float64 // and at least this many seconds added to the mean: 0.001
	Examples        int     // example slow-call trace ids per report: 3
}

func (o Options) withDefaults() Options {
	if o.BaselineWindows <= 0 {
		o.BaselineWindows = 30
	}
	if o.MinIncrease <= 0 {
		o.MinIncrease = 0.2
	}
	if o.MinAdded <= 0 {
		o.MinAdded = 0.001
	}
	if o.Examples <= 0 {
		o.Examples = 3
	}
	return o
}

// Cause names.
const (
	CauseThrottling     = "cpu_throttling"   // cgroup CFS quota throttled the upstream
	CauseRunqueue       = "cpu_neighbour"    // the upstream's threads waited for a CPU
	CauseGPUNeighbour   = "gpu_neighbour"    // other processes on the upstream's GPU
	CauseGPUSaturation  = "gpu_saturation"   // the upstream's own GPU utilisation at its ceiling
	CauseOOMKill        = "oom_kill"         // the OOM killer took an upstream process (or another)
	CauseMemoryLeak     = "memory_leak"      // the upstream's RSS grows steadily
	CauseVersionChange  = "version_change"   // a model version appeared in the breach
	CauseLoadExpected   = "load_explained"   // load rose and the slope predicts the latency: not an anomaly
	CauseLoadUnexpected = "load_unexplained" // load rose more than the slope explains
	CausePeriodic       = "periodic"         // exceedances recur at a fixed period
	CauseNetwork        = "network"          // ingress/egress, or upstream time not spent in server stages
	CauseServerStage    = "server_stage"     // a server stage grew with no host fact behind it
	CauseSidecarPhase   = "phase"            // another measured phase (decode, transfer) grew
)

// Span summarises a set of windows.
type Span struct {
	Windows int     `json:"windows"`
	Calls   int64   `json:"calls"`
	QPS     float64 `json:"qps"`
	Mean    float64 `json:"mean"` // seconds, call-weighted
	P99     float64 `json:"p99"`  // seconds, the largest window P99
}

// Part is one phase or stage and how its mean moved.
type Part struct {
	Name     string  `json:"name"`
	Kind     string  `json:"kind"` // "phase", "stage" or "network"
	Baseline float64 `json:"baseline"`
	Breach   float64 `json:"breach"`
	Added    float64 `json:"added"` // seconds
	Share    float64 `json:"share"` // of the added mean latency
}

// Cause is one candidate, its score and the evidence.
type Cause struct {
	Name    string  `json:"name"`
	Score   float64 `json:"score"` // 0..1
	Summary string  `json:"summary"`
	// Phase is the phase or stage the cause's added latency shows in (the
	// part that moved most), when latency moved.
	Phase    string             `json:"phase,omitempty"`
	Evidence map[string]float64 `json:"evidence"`
	Period   time.Duration      `json:"period,omitempty"`
	// Exhaustion is the leak's projected time of reaching the limit.
	Exhaustion time.Time `json:"exhaustion,omitzero"`
}

// Report is the result.
type Report struct {
	Model    string    `json:"model"`
	Alert    string    `json:"alert,omitempty"`
	From     time.Time `json:"from"`
	To       time.Time `json:"to"`
	Anomaly  bool      `json:"anomaly"`
	Summary  string    `json:"summary"`
	Baseline Span      `json:"baseline"`
	Breach   Span      `json:"breach"`
	Added    float64   `json:"added"` // seconds added to the mean
	Moved    []Part    `json:"moved,omitempty"`
	Causes   []Cause   `json:"causes,omitempty"`
	Traces   []string  `json:"traces,omitempty"` // example slow calls' trace ids, slowest first
	Prose    string    `json:"prose,omitempty"`
}

// Top is the highest-ranked cause; its Name is "" when there is none.
func (r Report) Top() Cause {
	if len(r.Causes) == 0 {
		return Cause{}
	}
	return r.Causes[0]
}

// ErrNoWindows is returned when the range holds no window with calls.
var ErrNoWindows = fmt.Errorf("diagnosis: no windows with calls in the range")

// Diagnose ranks the causes of what happened in req's range.
func Diagnose(req Request, o Options) (Report, error) {
	o = o.withDefaults()
	ws := slices.Clone(req.Windows)
	sort.SliceStable(ws, func(i, j int) bool { return ws[i].Start.Before(ws[j].Start) })
	var base, breach []Window
	for _, w := range ws {
		switch {
		case w.Start.Before(req.From):
			base = append(base, w)
		case req.To.IsZero() || w.Start.Before(req.To):
			breach = append(breach, w)
		}
	}
	if len(base) > o.BaselineWindows {
		base = base[len(base)-o.BaselineWindows:]
	}
	r := Report{Model: req.Model, Alert: req.Alert, From: req.From, To: req.To}
	r.Baseline, r.Breach = span(base), span(breach)
	if r.Breach.Calls == 0 {
		return r, ErrNoWindows
	}
	if r.To.IsZero() {
		r.To = breach[len(breach)-1].End()
	}
	latency := r.Baseline.Calls > 0 && r.Breach.Mean-r.Baseline.Mean >= o.MinAdded &&
		(r.Breach.Mean >= r.Baseline.Mean*(1+o.MinIncrease) || r.Breach.P99 >= r.Baseline.P99*(1+2*o.MinIncrease))
	if r.Baseline.Calls > 0 {
		r.Added = r.Breach.Mean - r.Baseline.Mean
	}
	r.Moved = movedParts(base, breach, r.Added)
	top := ""
	if len(r.Moved) > 0 && latency {
		top = r.Moved[0].Name
	}

	var cs []Cause
	add := func(c Cause) {
		if c.Score > 0 {
			c.Score = math.Round(c.Score*1000) / 1000
			cs = append(cs, c)
		}
	}
	// Host facts: meaningful only when latency moved, except OOM kills and
	// leaks which are incidents of their own.
	if latency {
		add(throttling(base, breach))
		add(runqueue(base, breach))
		add(gpuNeighbour(base, breach))
		add(gpuSaturation(base, breach))
		add(versionChange(base, breach))
		add(load(base, breach, r.Added))
		add(periodic(ws, breach))
		for _, c := range partCauses(r.Moved) {
			add(c)
		}
	}
	add(oomKills(breach))
	add(leak(ws, req.MemoryLimit))
	demoteLeak(cs)
	for i := range cs {
		if cs[i].Phase == "" && top != "" && cs[i].Name != CauseMemoryLeak {
			cs[i].Phase = top
		}
	}
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].Score > cs[j].Score })
	r.Causes = cs
	r.Traces = examples(breach, o.Examples)
	switch {
	case len(cs) == 0 && !latency:
		r.Summary = "no anomaly"
	case len(cs) > 0 && cs[0].Name == CauseLoadExpected && !hasIncident(cs):
		// Load explains the latency, not an OOM kill or a leak: those are
		// incidents on their own, as they are when latency did not move.
		if i := slices.IndexFunc(cs, func(c Cause) bool { return c.Name == CauseOOMKill || c.Name == CauseMemoryLeak }); i >= 0 {
			r.Anomaly = true
			r.Summary = cs[i].Summary
			break
		}
		r.Summary = "no anomaly: " + cs[0].Summary
	case len(cs) == 0:
		r.Anomaly = true
		r.Summary = fmt.Sprintf("latency +%s with no cause found", dur(r.Added))
	default:
		r.Anomaly = true
		r.Summary = cs[0].Summary
		if latency {
			r.Summary = fmt.Sprintf("mean %s→%s (+%s): %s", dur(r.Baseline.Mean), dur(r.Breach.Mean), dur(r.Added), cs[0].Summary)
		}
	}
	return r, nil
}

// hasIncident reports whether a cause other than expected load scored as
// strongly as it did.
func hasIncident(cs []Cause) bool {
	for _, c := range cs[1:] {
		if c.Score >= cs[0].Score*0.9 && c.Name != CauseLoadExpected {
			return true
		}
	}
	return false
}

func span(ws []Window) Span {
	var s Span
	var secs, sum float64
	for _, w := range ws {
		if w.Count == 0 {
			continue
		}
		s.Windows++
		s.Calls += w.Count
		secs += w.Seconds
		sum += w.Mean * float64(w.Count)
		s.P99 = max(s.P99, w.P99)
	}
	if s.Calls > 0 {
		s.Mean = sum / float64(s.Calls)
	}
	if secs > 0 {
		s.QPS = float64(s.Calls) / secs
	}
	return s
}

// partMean is the call-weighted mean of a part over windows; absent counts
// as 0 so that a part appearing only in the breach shows its full growth.
func partMean(ws []Window, get func(Window) map[string]float64, name string) float64 {
	var n, sum float64
	for _, w := range ws {
		if w.Count == 0 {
			continue
		}
		n += float64(w.Count)
		sum += get(w)[name] * float64(w.Count)
	}
	if n == 0 {
		return 0
	}
	return sum / n
}

// movedParts lists every phase and stage that grew, largest first, and the
// network's part: ingress and egress as they are, plus the upstream phase's
// growth that the server stages do not account for (when the server reports
// stages).
func movedParts(base, breach []Window, added float64) []Part {
	phases := func(w Window) map[string]float64 { return w.Phases }
	stages := func(w Window) map[string]float64 { return w.Stages }
	var out []Part
	mk := func(name, kind string, b, c float64) Part {
		p := Part{Name: name, Kind: kind, Baseline: b, Breach: c, Added: c - b}
		if added > 0 {
			p.Share = p.Added / added
		}
		return p
	}
	names := map[string]bool{}
	for _, w := range slices.Concat(base, breach) {
		for n := range w.Stages {
			names[n] = true
		}
	}
	for _, n := range slices.Sorted(mapsKeys(names)) {
		out = append(out, mk(n, "stage", partMean(base, stages, n), partMean(breach, stages, n)))
	}
	for _, n := range record.Phases {
		p := mk(n, "phase", partMean(base, phases, n), partMean(breach, phases, n))
		if n == record.PhaseUpstream && len(names) > 0 {
			// The upstream phase is the server's stages plus the network
			// both ways (and whatever the server does not report).
			net := mk("upstream network", "network", p.Baseline-stageSum(base), p.Breach-stageSum(breach))
			out = append(out, net)
			p.Share, p.Added = 0, 0 // its growth is split between stages and network above
		}
		out = append(out, p)
	}
	out = slices.DeleteFunc(out, func(p Part) bool { return p.Added < 1e-6 }) // under a microsecond is rounding
	sort.SliceStable(out, func(i, j int) bool { return out[i].Added > out[j].Added })
	return out
}

func stageSum(ws []Window) float64 {
	var n, sum float64
	for _, w := range ws {
		if w.Count == 0 {
			continue
		}
		n += float64(w.Count)
		for _, v := range w.Stages {
			sum += v * float64(w.Count)
		}
	}
	if n == 0 {
		return 0
	}
	return sum / n
}

func mapsKeys(m map[string]bool) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// partCauses names the part that moved as a cause of its own when it holds
// at least 40% of the added latency: the network, a server stage, or a
// sidecar phase. These are "where" answers; host facts that explain them
// score higher, so they rank first only when nothing explains the part.
// Score: 0.6 × share.
func partCauses(moved []Part) []Cause {
	var out []Cause
	for _, p := range moved {
		if p.Share < 0.4 {
			continue
		}
		c := Cause{Score: 0.6 * min(p.Share, 1), Phase: p.Name,
			Evidence: map[string]float64{"baseline_s": p.Baseline, "breach_s": p.Breach, "added_s": p.Added, "share": p.Share}}
		switch {
		case p.Kind == "network" || p.Name == record.PhaseIngress || p.Name == record.PhaseEgress:
			c.Name = CauseNetwork
			c.Summary = fmt.Sprintf("network: %s +%s (%.0f%% of the added latency), server stages unchanged", p.Name, dur(p.Added), 100*p.Share)
		case p.Kind == "stage":
			c.Name = CauseServerStage
			c.Summary = fmt.Sprintf("server stage %s +%s (%.0f%% of the added latency), no host fact behind it", p.Name, dur(p.Added), 100*p.Share)
		default:
			c.Name = CauseSidecarPhase
			c.Summary = fmt.Sprintf("phase %s +%s (%.0f%% of the added latency)", p.Name, dur(p.Added), 100*p.Share)
		}
		out = append(out, c)
	}
	return out
}

// rateOf averages a host total per second of covered span over windows;
// ok is false when no window has the group.
func rateOf(ws []Window, get func(*alerting.HostBreakdown) (total, coverage float64, ok bool)) (float64, bool) {
	var secs, sum float64
	for _, w := range ws {
		if w.Host == nil {
			continue
		}
		t, cov, ok := get(w.Host)
		if !ok || cov <= 0 || w.Host.Seconds <= 0 {
			continue
		}
		secs += w.Host.Seconds * cov
		sum += t
	}
	if secs == 0 {
		return 0, false
	}
	return sum / secs, true
}

// sat maps x ≥ 0 to [0,1), half at x = half.
func sat(x, half float64) float64 {
	if x <= 0 {
		return 0
	}
	return x / (x + half)
}

func throttledRate(ws []Window) (float64, bool) {
	return rateOf(ws, func(h *alerting.HostBreakdown) (float64, float64, bool) {
		if h.Cgroup == nil {
			return 0, 0, false
		}
		return h.Cgroup.Throttled, h.Cgroup.Coverage, true
	})
}

func runqRate(ws []Window) (float64, bool) {
	return rateOf(ws, func(h *alerting.HostBreakdown) (float64, float64, bool) {
		if h.Sched == nil {
			return 0, 0, false
		}
		return h.Sched.RunqueueDelay, h.Sched.Coverage, true
	})
}

// throttling: the rise of throttled seconds per second of the upstream's
// cgroup. Score 0.5 + 0.5·sat(Δ, 20ms/s) once the rise is over 5 ms/s: a
// quota throttling is specific, so it outranks the run-queue delay it also
// causes.
func throttling(base, breach []Window) Cause {
	b, okb := throttledRate(base)
	c, okc := throttledRate(breach)
	d := c - b
	if !okb || !okc || d < 0.005 {
		return Cause{}
	}
	return Cause{Name: CauseThrottling, Score: 0.5 + 0.5*sat(d, 0.02),
		Summary:  fmt.Sprintf("cgroup CPU throttling %s/s → %s/s", dur(b), dur(c)),
		Evidence: map[string]float64{"baseline_throttled_s_per_s": b, "breach_throttled_s_per_s": c}}
}

// runqueue: the rise of run-queue delay per second beyond what throttling
// accounts for: the upstream's threads runnable without a CPU, a CPU
// neighbour. Score 0.45 + 0.45·sat(Δ, 50ms/s) once over 10 ms/s and half
// the baseline's rate.
func runqueue(base, breach []Window) Cause {
	b, okb := runqRate(base)
	c, okc := runqRate(breach)
	if !okb || !okc {
		return Cause{}
	}
	tb, _ := throttledRate(base)
	tc, _ := throttledRate(breach)
	d := (c - b) - max(tc-tb, 0)
	// A busy host's threads always wait some: the rise must be material
	// against the baseline's own wait, not only in absolute terms.
	if d < max(0.01, 0.5*b) {
		return Cause{}
	}
	return Cause{Name: CauseRunqueue, Score: 0.45 + 0.45*sat(d, 0.05),
		Summary:  fmt.Sprintf("run-queue delay %s/s → %s/s: the model server waits for a CPU (a CPU neighbour)", dur(b), dur(c)),
		Evidence: map[string]float64{"baseline_runqueue_s_per_s": b, "breach_runqueue_s_per_s": c}}
}

func gpuMean(ws []Window, get func(*alerting.HostGPU) *float64) (float64, bool) {
	var n, sum float64
	for _, w := range ws {
		if w.Host == nil || w.Host.GPU == nil {
			continue
		}
		if v := get(w.Host.GPU); v != nil {
			n++
			sum += *v
		}
	}
	if n == 0 {
		return 0, false
	}
	return sum / n, true
}

// gpuNeighbour: other processes' SM utilisation on the upstream's devices
// rose by at least 0.1. Score 0.45 + 0.5·sat(Δ, 0.2).
func gpuNeighbour(base, breach []Window) Cause {
	get := func(g *alerting.HostGPU) *float64 { return g.NeighbourUtil }
	b, okb := gpuMean(base, get)
	c, okc := gpuMean(breach, get)
	if !okb || !okc || c-b < 0.1 {
		return Cause{}
	}
	return Cause{Name: CauseGPUNeighbour, Score: 0.45 + 0.5*sat(c-b, 0.2),
		Summary:  fmt.Sprintf("another process on the GPU: neighbour utilisation %.0f%% → %.0f%%", 100*b, 100*c),
		Evidence: map[string]float64{"baseline_neighbour_util": b, "breach_neighbour_util": c}}
}

// gpuSaturation: the upstream's own SM utilisation rose by 0.2 to 0.9 or
// more. Score 0.4.
func gpuSaturation(base, breach []Window) Cause {
	get := func(g *alerting.HostGPU) *float64 { return g.Util }
	b, okb := gpuMean(base, get)
	c, okc := gpuMean(breach, get)
	if !okb || !okc || c < 0.9 || c-b < 0.2 {
		return Cause{}
	}
	return Cause{Name: CauseGPUSaturation, Score: 0.4,
		Summary:  fmt.Sprintf("the model server's GPU utilisation %.0f%% → %.0f%%: at its ceiling", 100*b, 100*c),
		Evidence: map[string]float64{"baseline_util": b, "breach_util": c}}
}

// oomKills: the OOM killer's victims in the breach. An upstream victim
// scores 0.95, another process 0.35 (a neighbour's pressure).
func oomKills(breach []Window) Cause {
	// A kill at a window's edge can be in both windows' spans: count the
	// listed kills once each (pid and time), and a window's own counts only
	// where its list is cut short.
	var up, other int
	seen := map[alerting.OOMKill]bool{}
	for _, w := range breach {
		if w.Host == nil || w.Host.OOM == nil {
			continue
		}
		o := w.Host.OOM
		if len(o.Kills) < o.Upstream+o.Other {
			up += o.Upstream
			other += o.Other
			continue
		}
		for _, k := range o.Kills {
			key := alerting.OOMKill{At: k.At.UTC(), PID: k.PID}
			if seen[key] {
				continue
			}
			seen[key] = true
			if k.Upstream {
				up++
			} else {
				other++
			}
		}
	}
	switch {
	case up > 0:
		return Cause{Name: CauseOOMKill, Score: 0.95,
			Summary:  fmt.Sprintf("OOM killer took %d model-server process(es)", up),
			Evidence: map[string]float64{"upstream_kills": float64(up), "other_kills": float64(other)}}
	case other > 0:
		return Cause{Name: CauseOOMKill, Score: 0.35,
			Summary:  fmt.Sprintf("OOM killer took %d other process(es) on the host", other),
			Evidence: map[string]float64{"upstream_kills": 0, "other_kills": float64(other)}}
	}
	return Cause{}
}

// leak: a robust trend of the upstream's RSS over every window (at least
// six samples), baseline.EstimateLeak's test with a 20% rise and, when a
// limit is known, exhaustion projected within leakHorizon: a process's
// warm-up (a Go heap growing to its working set) rises too, but slowly
// against any limit. Score 0.7, 0.9 when the exhaustion is under an hour
// away.
func leak(ws []Window, limit float64) Cause {
	var s []baseline.Sample
	for _, w := range ws {
		if w.RSS > 0 {
			s = append(s, baseline.Sample{T: w.End(), V: w.RSS})
		}
	}
	if len(s) < 6 {
		return Cause{}
	}
	l, err := baseline.EstimateLeak(s, limit, baseline.LeakOptions{MinRise: 0.2, MinRiseBytes: leakMinRise, Horizon: leakHorizon})
	if err != nil || !l.Suspected {
		return Cause{}
	}
	c := Cause{Name: CauseMemoryLeak, Score: 0.7,
		Summary: fmt.Sprintf("model server memory grows %s/min (now %s)", bytesText(l.Slope*60), bytesText(l.Current)),
		Evidence: map[string]float64{"slope_bytes_per_s": l.Slope, "rss_bytes": l.Current,
			"concordance": l.Concordance, "samples": float64(len(s))}}
	// TimeToLimit is 0 when the RSS is already at the limit: the most
	// urgent case, not one without a limit.
	if l.Limit > 0 && !l.Exhaustion.IsZero() {
		c.Exhaustion = l.Exhaustion
		c.Evidence["limit_bytes"] = l.Limit
		c.Evidence["time_to_limit_s"] = l.TimeToLimit.Seconds()
		if l.TimeToLimit > 0 {
			c.Summary += fmt.Sprintf(", limit %s reached in %s", bytesText(l.Limit), l.TimeToLimit.Round(time.Second))
		} else {
			c.Summary += fmt.Sprintf(", at its limit %s", bytesText(l.Limit))
		}
		if l.TimeToLimit < time.Hour {
			c.Score = 0.9
		}
	}
	return c
}

// demoteLeak ranks memory growth below a host fact that explains added
// latency: growth alone does not slow calls (until it swaps or is killed),
// while a neighbour or a quota does, and a busy neighbour's allocations can
// look like growth over a short history.
func demoteLeak(cs []Cause) {
	host := 0.0
	for _, c := range cs {
		switch c.Name {
		case CauseThrottling, CauseRunqueue, CauseGPUNeighbour, CauseGPUSaturation:
			host = max(host, c.Score)
		}
	}
	if host == 0 {
		return
	}
	for i := range cs {
		if cs[i].Name == CauseMemoryLeak && cs[i].Score >= host {
			cs[i].Score = math.Round((host-0.01)*1000) / 1000
		}
	}
}

// leakMinRise is the least growth over the history that can be a leak: a
// Go server's heap settling after start-up, or a neighbour's burst of
// allocations, grows a small process by 20% with a few MiB.
const leakMinRise = 16 << 20

// leakHorizon is how far ahead a projected exhaustion makes a leak.
const leakHorizon = 12 * time.Hour

// versionChange: a version serves in the breach that did not in the
// baseline. Score 0.85.
func versionChange(base, breach []Window) Cause {
	old := map[string]bool{}
	for _, w := range base {
		if w.Count > 0 {
			old[w.Version] = true
		}
	}
	if len(old) == 0 {
		return Cause{}
	}
	var fresh []string
	for _, w := range breach {
		if w.Count > 0 && !old[w.Version] && !slices.Contains(fresh, w.Version) {
			fresh = append(fresh, w.Version)
		}
	}
	if len(fresh) == 0 {
		return Cause{}
	}
	prev := slices.Sorted(mapsKeys(old))
	return Cause{Name: CauseVersionChange, Score: 0.85,
		Summary:  fmt.Sprintf("model version changed %s → %s", strings.Join(prev, ","), strings.Join(fresh, ",")),
		Evidence: map[string]float64{"new_versions": float64(len(fresh))}}
}

// load: the breach's throughput against the baseline's. The baseline
// windows' latency–throughput line (windowstats.FitLine) predicts the mean
// at the breach's QPS; when it explains at least 70% of the added latency
// the rise is load, not an anomaly (score 0.8·explained, capped at 0.8);
// a QPS rise of 50% or more that the line does not explain scores 0.3.
func load(base, breach []Window, added float64) Cause {
	bs, cs := span(base), span(breach)
	if bs.QPS <= 0 || cs.QPS < bs.QPS*1.2 || added <= 0 {
		return Cause{}
	}
	var xs, ys []float64
	for _, w := range base {
		if w.Count > 0 {
			xs, ys = append(xs, w.QPS), append(ys, w.Mean)
		}
	}
	f := windowstats.FitLine(xs, ys)
	ev := map[string]float64{"baseline_qps": bs.QPS, "breach_qps": cs.QPS}
	if f.OK && f.Slope > 0 {
		predicted := f.Slope * (cs.QPS - bs.QPS)
		explained := min(predicted/added, 1)
		ev["slope_s_per_qps"] = f.Slope
		ev["predicted_added_s"] = predicted
		ev["explained"] = explained
		if explained >= 0.7 {
			return Cause{Name: CauseLoadExpected, Score: 0.8 * explained, Evidence: ev,
				Summary: fmt.Sprintf("load %.0f→%.0f call/s; the baseline's slope predicts +%s of the +%s", bs.QPS, cs.QPS, dur(predicted), dur(added))}
		}
	}
	if cs.QPS >= bs.QPS*1.5 {
		return Cause{Name: CauseLoadUnexpected, Score: 0.3, Evidence: ev,
			Summary: fmt.Sprintf("load %.0f→%.0f call/s, more latency than the baseline's slope explains", bs.QPS, cs.QPS)}
	}
	return Cause{}
}

// periodic: over all windows, exceedances (mean over 1.5× the median
// window mean, which the spikes, a minority, do not move) grouped into episodes; with three or more episodes whose start
// intervals agree within 10% (or one window), and the breach inside one,
// the spikes recur at that period. Score 0.9.
func periodic(ws, breach []Window) Cause {
	var means []float64
	for _, w := range ws {
		if w.Count > 0 {
			means = append(means, w.Mean)
		}
	}
	if len(means) == 0 || len(breach) == 0 {
		return Cause{}
	}
	slices.Sort(means)
	baseMean := means[len(means)/2]
	var starts []time.Time
	var step time.Duration
	var lastHot, first time.Time
	censored := false
	for _, w := range ws {
		if w.Count == 0 {
			continue
		}
		if first.IsZero() {
			first = w.Start
		}
		step = time.Duration(w.Seconds * float64(time.Second))
		if w.Mean <= 1.5*baseMean {
			continue
		}
		// A hot window starts an episode unless the last hot one is at
		// most two windows back: one cool window inside a spike (a dip, or
		// a window with few calls) does not split it into episodes a
		// window or two apart, which would read as a fast period.
		if lastHot.IsZero() || w.Start.Sub(lastHot) > 2*step+step/2 {
			starts = append(starts, w.Start)
		}
		lastHot = w.Start
		if w.Start.Equal(first) {
			censored = true
		}
	}
	if censored {
		// The history begins inside this episode (a full ring drops its
		// oldest window, spike or not): its start is not the history's
		// first window, and counting it so would make the first interval
		// short and the spikes look aperiodic.
		starts = starts[1:]
	}
	if len(starts) < 3 {
		return Cause{}
	}
	var iv []time.Duration
	for i := 1; i < len(starts); i++ {
		iv = append(iv, starts[i].Sub(starts[i-1]))
	}
	sorted := slices.Clone(iv)
	slices.Sort(sorted)
	period := sorted[len(sorted)/2]
	tol := max(period/10, step)
	for _, d := range iv {
		if d < period-tol || d > period+tol {
			return Cause{}
		}
	}
	b0 := breach[0].Start
	if b0.Before(starts[0].Add(-step)) {
		return Cause{}
	}
	return Cause{Name: CausePeriodic, Score: 0.9, Period: period,
		Summary:  fmt.Sprintf("spikes recur every %s (%d episodes; next ~%s)", period.Round(time.Second), len(starts), starts[len(starts)-1].Add(period).UTC().Format("15:04:05")),
		Evidence: map[string]float64{"period_s": period.Seconds(), "episodes": float64(len(starts))}}
}

// examples returns up to n trace ids of the breach's slowest kept calls.
func examples(breach []Window, n int) []string {
	var all []alerting.SlowCall
	for _, w := range breach {
		for _, c := range w.Slowest {
			if c.TraceID != "" {
				all = append(all, c)
			}
		}
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].Duration > all[j].Duration })
	var out []string
	for _, c := range all {
		if len(out) == n {
			break
		}
		if !slices.Contains(out, c.TraceID) {
			out = append(out, c.TraceID)
		}
	}
	return out
}

func dur(s float64) string {
	d := time.Duration(s * float64(time.Second))
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(100 * time.Microsecond).String()
	default:
		return d.Round(time.Microsecond).String()
	}
}

func bytesText(b float64) string {
	switch {
	case math.Abs(b) >= 1<<30:
		return fmt.Sprintf("%.1fGiB", b/(1<<30))
	case math.Abs(b) >= 1<<20:
		return fmt.Sprintf("%.1fMiB", b/(1<<20))
	case math.Abs(b) >= 1<<10:
		return fmt.Sprintf("%.1fKiB", b/(1<<10))
	}
	return fmt.Sprintf("%.0fB", b)
}
