package bpf

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inferwatch/inferwatch/record"
	"golang.org/x/sys/unix"
)

// Probes follows one upstream with eBPF probes and answers Window. A nil
// *Probes is valid and reports nothing.
type Probes struct {
	o   Options
	log *slog.Logger
	exp *exporter
	sym symbolizer

	k                      kernel // nil: eBPF disabled
	cudaOn, schedOn, oomOn bool
	// foreignPIDs: this process's PIDs are not the kernel's (kernelPIDs),
	// so the upstream is not followed by PID.
	foreignPIDs bool
	reasons     []string
	costs       Costs

	// CLOCK_MONOTONIC (bpf_ktime_get_ns) at baseTime, to turn event
	// timestamps into time.Time.
	baseTime time.Time
	baseNs   int64

	// Loop state, touched by the run goroutine only.
	targets    map[int]*target
	carry      sample // counters of processes retired since the last sample
	lastSample time.Time
	gate       gateLog
	launchOn   bool // launch probes attached
	per        periodState
	lastHits   [nHits]uint64
	gateHits   uint64       // launch probe hits when the gate opened
	hitMarks   []launchMark // launch probe hits at the watch ticks of the open gate
	spent      atomic.Int64 // ns: estimated CPU cost of the probes since Start
	duty       float64
	launchRate float64 // launch probe hits per second while attached
	alwaysRate float64 // share of a core the always-on probes cost
	dutyTimer  *time.Timer
	pidErr     string
	cg         cgroupReader
	cgWhy      string // why cg follows no cgroup, last said
	psi        psiReader

	mu       sync.RWMutex // guards what Window and the status calls read
	ring     *ring
	syncs    syncLog
	ooms     []OOMKill
	upstream map[int]bool
	status   []TargetStatus
	over     Overhead

	// Detaching a uprobe waits for an SRCU grace period (~100 ms here)
	// after it has removed the breakpoint, so links are closed off the
	// loop; detachCPU sums the CPU time that took.
	closing   sync.WaitGroup
	detachCPU atomic.Int64

	cancel    context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
}

// periodState is what the period in progress has cost so far.
type periodState struct {
	start  time.Time
	length time.Duration
	hits   [nHits]uint64 // hits this period
	attach time.Duration // CPU time spent attaching and detaching probes
}

// target is one process of the upstream.
type target struct {
	pid     int
	since   time.Time
	maps    []mapping
	libs    map[fileKey]*probedLib
	cuda    cudaTotals // last read
	sched   schedTotals
	atGate  uint64       // launches when the gate last opened
	marks   []launchMark // launches at the watch ticks of the open gate
	rates   []float64    // launch rates of the last on-phases
	rate    float64      // launches per second that stand in while detached
	rateOK  bool
	scanErr string
}

// probedLib is one CUDA library of a process and the probes on it.
type probedLib struct {
	lib       *library
	file      elfFile
	always    []io.Closer
	launchFns []apiProbe
	launch    []io.Closer
	funcs     int // functions probed
	err       string
}

// TargetStatus describes one followed process.
type TargetStatus struct {
	PID       int             `json:"pid"`
	Since     time.Time       `json:"since"`
	Libraries []LibraryStatus `json:"libraries,omitempty"`
	Error     string          `json:"error,omitempty"`
}

// LibraryStatus describes one probed CUDA library.
type LibraryStatus struct {
	Path      string `json:"path"` // as the process mapped it
	Kind      string `json:"kind"` // runtime or driver
	Deleted   bool   `json:"deleted,omitempty"`
	Functions int    `json:"functions"` // API functions probed
	Error     string `json:"error,omitempty"`
}

// Start loads the probes and follows the upstream until ctx is done or
// Close is called. Without the privilege to load eBPF (or without BTF, or
// on another architecture) it logs one line saying why and returns Probes
// whose Enabled is false; the cgroup and pressure facts still work. The
// error is only for invalid Options. Close releases the probes; cancelling
// ctx only stops following the upstream.
func Start(ctx context.Context, o Options) (*Probes, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	p := &Probes{
		o:        o,
		log:      o.Logger,
		exp:      newExporter(o.Set),
		targets:  map[int]*target{},
		ring:     newTieredRing(o.ringShape()),
		upstream: map[int]bool{},
		done:     make(chan struct{}),
		duty:     1,
	}
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	p.baseTime, p.baseNs = time.Now(), ts.Nano()

	pidErr := kernelPIDs()
	p.foreignPIDs = pidErr != nil
	k, err := openKernel(pidErr)
	if err != nil {
		p.reasons = []string{err.Error()}
		p.log.Warn(fmt.Sprintf("bpf: eBPF probes disabled: %v; CUDA and scheduler facts are absent, everything else works", err))
	} else {
		p.k = k
		p.cudaOn, p.schedOn, p.oomOn, p.reasons = k.parts()
		p.costs = DefaultCosts
		if o.Costs != nil {
			p.costs = *o.Costs
		} else if c, err := Calibrate(); err != nil {
			p.reasons = append(p.reasons, fmt.Sprintf("calibration failed, default per-hit costs in use: %v", err))
		} else {
			p.costs = c
		}
		p.log.Info(p.startLine())
	}
	p.exp.start(p.k != nil, p.cudaOn, p.schedOn)
	p.over = Overhead{Budget: o.Budget, LaunchDuty: 1, Costs: p.costs}
	ctx, p.cancel = context.WithCancel(ctx)
	go p.run(ctx)
	return p, nil
}

func (p *Probes) startLine() string {
	var on []string
	if p.cudaOn {
		on = append(on, "CUDA uprobes")
	}
	if p.schedOn {
		on = append(on, "scheduler tracepoints")
	}
	if p.oomOn {
		on = append(on, "OOM tracepoint")
	}
	c := p.costs
	how := "calibrated"
	if !c.Calibrated {
		how = "assumed"
	}
	s := fmt.Sprintf("bpf: eBPF probes on (%s); budget %.1f%% of a core; %s cost per hit: uprobe %v, uretprobe %v, tracepoint %v",
		strings.Join(on, ", "), 100*p.o.Budget, how, c.Uprobe, c.Uretprobe, c.Tracepoint)
	if len(p.reasons) > 0 {
		s += "; off: " + joinReasons(p.reasons)
	}
	return s
}

func joinReasons(r []string) string { return strings.Join(r, "; ") }

// Enabled reports whether the eBPF probes loaded.
func (p *Probes) Enabled() bool { return p != nil && p.k != nil }

// WatchesOOM reports whether the oom:mark_victim tracepoint is attached:
// then a window without OOM kills had none, rather than unknown.
func (p *Probes) WatchesOOM() bool { return p.Enabled() && p.oomOn }

// Reasons says why the probes, or some of them, are off; empty when all
// are on.
func (p *Probes) Reasons() []string {
	if p == nil {
		return []string{"no probes"}
	}
	return slices.Clone(p.reasons)
}

// Costs returns the per-hit costs the overhead estimate uses.
func (p *Probes) Costs() Costs {
	if p == nil {
		return Costs{}
	}
	return p.costs
}

// Overhead returns the budget controller's view of the last period.
func (p *Probes) Overhead() Overhead {
	if p == nil {
		return Overhead{}
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	o := p.over
	o.HitRates = maps.Clone(o.HitRates)
	o.Spent = time.Duration(p.spent.Load())
	return o
}

// Targets lists the processes followed and what is probed in each.
func (p *Probes) Targets() []TargetStatus {
	if p == nil {
		return nil
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	return slices.Clone(p.status)
}

// Window returns the facts of [from, to]; see Facts for the method.
func (p *Probes) Window(from, to time.Time) Facts {
	if p == nil || !to.After(from) {
		return Facts{}
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	return join(p.ring, &p.syncs, p.ooms, from, to, time.Now())
}

// CUDAOutstanding returns the device memory the upstream's processes
// allocated through CUDA while probed and have not freed, summed, as of
// the last sample; ok is false until a sample saw a probed CUDA library.
// It counts from when each process was first probed: a level relative to
// that moment, the leak watch's trend signal for device memory.
func (p *Probes) CUDAOutstanding() (bytes int64, ok bool) {
	if p == nil {
		return 0, false
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	l := p.ring.last()
	if l == nil || !l.cuda {
		return 0, false
	}
	return l.outstanding, true
}

// ForCall returns the facts of a finished call's window: from the request
// handed to the upstream to the last response byte when those are known
// (the server's share of the call), else the whole call.
func (p *Probes) ForCall(c *record.Call) Facts {
	if c == nil || c.End <= 0 {
		return Facts{}
	}
	from, to := c.Start, c.Start.Add(c.End)
	if c.UpstreamStart > 0 && c.ResponseEnd > c.UpstreamStart {
		from, to = c.Start.Add(c.UpstreamStart), c.Start.Add(c.ResponseEnd)
	}
	return p.Window(from, to)
}

// Settled reports whether a sample taken at or after t exists, so that
// Window up to t has all it will get.
func (p *Probes) Settled(t time.Time) bool {
	if p == nil {
		return true
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	l := p.ring.last()
	return l != nil && !l.end.Before(t)
}

// KernelLaunches is one launched function of a process and how often it
// was launched while the launch probes were attached.
type KernelLaunches struct {
	PID  int    `json:"pid"`
	API  string `json:"api"` // runtime (cudaLaunchKernel*) or driver (cuLaunchKernel*)
	Func uint64 `json:"func"`
	// Name is the ELF symbol at Func in the file it lies in (mangled), or
	// empty: best effort. Runtime launches pass the host stub of the
	// kernel, which usually has a symbol; driver launches pass a
	// CUfunction handle, heap memory that never does.
	Name     string `json:"name,omitempty"`
	File     string `json:"file,omitempty"`
	Launches uint64 `json:"launches"`
}

// Kernels returns the n most launched functions of the upstream's
// processes. With duty-cycled launch probes the counts cover the on-phases
// only; their proportions still hold.
func (p *Probes) Kernels(n int) []KernelLaunches {
	if p == nil || p.k == nil {
		return nil
	}
	var out []KernelLaunches
	p.k.launchedFuncs(func(pid int, driver bool, fn, count uint64) {
		api := "runtime"
		if driver {
			api = "driver"
		}
		out = append(out, KernelLaunches{PID: pid, API: api, Func: fn, Launches: count})
	})
	slices.SortFunc(out, func(a, b KernelLaunches) int { return cmp.Compare(b.Launches, a.Launches) })
	if n > 0 && len(out) > n {
		out = out[:n]
	}
	byPID := map[int][]mapping{}
	for i := range out {
		k := &out[i]
		m, ok := byPID[k.PID]
		if !ok {
			m, _ = readMaps(k.PID)
			byPID[k.PID] = m
		}
		k.Name, k.File = p.sym.name(k.PID, m, k.Func)
	}
	return out
}

// Close detaches everything and stops following the upstream.
func (p *Probes) Close() error {
	if p == nil {
		return nil
	}
	p.closeOnce.Do(func() {
		p.cancel()
		<-p.done
		p.closing.Wait()
		if p.k != nil {
			p.closeErr = p.k.close()
		}
		p.sym.close()
		p.exp.close()
	})
	return p.closeErr
}

func (p *Probes) run(ctx context.Context) {
	defer close(p.done)
	// One thread for the loop, so that its thread CPU time is the cost of
	// attaching probes.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	now := time.Now()
	p.lastSample = now
	p.rescan(now)
	sampleT := time.NewTicker(p.o.Sample)
	defer sampleT.Stop()
	rescanT := time.NewTicker(p.o.Rescan)
	defer rescanT.Stop()

	// The budget loop runs only with CUDA probes: nothing else is
	// duty-cycled.
	var periodC, dutyC, watchC <-chan time.Time
	var periodT *time.Timer
	if p.cudaOn {
		p.lastHits, _ = p.k.readHits()
		p.hitMarks = make([]launchMark, 0, 8)
		p.per = periodState{start: now, length: min(firstPeriod, p.o.Period)}
		p.openGate()
		periodT = time.NewTimer(p.per.length)
		defer periodT.Stop()
		periodC = periodT.C
		p.dutyTimer = time.NewTimer(time.Hour)
		p.dutyTimer.Stop()
		defer p.dutyTimer.Stop()
		dutyC = p.dutyTimer.C
		watch := time.NewTicker(watchInterval)
		defer watch.Stop()
		watchC = watch.C
	}
	for {
		select {
		case <-ctx.Done():
			p.shutdown()
			return
		case <-sampleT.C:
			p.sampleOnce(time.Now())
		case <-rescanT.C:
			p.rescan(time.Now())
		case <-periodC:
			p.endPeriod(time.Now())
			periodT.Reset(p.o.Period)
		case <-dutyC:
			p.closeGate()
		case <-watchC:
			p.watch(time.Now())
		}
	}
}

func (p *Probes) shutdown() {
	for pid := range p.targets {
		p.retire(pid)
	}
}

// ktime turns a bpf_ktime_get_ns reading into a time.Time.
func (p *Probes) ktime(ns uint64) time.Time {
	return p.baseTime.Add(time.Duration(int64(ns) - p.baseNs))
}

// rescan resolves the upstream's PIDs, follows new and gone processes, and
// probes the CUDA libraries each has mapped by now.
func (p *Probes) rescan(now time.Time) {
	var pids []int
	if p.o.PIDs != nil {
		found, err := p.o.PIDs()
		switch {
		case err != nil && err.Error() != p.pidErr:
			p.log.Warn("bpf: finding the upstream's PIDs failed; following the last known set", "err", err, "found", found)
			p.pidErr = err.Error()
		case err == nil && p.pidErr != "":
			p.log.Info("bpf: upstream PIDs found again", "pids", found)
			p.pidErr = ""
		}
		if err != nil && len(found) == 0 {
			pids = slices.Collect(maps.Keys(p.targets))
		} else {
			pids = found
		}
	}
	want := map[int]bool{}
	for _, pid := range pids {
		if pid > 0 {
			want[pid] = true
		}
	}
	if p.foreignPIDs {
		// Only the cgroup facts, read through this namespace's /proc, can
		// use these PIDs; following them in the kernel would follow others.
		p.setCgroupPIDs(want)
		return
	}
	for pid := range p.targets {
		if !want[pid] {
			p.retire(pid)
		}
	}
	for pid := range want {
		if p.targets[pid] == nil {
			p.follow(pid, now)
		}
	}
	for _, t := range p.targets {
		p.scanLibs(t)
	}
	p.setCgroupPIDs(want)
	p.publishStatus(want)
}

// setCgroupPIDs points the throttling reader at the PIDs' cgroups, and
// says once why there is none to read.
func (p *Probes) setCgroupPIDs(want map[int]bool) {
	why := ""
	if err := p.cg.setPIDs(slices.Sorted(maps.Keys(want))); err != nil {
		why = err.Error()
	}
	if why != p.cgWhy && why != "" {
		p.log.Warn("bpf: no CPU throttling facts for the upstream", "err", why)
	}
	p.cgWhy = why
}

func (p *Probes) publishStatus(want map[int]bool) {
	var st []TargetStatus
	for _, t := range p.targets {
		s := TargetStatus{PID: t.pid, Since: t.since, Error: t.scanErr}
		for _, l := range t.libs {
			s.Libraries = append(s.Libraries, LibraryStatus{Path: l.lib.path, Kind: l.lib.kind.String(), Deleted: l.lib.deleted, Functions: l.funcs, Error: l.err})
		}
		slices.SortFunc(s.Libraries, func(a, b LibraryStatus) int { return cmp.Compare(a.Path, b.Path) })
		st = append(st, s)
	}
	slices.SortFunc(st, func(a, b TargetStatus) int { return cmp.Compare(a.PID, b.PID) })
	p.mu.Lock()
	p.status = st
	p.upstream = want
	p.mu.Unlock()
}

func (p *Probes) follow(pid int, now time.Time) {
	t := &target{pid: pid, since: now, libs: map[fileKey]*probedLib{}}
	if p.k != nil {
		if err := p.k.addTarget(pid); err != nil {
			t.scanErr = err.Error()
		}
		// Start from the counters as they are: zero unless the PID was
		// followed before.
		t.cuda, _ = p.k.readCUDA(pid)
		t.sched, _ = p.k.readSched(pid)
		t.atGate = t.cuda.launches()
	}
	p.targets[pid] = t
}

// retire stops following a process: its last counts go into the next
// sample, its probes and kernel state go away.
func (p *Probes) retire(pid int) {
	t := p.targets[pid]
	if t == nil {
		return
	}
	if p.k != nil {
		var s sample
		p.readTarget(t, &s, 0)
		p.carry.addCounters(&s)
		for _, l := range t.libs {
			p.detach(l.always)
			p.detach(l.launch)
		}
		p.k.removeTarget(pid)
	}
	p.exp.forgetPID(pid)
	p.mu.Lock()
	p.syncs.forget(uint32(pid))
	p.mu.Unlock()
	delete(p.targets, pid)
}

// detach closes links in the background, each on its own thread: the
// grace periods they wait for overlap.
func (p *Probes) detach(cs []io.Closer) {
	for _, c := range cs {
		p.closing.Add(1)
		go func() {
			defer p.closing.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			t0 := threadCPU()
			c.Close()
			p.detachCPU.Add(int64(threadCPU() - t0))
		}()
	}
}

// scanLibs reads the process's mappings and probes CUDA libraries mapped
// since the last scan: a library loaded late (dlopen) is probed within one
// Rescan.
func (p *Probes) scanLibs(t *target) {
	maps, err := readMaps(t.pid)
	if err != nil {
		t.scanErr = err.Error()
		return
	}
	t.scanErr = ""
	t.maps = maps
	if !p.cudaOn {
		return
	}
	libs := cudaLibraries(t.pid, maps)
	var ranges [][2]uint64
	for _, l := range libs {
		ranges = append(ranges, l.exec...)
	}
	// Before any probe fires: the probes tell the libraries' own calls by
	// these ranges.
	if err := p.k.setLibRanges(t.pid, ranges); err != nil {
		t.scanErr = err.Error()
	}
	seen := map[fileKey]bool{}
	for _, l := range libs {
		seen[l.key] = true
		if pl := t.libs[l.key]; pl != nil {
			pl.lib = l
			continue
		}
		t.libs[l.key] = p.probeLib(t, l)
	}
	for k, pl := range t.libs {
		if !seen[k] {
			p.detach(pl.always)
			p.detach(pl.launch)
			delete(t.libs, k)
		}
	}
}

func (p *Probes) probeLib(t *target, l *library) *probedLib {
	pl := &probedLib{lib: l}
	f, err := p.k.openBinary(l.open)
	if err != nil {
		pl.err = err.Error()
		p.log.Warn("bpf: cannot probe a CUDA library", "pid", t.pid, "path", l.path, "err", err)
		return pl
	}
	pl.file = f
	var always []apiProbe
	for _, ap := range apiProbes[l.kind] {
		if !f.has(ap.sym) {
			continue
		}
		pl.funcs++
		if ap.prog == progLaunch {
			pl.launchFns = append(pl.launchFns, ap)
		} else {
			always = append(always, ap)
		}
	}
	var errs []string
	cs, err := f.attach(always, t.pid)
	pl.always = cs
	if err != nil {
		errs = append(errs, err.Error())
	}
	if p.launchOn {
		if err := p.attachLaunch(t.pid, pl); err != nil {
			errs = append(errs, err.Error())
		}
	}
	pl.err = strings.Join(errs, "; ")
	name := filepath.Base(l.path)
	if pl.err != "" {
		p.log.Warn("bpf: probed a CUDA library in part", "pid", t.pid, "path", l.path, "functions", pl.funcs, "err", pl.err)
	} else {
		p.log.Info("bpf: probing "+name, "pid", t.pid, "path", l.path, "kind", l.kind.String(), "functions", pl.funcs, "deleted", l.deleted)
	}
	return pl
}

func (p *Probes) attachLaunch(pid int, pl *probedLib) error {
	if len(pl.launchFns) == 0 {
		return nil
	}
	cs, err := pl.file.attach(pl.launchFns, pid)
	pl.launch = append(pl.launch, cs...)
	return err
}

// readTarget adds one process's counters since the last read to s; off is
// the part of the interval the launch probes were detached.
func (p *Probes) readTarget(t *target, s *sample, off time.Duration) {
	if p.cudaOn {
		if c, err := p.k.readCUDA(t.pid); err == nil {
			d := c.sub(t.cuda)
			t.cuda = c
			counted := float64(d.launches())
			est := counted
			if off > 0 && t.rateOK {
				est += t.rate * off.Seconds()
			}
			s.launchesCounted += counted
			s.launches += est
			for i := range d.Copies {
				s.copies[i] += d.Copies[i]
				s.copyBytes[i] += d.CopyBytes[i]
			}
			s.syncs += d.Syncs
			s.syncNs += d.SyncNs
			s.allocs += d.Allocs
			s.allocBytes += d.AllocBytes
			s.frees += d.Frees
			s.freeBytes += d.FreeBytes
			s.outstanding += c.outstanding()
			// Per-PID series only for processes with CUDA libraries.
			if len(t.libs) > 0 {
				s.cuda = true
				s.estimated = s.estimated || off > 0
				p.exp.cudaSample(t.pid, counted, est-counted, d, c.outstanding())
			}
		}
	}
	if p.schedOn {
		if c, err := p.k.readSched(t.pid); err == nil {
			d := c.sub(t.sched)
			t.sched = c
			s.sched = true
			s.rqWaits += d.RqWaits
			s.rqNs += d.RqNs
			for i, n := range d.RqHist {
				s.rqHist[i] += uint32(n)
			}
			s.offCPU += d.OffCPU
			s.offCPUNs += d.OffCPUNs
			p.exp.schedSample(d)
		}
	}
}

// sampleOnce reads everything into one sample and appends it to the ring.
func (p *Probes) sampleOnce(now time.Time) {
	s := sample{start: p.lastSample, end: now}
	if p.cudaOn {
		p.account()
	}
	p.drainEvents()
	off := time.Duration(0)
	if p.cudaOn {
		off = now.Sub(p.lastSample) - p.gate.onWithin(p.lastSample, now)
	}
	for _, t := range p.targets {
		p.readTarget(t, &s, off)
	}
	s.addCounters(&p.carry)
	p.carry = sample{}
	if d, ok := p.cg.sample(); ok {
		s.cgroup, s.throttled = true, d
		p.exp.throttled(d)
	}
	s.psi, s.psiOK = p.psi.sample()
	p.mu.Lock()
	p.ring.push(s)
	p.mu.Unlock()
	p.lastSample = now
}

// drainEvents reads the sync and OOM events waiting in the ring buffers.
func (p *Probes) drainEvents() {
	if p.k == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	_ = p.k.drainSync(func(e syncEvent) {
		s := syncSpan{begin: p.ktime(e.Begin), tgid: e.TGID, tid: e.TID, fn: e.Fn}
		if e.End == 0 {
			p.syncs.begin(s)
			return
		}
		s.end = p.ktime(e.End)
		p.syncs.end(s)
	})
	_ = p.k.drainOOM(func(e oomEvent) {
		k := OOMKill{Time: p.ktime(e.Ts), PID: int(e.PID), Comm: e.Comm, UID: e.UID, AnonRSSKB: e.AnonRSSKB}
		k.Upstream = p.upstream[k.PID] || p.upstream[tgidOf(k.PID)]
		if len(p.ooms) == maxOOMKills {
			p.ooms = p.ooms[1:]
		}
		p.ooms = append(p.ooms, k)
		p.exp.oomKill(k.Upstream)
	})
}

// tgidOf returns the process a thread belongs to, or 0 when it is gone.
func tgidOf(tid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", tid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Tgid:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}
