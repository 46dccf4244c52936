package bpf

import "io"

// nBuckets is the number of log2 nanosecond buckets of the in-kernel
// histograms (NBUCKETS in common.h): bucket i counts [2^i, 2^(i+1)) ns.
const nBuckets = 40

// cudaTotals is one process's cumulative CUDA counters, summed over CPUs
// (struct cuda_stats).
type cudaTotals struct {
	Launches       [2]uint64 // runtime, driver
	Nested         uint64
	Copies         [nDirs]uint64
	CopyBytes      [nDirs]uint64
	Syncs          uint64
	SyncNs         uint64
	SyncHist       [nBuckets]uint64
	Allocs         uint64
	AllocBytes     uint64
	AllocFailed    uint64
	Frees          uint64
	FreeBytes      uint64
	FreesUntracked uint64
}

func (c cudaTotals) launches() uint64 { return c.Launches[0] + c.Launches[1] }

// outstanding is the bytes allocated and not freed while probed.
func (c cudaTotals) outstanding() int64 { return int64(c.AllocBytes - c.FreeBytes) }

// sub returns c - p, field by field.
func (c cudaTotals) sub(p cudaTotals) cudaTotals {
	d := c
	for i := range d.Launches {
		d.Launches[i] -= p.Launches[i]
	}
	d.Nested -= p.Nested
	for i := range d.Copies {
		d.Copies[i] -= p.Copies[i]
		d.CopyBytes[i] -= p.CopyBytes[i]
	}
	d.Syncs -= p.Syncs
	d.SyncNs -= p.SyncNs
	for i := range d.SyncHist {
		d.SyncHist[i] -= p.SyncHist[i]
	}
	d.Allocs -= p.Allocs
	d.AllocBytes -= p.AllocBytes
	d.AllocFailed -= p.AllocFailed
	d.Frees -= p.Frees
	d.FreeBytes -= p.FreeBytes
	d.FreesUntracked -= p.FreesUntracked
	return d
}

// schedTotals is one process's cumulative scheduler counters (struct
// sched_stats).
type schedTotals struct {
	RqWaits  uint64
	RqNs     uint64
	RqHist   [nBuckets]uint64
	OffCPU   uint64
	OffCPUNs uint64
}

func (s schedTotals) sub(p schedTotals) schedTotals {
	d := s
	d.RqWaits -= p.RqWaits
	d.RqNs -= p.RqNs
	for i := range d.RqHist {
		d.RqHist[i] -= p.RqHist[i]
	}
	d.OffCPU -= p.OffCPU
	d.OffCPUNs -= p.OffCPUNs
	return d
}

// syncEvent is struct sync_event: the entry (End == 0) or the return of a
// synchronisation call. Times are CLOCK_MONOTONIC nanoseconds.
type syncEvent struct {
	Begin, End uint64
	TGID, TID  uint32
	Fn         uint32
}

// oomEvent is struct oom_event.
type oomEvent struct {
	Ts        uint64
	PID, UID  uint32
	AnonRSSKB uint64
	TotalVMKB uint64
	Comm      string
}

// kernel is the loaded BPF side. bpfKernel (kernel_amd64.go) is the only
// implementation; the interface keeps the rest of the package free of
// generated, architecture-specific types.
type kernel interface {
	// parts reports which parts are loaded and attached, and why the
	// others are not.
	parts() (cuda, sched, oom bool, reasons []string)

	openBinary(path string) (elfFile, error)
	addTarget(pid int) error
	removeTarget(pid int)
	setLibRanges(pid int, ranges [][2]uint64) error
	readCUDA(pid int) (cudaTotals, error)
	readSched(pid int) (schedTotals, error)
	readHits() ([nHits]uint64, error)
	setGate(open bool) error
	dropped() (syncEvents, allocTable uint64)
	drainSync(func(syncEvent)) error
	drainOOM(func(oomEvent)) error
	launchedFuncs(func(pid int, driver bool, fn, n uint64))
	forgetFuncs(pid int)
	close() error
}

// elfFile is an executable or library uprobes attach to.
type elfFile interface {
	has(sym string) bool
	// attach probes the functions for the process pid: their entry, and
	// their return for the kinds that time a call or read a result.
	// Functions the file lacks are skipped; the links that could be made
	// come back with the errors of those that could not.
	attach(ps []apiProbe, pid int) ([]io.Closer, error)
}
