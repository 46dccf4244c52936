package gpu

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/inferwatch/inferwatch/gpu/pids"
	"github.com/inferwatch/inferwatch/record"
)

// Sampling bounds and defaults.
const (
	DefaultInterval   = time.Second
	MinInterval       = 100 * time.Millisecond
	DefaultRetention  = 10 * time.Minute
	DefaultPIDRefresh = 10 * time.Second
	DefaultTopK       = 5

	// maxRingSamples bounds one device's ring whatever Retention says
	// (18 hours at 1 Hz, 1.8 at 100 ms).
	maxRingSamples = 1 << 16
	// maxProcsPerSample bounds the processes kept per sample; upstream
	// processes sort first, so only the idlest neighbours are dropped.
	maxProcsPerSample = 64
)

// Options configures a Sampler. The zero value samples every second and
// keeps ten minutes, without metrics and without knowing the upstream.
type Options struct {
	Interval  time.Duration // between samples; default 1s, at least 100ms
	Retention time.Duration // how far back Window can look; default 10m

	// Upstream says how to find the upstream's PIDs (explicit, by
	// listening port, widened to the cgroup); it is resolved again every
	// PIDRefresh (default 10s), so a restarted upstream is followed.
	Upstream   pids.Spec
	PIDRefresh time.Duration

	// TopProcesses bounds the per-process series per device and the
	// neighbours listed in DeviceFacts.Processes; default 5.
	TopProcesses int

	Set    *metrics.Set // where inferwatch_gpu_* go; nil: no metrics
	Logger *slog.Logger // default slog.Default()
}

func (o Options) withDefaults() (Options, error) {
	switch {
	case o.Interval == 0:
		o.Interval = DefaultInterval
	case o.Interval < MinInterval:
		return o, fmt.Errorf("gpu: sampling interval %v is below the minimum %v", o.Interval, MinInterval)
	}
	switch {
	case o.Retention == 0:
		o.Retention = DefaultRetention
	case o.Retention < 0:
		return o, fmt.Errorf("gpu: negative retention %v", o.Retention)
	}
	switch {
	case o.PIDRefresh == 0:
		o.PIDRefresh = DefaultPIDRefresh
	case o.PIDRefresh < 0:
		return o, fmt.Errorf("gpu: negative PID refresh %v", o.PIDRefresh)
	}
	if o.TopProcesses <= 0 {
		o.TopProcesses = DefaultTopK
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o, nil
}

// ringCapacity is how many samples cover the retention, plus the one that
// straddles its start.
func (o Options) ringCapacity() int {
	n := int((o.Retention+o.Interval-1)/o.Interval) + 1
	return min(n, maxRingSamples)
}

// collector reads every device once per tick; nvmlCollector (nvml.go, cgo
// builds only) is the real one.
type collector interface {
	devices() []DeviceInfo
	// collect returns one Sample per device, in devices() order, with
	// Start, End and Process.Upstream left to the caller.
	collect(now time.Time) ([]Sample, []readError)
	close() error
}

// readError is one failed NVML read: call names the reading, code the NVML
// return code; gpu is the NVML index, -1 when unknown.
type readError struct {
	gpu        int
	call, code string
}

// clock is time for the sampler loop; tests drive it by hand.
type clock interface {
	now() time.Time
	ticker(d time.Duration) (<-chan time.Time, func())
}

type realClock struct{}

func (realClock) now() time.Time { return time.Now() }

func (realClock) ticker(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTicker(d)
	return t.C, t.Stop
}

// Sampler samples the GPUs in the background and answers Window. A nil
// *Sampler is valid and reports nothing, like an unavailable one.
type Sampler struct {
	o      Options
	log    *slog.Logger
	clk    clock
	col    collector // nil when NVML is unavailable
	reason string    // why it is unavailable
	devs   []DeviceInfo
	exp    *exporter

	mu    sync.RWMutex
	rings []*ring

	// Upstream PIDs, refreshed by the loop goroutine only.
	resolve  func() ([]int, error)
	pidAt    time.Time
	pidErr   string
	upMu     sync.RWMutex
	upstream map[int]bool

	ticks, readErrs atomic.Uint64
	lastDur, maxDur atomic.Int64
	afterSample     func() // test hook, called at the end of each tick
	cancel          context.CancelFunc
	done            chan struct{}
	closeOnce       sync.Once
	closeErr        error
	collectorErr    error // the collector's close, set by run before done is closed
}

// Start opens NVML and, when a device answers, starts sampling until ctx is
// done or Close is called. Without NVML it logs one line saying why and
// returns a Sampler whose Available is false. The error is only for
// invalid Options.
func Start(ctx context.Context, o Options) (*Sampler, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	col, reason := openNVML(o)
	return start(ctx, o, col, reason, realClock{}), nil
}

func start(ctx context.Context, o Options, col collector, reason string, clk clock) *Sampler {
	s := newSampler(o, col, reason, clk)
	s.begin(ctx)
	return s
}

// newSampler builds a Sampler around col (nil: unavailable) and logs what
// it found; begin starts the loop.
func newSampler(o Options, col collector, reason string, clk clock) *Sampler {
	s := &Sampler{o: o, log: o.Logger, clk: clk, col: col, reason: reason, exp: newExporter(o.Set, o.TopProcesses), done: make(chan struct{})}
	s.resolve = o.Upstream.Resolve
	s.exp.setAvailable(col != nil)
	if col == nil {
		s.log.Info(fmt.Sprintf("gpu: NVML unavailable (%s); GPU facts disabled", reason))
		close(s.done)
		return s
	}
	s.devs = col.devices()
	s.rings = make([]*ring, len(s.devs))
	for i := range s.rings {
		s.rings[i] = newRing(o.ringCapacity())
	}
	s.log.Info(fmt.Sprintf("gpu: sampling %d NVIDIA device(s) every %v", len(s.devs), o.Interval), "retention", o.Retention)
	return s
}

func (s *Sampler) begin(ctx context.Context) {
	if s.col == nil {
		return
	}
	ctx, s.cancel = context.WithCancel(ctx)
	go s.run(ctx)
}

func (s *Sampler) run(ctx context.Context) {
	defer close(s.done)
	defer func() { s.collectorErr = s.col.close() }()
	tick, stop := s.clk.ticker(s.o.Interval)
	defer stop()
	s.sampleOnce()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
			s.sampleOnce()
		}
	}
}

// sampleOnce takes one sample of every device: the loop's whole tick.
func (s *Sampler) sampleOnce() {
	t0 := s.clk.now()
	s.refreshPIDs(t0)
	samples, errs := s.col.collect(t0)
	s.upMu.RLock()
	for i := range samples {
		for j := range samples[i].Processes {
			p := &samples[i].Processes[j]
			p.Upstream = s.upstream[p.PID]
		}
	}
	s.upMu.RUnlock()

	s.mu.Lock()
	for i := range samples {
		smp := &samples[i]
		smp.End = t0
		// The reading describes the time since the previous one; after a
		// stall longer than two intervals only the last interval, leaving
		// the gap uncovered rather than smeared.
		smp.Start = t0.Add(-s.o.Interval)
		if last := s.rings[i].last(); last != nil && t0.Sub(last.End) <= 2*s.o.Interval && last.End.Before(t0) {
			smp.Start = last.End
		}
		sortProcesses(smp.Processes)
		if len(smp.Processes) > maxProcsPerSample {
			smp.Processes = slices.Clip(smp.Processes[:maxProcsPerSample])
		}
		s.rings[i].push(*smp)
	}
	s.mu.Unlock()

	dur := s.clk.now().Sub(t0)
	s.exp.update(s.devs, samples, errs, dur)
	s.ticks.Add(1)
	s.readErrs.Add(uint64(len(errs)))
	s.lastDur.Store(int64(dur))
	if int64(dur) > s.maxDur.Load() {
		s.maxDur.Store(int64(dur))
	}
	if s.afterSample != nil {
		s.afterSample()
	}
}

// sortProcesses orders upstream first, then by SM utilisation, memory and
// PID: the order the metrics' top-K and the per-sample bound cut in.
func sortProcesses(ps []Process) {
	slices.SortFunc(ps, func(a, b Process) int {
		if a.Upstream != b.Upstream {
			if a.Upstream {
				return -1
			}
			return 1
		}
		if c := cmp.Compare(utilOr(b.SMUtil), utilOr(a.SMUtil)); c != 0 {
			return c
		}
		if c := cmp.Compare(valOr(b.MemoryUsed), valOr(a.MemoryUsed)); c != 0 {
			return c
		}
		return cmp.Compare(a.PID, b.PID)
	})
}

func utilOr(v *float64) float64 {
	if v == nil {
		return -1
	}
	return *v
}

// refreshPIDs resolves the upstream's PIDs when they are due. A failure
// keeps the last set and is logged when it starts and when it ends, not on
// every refresh.
func (s *Sampler) refreshPIDs(now time.Time) {
	if s.o.Upstream.IsZero() {
		return
	}
	if !s.pidAt.IsZero() && now.Sub(s.pidAt) < s.o.PIDRefresh {
		return
	}
	s.pidAt = now
	found, err := s.resolve()
	switch {
	case err != nil && err.Error() != s.pidErr:
		s.log.Warn("gpu: finding the upstream's PIDs failed; GPU work is attributed with the last known set", "err", err, "found", found)
		s.pidErr = err.Error()
	case err == nil && s.pidErr != "":
		s.log.Info("gpu: upstream PIDs found again", "pids", found)
		s.pidErr = ""
	}
	if err != nil && len(found) == 0 {
		return
	}
	set := make(map[int]bool, len(found))
	for _, p := range found {
		set[p] = true
	}
	s.upMu.Lock()
	s.upstream = set
	s.upMu.Unlock()
}

// Available reports whether NVML answered and at least one device is
// sampled.
func (s *Sampler) Available() bool { return s != nil && s.col != nil }

// Reason says why the Sampler is unavailable; empty when it is available.
func (s *Sampler) Reason() string {
	if s == nil {
		return "no GPU sampler"
	}
	return s.reason
}

// Interval is the sampling interval.
func (s *Sampler) Interval() time.Duration {
	if s == nil {
		return 0
	}
	return s.o.Interval
}

// Devices lists the sampled devices.
func (s *Sampler) Devices() []DeviceInfo {
	if s == nil {
		return nil
	}
	return slices.Clone(s.devs)
}

// UpstreamPIDs returns the upstream's PIDs as last resolved, sorted.
func (s *Sampler) UpstreamPIDs() []int {
	if s == nil {
		return nil
	}
	s.upMu.RLock()
	defer s.upMu.RUnlock()
	out := make([]int, 0, len(s.upstream))
	for p := range s.upstream {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// Latest returns the newest sample of each device, aligned with Devices; a
// device not yet sampled has a zero Sample.
func (s *Sampler) Latest() []Sample {
	if !s.Available() {
		return nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]Sample, len(s.rings))
	for i, r := range s.rings {
		if l := r.last(); l != nil {
			out[i] = *l
			out[i].Processes = slices.Clone(l.Processes)
			out[i].XIDs = slices.Clone(l.XIDs)
		}
	}
	return out
}

// Settled reports whether every device has a sample ending at or after t,
// so that a window ending at t is fully covered. A sink that joins a call
// as soon as it ends sees the last interval uncovered (Coverage < 1);
// joining one Interval later gives the whole window.
func (s *Sampler) Settled(t time.Time) bool {
	if !s.Available() {
		return true // nothing will ever come
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, r := range s.rings {
		if l := r.last(); l == nil || l.End.Before(t) {
			return false
		}
	}
	return true
}

// Window returns the facts of the samples overlapping [from, to], per
// device, overlap-weighted (see the package documentation). An empty window
// (to not after from) is taken as the instant from. Devices with no
// overlapping sample are left out; no device at all is absent Facts.
func (s *Sampler) Window(from, to time.Time) Facts {
	if !s.Available() {
		return Facts{}
	}
	if !to.After(from) {
		to = from.Add(time.Nanosecond)
	}
	f := Facts{Devices: make([]DeviceFacts, 0, len(s.rings))}
	s.mu.RLock()
	defer s.mu.RUnlock()
	for i, r := range s.rings {
		if df, ok := join(s.devs[i], r, from, to, s.o.TopProcesses); ok {
			f.Devices = append(f.Devices, df)
		}
	}
	if len(f.Devices) == 0 {
		return Facts{} // absent, not an empty list
	}
	return f
}

// ForCall is Window over a call's span: from its Start to its End, or to
// the last point it reached when it did not complete.
func (s *Sampler) ForCall(c *record.Call) Facts {
	end := c.End
	for _, d := range [...]time.Duration{c.ResponseEnd, c.FirstByte, c.UpstreamSent, c.UpstreamStart, c.RequestEnd} {
		end = max(end, d)
	}
	return s.Window(c.Start, c.Start.Add(end))
}

// Stats are the sampler's own costs.
type Stats struct {
	Ticks        uint64        // samples taken (all devices at once)
	ReadErrors   uint64        // failed NVML reads, inferwatch_gpu_sample_errors_total summed
	LastDuration time.Duration // time the last tick took
	MaxDuration  time.Duration // longest tick
}

// Stats returns the sampler's counters.
func (s *Sampler) Stats() Stats {
	if s == nil {
		return Stats{}
	}
	return Stats{
		Ticks:        s.ticks.Load(),
		ReadErrors:   s.readErrs.Load(),
		LastDuration: time.Duration(s.lastDur.Load()),
		MaxDuration:  time.Duration(s.maxDur.Load()),
	}
}

// Close stops sampling and releases NVML; the samples taken stay readable.
// Cancelling Start's ctx does the same; Close then only waits.
func (s *Sampler) Close() error {
	if !s.Available() {
		return nil
	}
	s.closeOnce.Do(func() {
		s.cancel()
		<-s.done
		if s.collectorErr != nil {
			s.closeErr = fmt.Errorf("gpu: close: %w", s.collectorErr)
		}
	})
	return s.closeErr
}
