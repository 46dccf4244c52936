package sidecar

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/inferwatch/inferwatch/alerting"
	"github.com/inferwatch/inferwatch/baseline"
	"github.com/inferwatch/inferwatch/cgroup"
	"github.com/inferwatch/inferwatch/config"
	"github.com/inferwatch/inferwatch/gpu"
	"github.com/inferwatch/inferwatch/gpu/pids"
)

// leakHelp documents the upstream memory gauges.
var leakHelp = map[string]string{
	"inferwatch_upstream_rss_bytes":          "Resident memory of the upstream's processes (VmRSS summed over those found at each sample), sampled once per alerting.memory_leak.interval.",
	"inferwatch_upstream_memory_limit_bytes": "What MemoryLeakSuspected projects the upstream's memory against: host.upstream_memory_limit, else the smallest memory limit of its processes' cgroups, else MemTotal.",
}

// leakWatch samples the upstream's RSS once per interval and judges its
// trend (baseline.EstimateLeak); where the eBPF probes follow the
// upstream's CUDA libraries, it judges the device memory those allocated
// and did not free the same way. It runs on its own goroutine, off the
// forwarding path: the only per-tick work is the lookup of the upstream's
// processes (for a port, a check that the owners last found still hold its
// socket; a walk of /proc/*/fd at most every 30 s, pids.ownerRescan), one
// /proc/PID/status read per process, one look at the probes' last sample
// and, once MinSpan of samples is held, one estimate per level.
type leakWatch struct {
	o    config.MemoryLeak
	spec pids.Spec
	// resolveEvery bounds how often the processes are looked up while
	// none is known: a port nobody listens on is looked for with a full
	// walk of /proc/*/fd each time.
	resolveEvery time.Duration

	pids     []int     // the processes of the last sample, sorted
	started  time.Time // the first sample
	resolved time.Time
	limit    float64
	limitSet float64    // host.upstream_memory_limit; 0: the cgroups'
	host     leakSeries // RSS
	lost     bool       // the processes went away since the last tick

	// device is the upstream's outstanding CUDA allocations, counted from
	// when the probes attached (bpf.Probes.CUDAOutstanding); nil without
	// the probes. deviceFree is the free memory of the GPUs the upstream
	// runs on (NVML); nil or !ok: not known, the trend alone decides.
	device     func() (float64, bool)
	deviceFree func() (float64, bool)
	dev        leakSeries

	rss, lim atomic.Uint64 // float64 bits, for the gauges
}

// leakSeries is one memory level's samples and its alert episode.
type leakSeries struct {
	w      baseline.LeakWatch
	first  time.Time // time of the oldest sample kept since the processes were found
	firing bool
	calm   int // estimates in a row without a suspected leak while firing
}

// leakChange raises or clears MemoryLeakSuspected for one level.
type leakChange struct {
	device bool
	ann    map[string]string
	firing bool
}

// defaultDeviceMinRiseMiB is memory_leak.device_min_rise_mib's default:
// a model server's caches (cuBLAS workspaces, allocator pools) settle
// within tens of MiB.
const defaultDeviceMinRiseMiB = 64

// maxLeakSamples bounds the samples a leakWatch keeps (32 KiB each 1k).
const maxLeakSamples = 4096

// leakDefaults fills zero fields of the memory_leak settings.
func leakDefaults(o config.MemoryLeak, window time.Duration) config.MemoryLeak {
	if o.Interval <= 0 {
		o.Interval = config.Duration(window)
	}
	if o.Span <= 0 {
		o.Span = config.Duration(6 * time.Hour)
	}
	if o.MinSpan <= 0 {
		o.MinSpan = config.Duration(min(30*time.Minute, o.Span.D()))
	}
	if o.Horizon <= 0 {
		o.Horizon = config.Duration(7 * 24 * time.Hour)
	}
	if o.MinRise <= 0 {
		o.MinRise = 0.1
	}
	if o.DeviceMinRiseMiB <= 0 {
		o.DeviceMinRiseMiB = defaultDeviceMinRiseMiB
	}
	return o
}

// newLeakWatch watches spec's processes; limit is host.upstream_memory_limit
// in bytes (0: read it from their cgroup).
func newLeakWatch(o config.MemoryLeak, spec pids.Spec, limit config.Bytes) *leakWatch {
	lw := &leakWatch{o: o, spec: spec, limitSet: float64(limit), resolveEvery: max(time.Minute, o.Interval.D())}
	lw.host.reset(lw.maxSamples())
	lw.dev.reset(lw.maxSamples())
	return lw
}

// maxSamples is what each level keeps: at most maxLeakSamples, so a
// shorter interval than span/4096 keeps a shorter span.
func (lw *leakWatch) maxSamples() int {
	return min(maxLeakSamples, max(16, int(lw.o.Span.D()/lw.o.Interval.D())))
}

func (ls *leakSeries) reset(max int) { *ls = leakSeries{w: baseline.LeakWatch{Max: max}} }

// startLeakWatch starts the watcher when it is on and the upstream's
// processes can be found (configured PIDs, or a local upstream port).
func (s *Sidecar) startLeakWatch(ctx context.Context, spec pids.Spec) {
	if s.cfg.Alerting.MemoryLeak.Disabled || spec.IsZero() {
		return
	}
	lw := newLeakWatch(leakDefaults(s.cfg.Alerting.MemoryLeak, s.cfg.Alerting.Window.D()), spec, s.cfg.Host.UpstreamMemoryLimit)
	s.metrics.AddHelp(leakHelp)
	set := s.metrics.Metrics()
	set.GetOrCreateGauge("inferwatch_upstream_rss_bytes", func() float64 { return math.Float64frombits(lw.rss.Load()) })
	set.GetOrCreateGauge("inferwatch_upstream_memory_limit_bytes", func() float64 { return math.Float64frombits(lw.lim.Load()) })
	if p := s.host.probes; p.Enabled() {
		lw.device = func() (float64, bool) {
			b, ok := p.CUDAOutstanding()
			return float64(b), ok
		}
	}
	if g := s.host.gpu; g.Available() {
		lw.deviceFree = func() (float64, bool) { return upstreamGPUFree(g.Latest()) }
	}
	labels := map[string]string{"upstream": "pids"}
	if len(s.cfg.Routes) > 0 && len(spec.PIDs) == 0 {
		labels["upstream"] = s.cfg.Routes[0].Upstream
	}
	deviceLabels := maps.Clone(labels)
	deviceLabels["memory"] = "cuda"
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		tick := func() {
			// The ticker's time is when the tick was due: a goroutine
			// run late would date a later, larger RSS too early and
			// steepen the slope, so the read is dated now.
			now := time.Now()
			for _, c := range lw.tick(now) {
				l := labels
				if c.device {
					l = deviceLabels
				}
				s.engine.SetCondition(ctx, alerting.RuleMemoryLeakSuspected, l, c.ann, c.firing, now)
			}
		}
		t := time.NewTicker(lw.o.Interval.D())
		defer t.Stop()
		tick() // the gauges from the start, not one interval in
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				tick()
			}
		}
	}()
}

// tick takes one sample of each level and, with MinSpan of samples, one
// estimate of each. It returns the alerts to raise or clear, with their
// annotations; a firing alert is refreshed with each estimate.
func (lw *leakWatch) tick(now time.Time) []leakChange {
	ok := lw.sample(now)
	if lw.lost {
		// The leaking process is gone (a restart frees its memory): the
		// episodes end; new trends start with the next process.
		lw.lost = false
		var out []leakChange
		gone := map[string]string{"summary": "upstream process gone; its memory trend ends"}
		for _, c := range []struct {
			ls     *leakSeries
			device bool
		}{{&lw.host, false}, {&lw.dev, true}} {
			if c.ls.firing {
				c.ls.firing = false
				out = append(out, leakChange{device: c.device, ann: gone, firing: false})
			}
		}
		return out
	}
	if !ok {
		return nil
	}
	lo := baseline.LeakOptions{MinRise: lw.o.MinRise, Horizon: lw.o.Horizon.D()}
	var out []leakChange
	if ann, change, firing := lw.host.judge(now, lw.o.MinSpan.D(), lw.limit, lo, leakAnnotations); change {
		out = append(out, leakChange{ann: ann, firing: firing})
	}
	if lw.device != nil {
		if v, ok := lw.device(); ok {
			lw.dev.add(now, v)
			limit := 0.0
			if lw.deviceFree != nil {
				if free, ok := lw.deviceFree(); ok {
					limit = v + free // when the allocations would fill what is free now
				}
			}
			lo := baseline.LeakOptions{FromZero: true, MinRiseBytes: lw.o.DeviceMinRiseMiB * (1 << 20), Horizon: lw.o.Horizon.D()}
			if ann, change, firing := lw.dev.judge(now, lw.o.MinSpan.D(), limit, lo, deviceLeakAnnotations); change {
				out = append(out, leakChange{device: true, ann: ann, firing: firing})
			}
		}
	}
	return out
}

func (ls *leakSeries) add(now time.Time, v float64) {
	if ls.first.IsZero() {
		ls.first = now
	}
	ls.w.Add(baseline.Sample{T: now, V: v})
}

// judge makes one estimate once minSpan of samples is held and says
// whether the alert should be raised or cleared (change).
func (ls *leakSeries) judge(now time.Time, minSpan time.Duration, limit float64, lo baseline.LeakOptions, annotate func(baseline.Leak) map[string]string) (ann map[string]string, change, firing bool) {
	if ls.first.IsZero() || now.Sub(ls.first) < minSpan {
		return nil, false, false
	}
	l, err := ls.w.Estimate(limit, lo)
	if err != nil {
		return nil, false, false
	}
	ann = annotate(l)
	switch {
	case l.Suspected:
		ls.firing, ls.calm = true, 0
		return ann, true, true
	case ls.firing:
		// Three estimates in a row without a leak end the episode, so one
		// freed cache does not flap it.
		ls.calm++
		if ls.calm >= 3 {
			ls.firing = false
			return ann, true, false
		}
	}
	return nil, false, false
}

// sample reads the upstream's RSS, summed over its processes as they are
// now. They are looked up on every tick, not only when one goes away: a
// model server forks workers while its first process lives (gunicorn,
// TorchServe, Triton's Python backends), and their memory is the server's.
// A set that changed (a restart, a worker forked or gone) starts a new trend.
func (lw *leakWatch) sample(now time.Time) bool {
	if lw.started.IsZero() {
		lw.started = now
	}
	// In the first resolveEvery every tick looks (the server may start
	// after the sidecar); later, at most once per resolveEvery.
	if len(lw.pids) == 0 && now.Sub(lw.resolved) < lw.resolveEvery && now.Sub(lw.started) >= lw.resolveEvery {
		return false
	}
	lw.resolved = now
	found, err := lw.spec.Resolve()
	if len(found) == 0 && err != nil {
		// A lookup that failed is no proof the processes left: their
		// own reads below say whether they did.
		found = lw.pids
	}
	var live []int
	var sum float64
	for _, pid := range found {
		v, err := baseline.ReadRSS(pid)
		if err != nil {
			continue // gone since the lookup, or a configured PID that exited
		}
		live = append(live, pid)
		sum += v
	}
	if len(live) == 0 {
		if len(lw.pids) > 0 {
			lw.pids, lw.lost = nil, true
		}
		return false
	}
	if !slices.Equal(live, lw.pids) {
		lim, _, err := upstreamMemoryLimit(lw.limitSet, live)
		if err != nil {
			return false
		}
		// Any change starts a new trend: a worker forked or gone is a step
		// in the sum, and a step read as a trend would page for a leak
		// that is a new worker's memory.
		lw.lost = len(lw.pids) > 0
		lw.host.reset(lw.maxSamples())
		lw.dev.reset(lw.maxSamples())
		lw.pids, lw.limit = live, lim
		lw.lim.Store(math.Float64bits(lim))
	}
	lw.host.add(now, sum)
	lw.rss.Store(math.Float64bits(sum))
	return true
}

// leakFigures are the annotations both levels' alerts share: the level
// under its own key, the limit when known, the trend and its projection.
func leakFigures(l baseline.Leak, level string) map[string]string {
	a := map[string]string{
		level:                    strconv.FormatFloat(l.Current, 'f', 0, 64),
		"slope_bytes_per_second": strconv.FormatFloat(l.Slope, 'f', 1, 64),
		"concordance":            strconv.FormatFloat(l.Concordance, 'f', 2, 64),
	}
	if l.Limit > 0 {
		a["limit_bytes"] = strconv.FormatFloat(l.Limit, 'f', 0, 64)
	}
	if l.TimeToLimit > 0 {
		a["projected_exhaustion"] = l.Exhaustion.UTC().Format(time.RFC3339)
		a["time_to_exhaustion"] = l.TimeToLimit.Round(time.Second).String()
	}
	return a
}

// leakAnnotations are MemoryLeakSuspected's figures.
func leakAnnotations(l baseline.Leak) map[string]string {
	a := leakFigures(l, "rss_bytes")
	if l.TimeToLimit > 0 {
		a["summary"] = fmt.Sprintf("upstream memory %s rising %s/min; projected to reach its limit %s at %s (in %s)",
			mib(l.Current), mib(l.Slope*60), mib(l.Limit), a["projected_exhaustion"], a["time_to_exhaustion"])
	} else {
		a["summary"] = fmt.Sprintf("upstream memory %s, trend %s/min", mib(l.Current), mib(l.Slope*60))
	}
	return a
}

// deviceLeakAnnotations are MemoryLeakSuspected{memory="cuda"}'s figures.
func deviceLeakAnnotations(l baseline.Leak) map[string]string {
	a := leakFigures(l, "cuda_outstanding_bytes")
	level := fmt.Sprintf("upstream CUDA allocations not freed: %s since probed", mib(l.Current))
	switch {
	case l.TimeToLimit > 0:
		a["summary"] = fmt.Sprintf("%s, rising %s/min; projected to fill the GPU memory free now at %s (in %s)",
			level, mib(l.Slope*60), a["projected_exhaustion"], a["time_to_exhaustion"])
	case l.Limit > 0:
		a["summary"] = fmt.Sprintf("%s, trend %s/min", level, mib(l.Slope*60))
	default:
		a["summary"] = fmt.Sprintf("%s, rising %s/min (GPU memory free unknown: no projection)", level, mib(l.Slope*60))
	}
	return a
}

// upstreamGPUFree is the free memory of the GPUs the upstream has a
// context on, from their newest samples; false when none is known.
func upstreamGPUFree(samples []gpu.Sample) (float64, bool) {
	free, ok := 0.0, false
	for _, s := range samples {
		if s.MemoryTotal == nil || s.MemoryUsed == nil || !slices.ContainsFunc(s.Processes, func(p gpu.Process) bool { return p.Upstream }) {
			continue
		}
		free += float64(*s.MemoryTotal) - float64(min(*s.MemoryUsed, *s.MemoryTotal))
		ok = true
	}
	return free, ok
}

func mib(b float64) string { return fmt.Sprintf("%.1f MiB", b/(1<<20)) }

// upstreamMemoryLimit is what the upstream's memory is projected against,
// and where that came from: the configured limit (set, when not 0), else
// the smallest over pids of each one's cgroup limit, or the machine's memory
// for one under none: processes in different cgroups (a worker moved to
// its own) are stopped by the first limit their memory reaches. In
// Kubernetes the server's cgroup is another container's, outside the
// sidecar's cgroup namespace: the injector configures the limit from its
// spec instead.
func upstreamMemoryLimit(set float64, pids []int) (float64, string, error) {
	if set > 0 {
		return set, "host.upstream_memory_limit", nil
	}
	mounts, merr := cgroup.SelfMounts()
	limit, from := 0.0, ""
	total := 0.0
	for _, pid := range pids {
		if merr == nil {
			if n, file, err := cgroup.ProcessMemoryLimit(pid, mounts); err == nil && n > 0 {
				if from == "" || float64(n) < limit {
					limit, from = float64(n), file
				}
				continue
			}
		}
		if total == 0 {
			n, err := baseline.MemTotal()
			if err != nil {
				return 0, "", err
			}
			total = n
		}
		if from == "" || total < limit {
			limit, from = total, "MemTotal"
		}
	}
	if from == "" {
		return 0, "", fmt.Errorf("memory limit: no upstream process")
	}
	return limit, from, nil
}
