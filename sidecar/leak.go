package sidecar

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/inferwatch/inferwatch/alerting"
	"github.com/inferwatch/inferwatch/baseline"
	"github.com/inferwatch/inferwatch/config"
	"github.com/inferwatch/inferwatch/gpu/pids"
)

// leakHelp documents the upstream memory gauges.
var leakHelp = map[string]string{
	"inferwatch_upstream_rss_bytes":          "Resident memory of the upstream's processes (VmRSS summed), sampled once per alerting.memory_leak.interval.",
	"inferwatch_upstream_memory_limit_bytes": "What MemoryLeakSuspected projects the upstream's memory against: its cgroup memory.max, else MemTotal.",
}

// leakWatch samples the upstream's RSS once per interval and judges its
// trend (baseline.EstimateLeak). It runs on its own goroutine, off the
// forwarding path: the only per-tick work is one /proc/PID/status read per
// upstream process and, once MinSpan of samples is held, one estimate.
type leakWatch struct {
	o    config.MemoryLeak
	spec pids.Spec
	// resolveEvery bounds how often the processes are looked up again
	// (a port lookup walks /proc/*/fd) when a read fails or none is known.
	resolveEvery time.Duration

	pids     []int
	resolved time.Time
	limit    float64
	w        baseline.LeakWatch
	first    time.Time // time of the oldest sample kept since the processes were found
	firing   bool
	calm     int  // estimates in a row without a suspected leak while firing
	lost     bool // the processes went away since the last tick

	rss, lim atomic.Uint64 // float64 bits, for the gauges
}

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
	return o
}

func newLeakWatch(o config.MemoryLeak, spec pids.Spec) *leakWatch {
	lw := &leakWatch{o: o, spec: spec, resolveEvery: max(time.Minute, o.Interval.D())}
	// At most maxLeakSamples: a shorter interval than span/4096 keeps a
	// shorter span.
	lw.w.Max = min(maxLeakSamples, max(16, int(o.Span.D()/o.Interval.D())))
	return lw
}

// startLeakWatch starts the watcher when it is on and the upstream's
// processes can be found (configured PIDs, or a local upstream port).
func (s *Sidecar) startLeakWatch(ctx context.Context, spec pids.Spec) {
	if s.cfg.Alerting.MemoryLeak.Disabled || spec.IsZero() {
		return
	}
	lw := newLeakWatch(leakDefaults(s.cfg.Alerting.MemoryLeak, s.cfg.Alerting.Window.D()), spec)
	s.metrics.AddHelp(leakHelp)
	set := s.metrics.Metrics()
	set.GetOrCreateGauge("inferwatch_upstream_rss_bytes", func() float64 { return math.Float64frombits(lw.rss.Load()) })
	set.GetOrCreateGauge("inferwatch_upstream_memory_limit_bytes", func() float64 { return math.Float64frombits(lw.lim.Load()) })
	labels := map[string]string{"upstream": "pids"}
	if len(s.cfg.Routes) > 0 && len(spec.PIDs) == 0 {
		labels["upstream"] = s.cfg.Routes[0].Upstream
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(lw.o.Interval.D())
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				// The tick's own time is when it was due: a goroutine
				// run late would date a later, larger RSS too early
				// and steepen the slope, so the read is dated now.
				now := time.Now()
				if ann, change, firing := lw.tick(now); change {
					s.engine.SetCondition(ctx, alerting.RuleMemoryLeakSuspected, labels, ann, firing, now)
				}
			}
		}
	}()
}

// tick takes one sample and, with MinSpan of samples, one estimate. It
// says whether the alert should be raised or cleared (change), with its
// annotations; a firing alert is refreshed with each estimate.
func (lw *leakWatch) tick(now time.Time) (ann map[string]string, change, firing bool) {
	ok := lw.sample(now)
	if lw.lost && lw.firing {
		// The leaking process is gone (a restart frees its memory): the
		// episode ends; a new trend starts with the next process.
		lw.lost, lw.firing = false, false
		return map[string]string{"summary": "upstream process gone; its memory trend ends"}, true, false
	}
	lw.lost = false
	if !ok || now.Sub(lw.first) < lw.o.MinSpan.D() {
		return nil, false, false
	}
	l, err := lw.w.Estimate(lw.limit, baseline.LeakOptions{MinRise: lw.o.MinRise, Horizon: lw.o.Horizon.D()})
	if err != nil {
		return nil, false, false
	}
	ann = leakAnnotations(l)
	switch {
	case l.Suspected:
		lw.firing, lw.calm = true, 0
		return ann, true, true
	case lw.firing:
		// Three estimates in a row without a leak end the episode, so one
		// freed cache does not flap it.
		lw.calm++
		if lw.calm >= 3 {
			lw.firing = false
			return ann, true, false
		}
	}
	return nil, false, false
}

// sample reads the upstream's RSS (summed over its processes), finding
// them again when a read fails; a new set of processes starts a new trend.
func (lw *leakWatch) sample(now time.Time) bool {
	if len(lw.pids) == 0 && now.Sub(lw.resolved) < lw.resolveEvery && !lw.resolved.IsZero() {
		return false
	}
	if len(lw.pids) == 0 {
		lw.find(now)
		if len(lw.pids) == 0 {
			return false
		}
	}
	var sum float64
	for _, pid := range lw.pids {
		v, err := baseline.ReadRSS(pid)
		if err != nil {
			lw.pids, lw.lost = nil, true // gone: look again, and start a new trend
			return false
		}
		sum += v
	}
	if lw.first.IsZero() {
		lw.first = now
	}
	lw.w.Add(baseline.Sample{T: now, V: sum})
	lw.rss.Store(math.Float64bits(sum))
	return true
}

func (lw *leakWatch) find(now time.Time) {
	lw.resolved = now
	ps, err := lw.spec.Resolve()
	if err != nil || len(ps) == 0 {
		return
	}
	lim, err := baseline.MemoryLimit(ps[0])
	if err != nil {
		return
	}
	lw.pids, lw.limit = ps, lim
	lw.lim.Store(math.Float64bits(lim))
	lw.w = baseline.LeakWatch{Max: lw.w.Max}
	lw.first = time.Time{}
}

// leakAnnotations are MemoryLeakSuspected's figures.
func leakAnnotations(l baseline.Leak) map[string]string {
	a := map[string]string{
		"rss_bytes":              strconv.FormatFloat(l.Current, 'f', 0, 64),
		"limit_bytes":            strconv.FormatFloat(l.Limit, 'f', 0, 64),
		"slope_bytes_per_second": strconv.FormatFloat(l.Slope, 'f', 1, 64),
		"concordance":            strconv.FormatFloat(l.Concordance, 'f', 2, 64),
	}
	if l.TimeToLimit > 0 {
		a["projected_exhaustion"] = l.Exhaustion.UTC().Format(time.RFC3339)
		a["time_to_exhaustion"] = l.TimeToLimit.Round(time.Second).String()
		a["summary"] = fmt.Sprintf("upstream memory %s rising %s/min; projected to reach its limit %s at %s (in %s)",
			mib(l.Current), mib(l.Slope*60), mib(l.Limit), a["projected_exhaustion"], a["time_to_exhaustion"])
	} else {
		a["summary"] = fmt.Sprintf("upstream memory %s, trend %s/min", mib(l.Current), mib(l.Slope*60))
	}
	return a
}

func mib(b float64) string { return fmt.Sprintf("%.1f MiB", b/(1<<20)) }
