package bpf

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// Implemented in calib_amd64.s.
func calibNop()
func calibNopAddr() uintptr
func calibLoop(n int)

var _ = calibNop // called from calibLoop only

// Calibrate measures what one hit of each kind of hook costs on this
// machine: a no-op function of this process timed plain, with a uprobe,
// and with a uprobe and a uretprobe, and prctl(PR_SET_NAME) timed with and
// without a program on the task:task_rename tracepoint. Each is the median
// of five runs of the calling thread's CPU time, so that other load on
// the machine does not count. It needs the privilege to load BPF and takes
// about a fifth of a second.
func Calibrate() (Costs, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	spec, err := loadCalib()
	if err != nil {
		return Costs{}, fmt.Errorf("calibrate: %w", err)
	}
	tid := unix.Gettid()
	if err := spec.Variables["calib_tid"].Set(uint32(tid)); err != nil {
		return Costs{}, fmt.Errorf("calibrate: %w", err)
	}
	// The uprobe_multi variant where the kernel has it, as the CUDA probes
	// do: a perf uprobe takes CAP_SYS_ADMIN, which a sidecar in a
	// container does not have.
	multi := !singleUprobes && features.HaveBPFLinkUprobeMulti() == nil
	var objs calibSet
	if multi {
		var m calibMultiSet
		err = spec.LoadAndAssign(&m, nil)
		objs = calibSet(m)
	} else {
		err = spec.LoadAndAssign(&objs, nil)
	}
	if err != nil {
		if noPrivilege(err) {
			return Costs{}, errNoPrivilege{err}
		}
		return Costs{}, fmt.Errorf("calibrate: load: %w", err)
	}
	// Detaching waits for grace periods (a tenth of a second a uprobe
	// here); nothing needs to wait for that.
	var links []io.Closer
	defer func() {
		go func() {
			for _, l := range links {
				l.Close()
			}
			objs.Close()
		}()
	}()

	off, err := selfOffset(uint64(calibNopAddr()))
	if err != nil {
		return Costs{}, fmt.Errorf("calibrate: %w", err)
	}
	ex, err := link.OpenExecutable("/proc/self/exe")
	if err != nil {
		return Costs{}, fmt.Errorf("calibrate: %w", err)
	}
	const nPlain, nProbed = 200000, 500
	plain := perCall(calibLoop, nPlain)
	opts := &link.UprobeOptions{Address: off, PID: os.Getpid()}
	mopts := &link.UprobeMultiOptions{Addresses: []uint64{off}, PID: uint32(os.Getpid())}
	var up, ret link.Link
	if multi {
		up, err = ex.UprobeMulti(nil, objs.Uprobe, mopts)
	} else {
		up, err = ex.Uprobe("calibNop", objs.Uprobe, opts)
	}
	if err != nil {
		return Costs{}, fmt.Errorf("calibrate: uprobe on this process: %w", err)
	}
	links = append(links, up)
	withUp := perCall(calibLoop, nProbed)
	if multi {
		ret, err = ex.UretprobeMulti(nil, objs.Uretprobe, mopts)
	} else {
		ret, err = ex.Uretprobe("calibNop", objs.Uretprobe, opts)
	}
	if err != nil {
		return Costs{}, fmt.Errorf("calibrate: uretprobe on this process: %w", err)
	}
	links = append(links, ret)
	withBoth := perCall(calibLoop, nProbed)

	comm, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/comm", tid))
	if err != nil {
		return Costs{}, fmt.Errorf("calibrate: %w", err)
	}
	name, err := unix.BytePtrFromString(strings.TrimSuffix(string(comm), "\n"))
	if err != nil {
		return Costs{}, fmt.Errorf("calibrate: %w", err)
	}
	rename := func(n int) {
		for range n {
			// The same name again: the tracepoint fires all the same.
			_ = unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(name)), 0, 0, 0)
		}
	}
	const nRename = 20000
	tpPlain := perCall(rename, nRename)
	tl, err := link.AttachTracing(link.TracingOptions{Program: objs.Tracepoint})
	if err != nil {
		return Costs{}, fmt.Errorf("calibrate: attach task:task_rename: %w", err)
	}
	links = append(links, tl)
	tpWith := perCall(rename, nRename)

	var hits []uint64
	for i, want := range []int{2 * calibRuns * nProbed, calibRuns * nProbed, calibRuns * nRename} {
		var sum uint64
		if err := objs.CalibHits.Lookup(uint32(i), &hits); err != nil {
			return Costs{}, fmt.Errorf("calibrate: read hits: %w", err)
		}
		for _, h := range hits {
			sum += h
		}
		if sum < uint64(want) {
			return Costs{}, fmt.Errorf("calibrate: probe %d fired %d times, want %d: the timings are not of probed calls", i, sum, want)
		}
	}
	return Costs{
		Uprobe:     atLeast(withUp - plain),
		Uretprobe:  atLeast(withBoth - withUp),
		Tracepoint: atLeast(tpWith - tpPlain),
		Plain:      plain,
		Calibrated: true,
	}, nil
}

// calibSet is the calibration's objects with the single-uprobe programs;
// calibMultiSet, the same with the uprobe_multi ones (convertible: tags
// aside, the structs are one).
type calibSet struct {
	Uprobe     *ebpf.Program `ebpf:"calib_uprobe"`
	Uretprobe  *ebpf.Program `ebpf:"calib_uretprobe"`
	Tracepoint *ebpf.Program `ebpf:"calib_tracepoint"`
	calibMaps
}

type calibMultiSet struct {
	Uprobe     *ebpf.Program `ebpf:"calib_uprobe_m"`
	Uretprobe  *ebpf.Program `ebpf:"calib_uretprobe_m"`
	Tracepoint *ebpf.Program `ebpf:"calib_tracepoint"`
	calibMaps
}

func (o *calibSet) Close() error {
	for _, p := range []*ebpf.Program{o.Uprobe, o.Uretprobe, o.Tracepoint} {
		if p != nil {
			p.Close()
		}
	}
	return o.calibMaps.Close()
}

// atLeast keeps a cost that noise pushed to zero or below from vanishing
// from the estimate.
func atLeast(d time.Duration) time.Duration { return max(d, 10*time.Nanosecond) }

// calibRuns is how many times each timing is taken.
const calibRuns = 5

// perCall runs f(n) calibRuns times on this (locked) thread and returns
// the median thread CPU time per call: the median, not the least, because
// the probed process pays the usual cost, not the luckiest.
func perCall(f func(n int), n int) time.Duration {
	var ds []time.Duration
	for range calibRuns {
		t0 := threadCPU()
		f(n)
		ds = append(ds, threadCPU()-t0)
	}
	slices.Sort(ds)
	return ds[len(ds)/2] / time.Duration(n)
}

// selfOffset turns an address in this process's executable into the file
// offset a uprobe on /proc/self/exe takes.
func selfOffset(addr uint64) (uint64, error) {
	maps, err := readMaps(os.Getpid())
	if err != nil {
		return 0, err
	}
	m, off, ok := fileOffset(maps, addr)
	if !ok {
		return 0, fmt.Errorf("address %#x is not in a mapped file", addr)
	}
	var exe unix.Stat_t
	if err := unix.Stat("/proc/self/exe", &exe); err != nil {
		return 0, fmt.Errorf("stat /proc/self/exe: %w", err)
	}
	if m.inode != exe.Ino {
		return 0, fmt.Errorf("address %#x is in %s, not in the executable", addr, m.path)
	}
	return off, nil
}
