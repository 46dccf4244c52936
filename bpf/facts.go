package bpf

import (
	"time"
)

// sample is one interval (start, end] of the in-kernel aggregates, summed
// over the upstream's processes, plus the user-space readings of the same
// interval.
type sample struct {
	start, end time.Time

	cuda bool // some process had CUDA libraries probed
	// launches is the best estimate: the counted launches plus, for the
	// part of the interval the duty-cycled launch probes were detached,
	// the rate of the last on-phase times that part.
	launches, launchesCounted float64
	estimated                 bool
	copies, copyBytes         [nDirs]uint64
	syncs                     uint64
	syncNs                    uint64
	allocs, allocBytes        uint64
	frees, freeBytes          uint64
	outstanding               int64 // at end, summed over the processes

	sched            bool
	rqWaits, rqNs    uint64
	rqHist           [nBuckets]uint32
	offCPU, offCPUNs uint64

	cgroup    bool
	throttled cpuStat

	psi   [nPSI]psiTotals
	psiOK [nPSI]bool
}

// add folds the counters of d (a retired process's last interval) into s.
func (s *sample) addCounters(d *sample) {
	s.cuda = s.cuda || d.cuda
	s.sched = s.sched || d.sched
	s.launches += d.launches
	s.launchesCounted += d.launchesCounted
	for i := range s.copies {
		s.copies[i] += d.copies[i]
		s.copyBytes[i] += d.copyBytes[i]
	}
	s.syncs += d.syncs
	s.syncNs += d.syncNs
	s.allocs += d.allocs
	s.allocBytes += d.allocBytes
	s.frees += d.frees
	s.freeBytes += d.freeBytes
	s.rqWaits += d.rqWaits
	s.rqNs += d.rqNs
	for i := range s.rqHist {
		s.rqHist[i] += d.rqHist[i]
	}
	s.offCPU += d.offCPU
	s.offCPUNs += d.offCPUNs
}

// merge extends s by d, the sample that follows it: counters add up,
// levels are d's.
func (s *sample) merge(d *sample) {
	s.end = d.end
	s.addCounters(d)
	s.estimated = s.estimated || d.estimated
	s.outstanding = d.outstanding
	if d.cgroup {
		s.cgroup = true
		s.throttled.periods += d.throttled.periods
		s.throttled.throttled += d.throttled.throttled
		s.throttled.throttledTime += d.throttled.throttledTime
	}
	for i := range s.psi {
		if d.psiOK[i] {
			s.psiOK[i] = true
			s.psi[i].some += d.psi[i].some
			s.psi[i].full += d.psi[i].full
		}
	}
}

// ring holds the samples of the retention, oldest first: the newest at
// the sample interval (fine), older ones merged per coarse samples each
// (coarse). At the defaults that is the last 2 minutes at 250 ms and the 8
// before at 2 s: 722 samples of ~490 bytes instead of 2401: 0.8 MiB less
// live heap, 1.3-1.8 MiB less RSS as measured (docs/perf.md). A window's
// counters come from the samples it overlaps pro rata either way; windows
// more than 2 minutes back (an alert's diagnosis) are cut at 2 s
// boundaries instead of 250 ms.
type ring struct {
	fine   samples
	coarse samples
	per    int // fine samples merged into one coarse sample
	open   int // fine samples merged into the newest coarse one so far
}

// samples is a bounded ring buffer of samples, oldest first.
type samples struct {
	buf   []sample
	first int
	n     int
}

func (b *samples) push(s *sample) {
	if b.n < len(b.buf) {
		b.buf[(b.first+b.n)%len(b.buf)] = *s
		b.n++
		return
	}
	b.buf[b.first] = *s
	b.first = (b.first + 1) % len(b.buf)
}

func (b *samples) at(i int) *sample { return &b.buf[(b.first+i)%len(b.buf)] }

// newRing is a ring of capacity samples at full resolution.
func newRing(capacity int) *ring { return newTieredRing(capacity, 0, 1) }

// newTieredRing keeps fine samples as pushed, then coarse ones of per
// merged samples each.
func newTieredRing(fine, coarse, per int) *ring {
	r := &ring{fine: samples{buf: make([]sample, fine)}, per: max(per, 1)}
	if coarse > 0 {
		r.coarse.buf = make([]sample, coarse)
	}
	return r
}

func (r *ring) push(s sample) {
	if r.fine.n == len(r.fine.buf) && len(r.coarse.buf) > 0 {
		old := r.fine.at(0)
		// Only samples that follow each other merge: one across a gap
		// would claim the gap as covered.
		var last *sample
		if r.coarse.n > 0 && r.open < r.per {
			last = r.coarse.at(r.coarse.n - 1)
		}
		if last != nil && last.end.Equal(old.start) {
			last.merge(old)
			r.open++
		} else {
			r.coarse.push(old)
			r.open = 1
		}
	}
	r.fine.push(&s)
}

// len is the number of samples held, coarse and fine.
func (r *ring) len() int { return r.coarse.n + r.fine.n }

// at returns the i-th sample held, oldest first.
func (r *ring) at(i int) *sample {
	if i < r.coarse.n {
		return r.coarse.at(i)
	}
	return r.fine.at(i - r.coarse.n)
}

func (r *ring) last() *sample {
	if r.fine.n == 0 {
		return nil
	}
	return r.fine.at(r.fine.n - 1)
}

// overlap is how much of [a0, a1] lies within [b0, b1]; zero or less when
// nothing does.
func overlap(a0, a1, b0, b1 time.Time) time.Duration {
	if a0.Before(b0) {
		a0 = b0
	}
	if a1.After(b1) {
		a1 = b1
	}
	return a1.Sub(a0)
}

// overlapping calls f for each sample overlapping [from, to] with the
// overlap and the overlap's share of the sample's interval.
func (r *ring) overlapping(from, to time.Time, f func(s *sample, overlap time.Duration, share float64)) {
	// Samples are in time order and windows are mostly recent: find the
	// first overlapping one from the newest end.
	i := r.len()
	for i > 0 && r.at(i-1).end.After(from) {
		i--
	}
	for ; i < r.len(); i++ {
		s := r.at(i)
		if !s.start.Before(to) {
			break
		}
		ov := overlap(s.start, s.end, from, to)
		if ov <= 0 {
			continue
		}
		f(s, ov, float64(ov)/float64(s.end.Sub(s.start)))
	}
}

// Facts are the eBPF and cgroup facts of one time window for the
// upstream's processes. Counters come from the samples the window
// overlaps, each weighted by the share of its interval inside the window
// (proportional to overlap); synchronisation waits are exact, clipped to
// the window; levels (outstanding allocations) are the last sample's.
// A nil part is absent: its probes are off, or no sample overlaps.
type Facts struct {
	Samples  int     `json:"samples"`
	Coverage float64 `json:"coverage"` // share of the window the samples cover

	CUDA     *CUDAFacts     `json:"cuda,omitempty"`
	Sched    *SchedFacts    `json:"sched,omitempty"`
	Cgroup   *CgroupFacts   `json:"cgroup,omitempty"`
	Pressure *PressureFacts `json:"pressure,omitempty"`
	// OOMKills lists the OOM kills of the whole machine in the window;
	// Upstream marks the upstream's own.
	OOMKills []OOMKill `json:"oom_kills,omitempty"`
}

// Present reports whether anything was observed for the window.
func (f Facts) Present() bool {
	return f.CUDA != nil || f.Sched != nil || f.Cgroup != nil || f.Pressure != nil || len(f.OOMKills) > 0
}

// CUDAFacts are the upstream's CUDA API activity. A call made by the CUDA
// libraries themselves (cudaMalloc reaching cuMemAlloc_v2) counts once.
type CUDAFacts struct {
	// Launches counts cudaLaunchKernel* and cuLaunchKernel* calls.
	// LaunchesEstimated says that part of the window was not observed
	// because the launch probes were duty-cycled, and the count is the
	// observed launches plus the observed rate times the unobserved time.
	Launches          float64 `json:"launches"`
	LaunchesEstimated bool    `json:"launches_estimated,omitempty"`

	Copies         float64 `json:"copies"`
	H2DBytes       float64 `json:"h2d_bytes"`
	D2HBytes       float64 `json:"d2h_bytes"`
	D2DBytes       float64 `json:"d2d_bytes"`
	OtherCopyBytes float64 `json:"other_copy_bytes"` // host to host, or direction inferred by CUDA

	// SyncWait is the time threads spent in synchronisation calls
	// (stream, device, event, context) within the window, summed over
	// threads; Syncs counts the calls that overlap the window.
	SyncWait time.Duration `json:"sync_wait_ns"`
	Syncs    int           `json:"syncs"`

	Allocs     float64 `json:"allocs"`
	AllocBytes float64 `json:"alloc_bytes"`
	FreeBytes  float64 `json:"free_bytes"`
	// Outstanding is the bytes allocated while probed and not freed, at
	// the window's end: the leak signal.
	Outstanding int64 `json:"alloc_outstanding_bytes"`
}

// SchedFacts are the scheduler's treatment of the upstream's threads,
// credited when a thread runs again.
type SchedFacts struct {
	// RunqueueDelay sums the time threads waited runnable for a CPU.
	RunqueueDelay time.Duration `json:"runqueue_delay_ns"`
	RunqueueWaits float64       `json:"runqueue_waits"`
	// Percentiles of a single wait, from log2 buckets: within a factor of
	// two, interpolated inside the bucket.
	RunqueueP50 time.Duration `json:"runqueue_p50_ns"`
	RunqueueP99 time.Duration `json:"runqueue_p99_ns"`
	// OffCPU sums the time threads were switched out (blocked or waiting
	// in the run queue). A long sleep is credited whole when it ends.
	OffCPU time.Duration `json:"offcpu_ns"`
}

// CgroupFacts are the CFS throttling of the upstream's cgroups.
type CgroupFacts struct {
	Throttled        time.Duration `json:"throttled_ns"`
	ThrottledPeriods float64       `json:"throttled_periods"`
	Periods          float64       `json:"periods"`
}

// PressureFacts are the machine's pressure stall time (/proc/pressure) in
// the window; a resource the kernel does not report is nil.
type PressureFacts struct {
	CPU    *Stall `json:"cpu,omitempty"`
	Memory *Stall `json:"memory,omitempty"`
	IO     *Stall `json:"io,omitempty"`
}

// Stall is the time some, and all, non-idle tasks were stalled on a
// resource.
type Stall struct {
	Some time.Duration `json:"some_ns"`
	Full time.Duration `json:"full_ns"`
}

// OOMKill is one victim of the OOM killer (oom:mark_victim).
type OOMKill struct {
	Time      time.Time `json:"time"`
	PID       int       `json:"pid"` // as the kernel names the victim task
	Comm      string    `json:"comm,omitempty"`
	UID       uint32    `json:"uid"`
	AnonRSSKB uint64    `json:"anon_rss_kb,omitempty"`
	Upstream  bool      `json:"upstream"`
}

// syncSpan is one synchronisation wait; end is zero while it lasts.
type syncSpan struct {
	begin, end time.Time
	tgid, tid  uint32
	fn         uint32
}

// syncLog keeps the recent synchronisation waits.
type syncLog struct {
	done []syncSpan // ring, oldest first from first
	head int
	open map[uint32]syncSpan // by thread
}

func (l *syncLog) begin(s syncSpan) {
	if l.open == nil {
		l.open = map[uint32]syncSpan{}
	}
	l.open[s.tid] = s
}

func (l *syncLog) end(s syncSpan) {
	delete(l.open, s.tid)
	if len(l.done) < maxSyncSpans {
		l.done = append(l.done, s)
		return
	}
	l.done[l.head] = s
	l.head = (l.head + 1) % maxSyncSpans
}

// forget drops the open waits of a process that is gone.
func (l *syncLog) forget(tgid uint32) {
	for tid, s := range l.open {
		if s.tgid == tgid {
			delete(l.open, tid)
		}
	}
}

// within sums the waits' overlap with [from, to]; a wait still open counts
// up to now.
func (l *syncLog) within(from, to, now time.Time) (time.Duration, int) {
	var sum time.Duration
	var n int
	clip := func(b, e time.Time) {
		if d := overlap(b, e, from, to); d > 0 {
			sum += d
			n++
		}
	}
	for _, s := range l.done {
		clip(s.begin, s.end)
	}
	for _, s := range l.open {
		clip(s.begin, now)
	}
	return sum, n
}

// join computes the facts of [from, to] from the ring, the sync log and
// the OOM kills.
func join(r *ring, syncs *syncLog, ooms []OOMKill, from, to, now time.Time) Facts {
	var f Facts
	var covered time.Duration
	var cuda CUDAFacts
	var sched SchedFacts
	var cg CgroupFacts
	var rqHist [nBuckets]float64
	var psi [nPSI]Stall
	var haveCUDA, haveSched, haveCg bool
	var havePSI [nPSI]bool
	r.overlapping(from, to, func(s *sample, ov time.Duration, w float64) {
		f.Samples++
		covered += ov
		if s.cuda {
			haveCUDA = true
			cuda.Launches += w * s.launches
			cuda.LaunchesEstimated = cuda.LaunchesEstimated || s.estimated
			for i := range s.copies {
				cuda.Copies += w * float64(s.copies[i])
			}
			cuda.H2DBytes += w * float64(s.copyBytes[dirH2D])
			cuda.D2HBytes += w * float64(s.copyBytes[dirD2H])
			cuda.D2DBytes += w * float64(s.copyBytes[dirD2D])
			cuda.OtherCopyBytes += w * float64(s.copyBytes[dirOther])
			cuda.Allocs += w * float64(s.allocs)
			cuda.AllocBytes += w * float64(s.allocBytes)
			cuda.FreeBytes += w * float64(s.freeBytes)
			cuda.Outstanding = s.outstanding
		}
		if s.sched {
			haveSched = true
			sched.RunqueueDelay += time.Duration(w * float64(s.rqNs))
			sched.RunqueueWaits += w * float64(s.rqWaits)
			sched.OffCPU += time.Duration(w * float64(s.offCPUNs))
			for i, c := range s.rqHist {
				rqHist[i] += w * float64(c)
			}
		}
		if s.cgroup {
			haveCg = true
			cg.Throttled += time.Duration(w * float64(s.throttled.throttledTime))
			cg.ThrottledPeriods += w * float64(s.throttled.throttled)
			cg.Periods += w * float64(s.throttled.periods)
		}
		for i := range psi {
			if s.psiOK[i] {
				havePSI[i] = true
				psi[i].Some += time.Duration(w * float64(s.psi[i].some))
				psi[i].Full += time.Duration(w * float64(s.psi[i].full))
			}
		}
	})
	if span := to.Sub(from); span > 0 {
		f.Coverage = float64(covered) / float64(span)
	}
	if haveCUDA {
		cuda.SyncWait, cuda.Syncs = syncs.within(from, to, now)
		f.CUDA = &cuda
	}
	if haveSched {
		sched.RunqueueP50 = percentile(rqHist[:], 0.5)
		sched.RunqueueP99 = percentile(rqHist[:], 0.99)
		f.Sched = &sched
	}
	if haveCg {
		f.Cgroup = &cg
	}
	if havePSI != [nPSI]bool{} {
		var p PressureFacts
		for i, dst := range []**Stall{&p.CPU, &p.Memory, &p.IO} {
			if havePSI[i] {
				s := psi[i]
				*dst = &s
			}
		}
		f.Pressure = &p
	}
	for _, k := range ooms {
		if !k.Time.Before(from) && !k.Time.After(to) {
			f.OOMKills = append(f.OOMKills, k)
		}
	}
	return f
}

// percentile estimates the q-quantile of a log2 nanosecond histogram,
// interpolating linearly inside the bucket it falls in.
func percentile(h []float64, q float64) time.Duration {
	var total float64
	for _, c := range h {
		total += c
	}
	if total <= 0 {
		return 0
	}
	rank := q * total
	var cum float64
	for i, c := range h {
		if c <= 0 {
			continue
		}
		if cum+c >= rank {
			lo := float64(uint64(1) << i)
			return time.Duration(lo + lo*(rank-cum)/c)
		}
		cum += c
	}
	return time.Duration(uint64(1) << (len(h) - 1))
}
