package bpf

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"
)

// bpfKernel holds the loaded cuda and sched objects and their global links.
// Either object may be missing; parts says which and why.
type bpfKernel struct {
	ncpu int

	cuda     *cudaMaps // nil: CUDA probes not loaded
	cudaVars *cudaVariables
	progs    cudaProgs
	multi    bool // progs are the uprobe_multi variants
	syncRd   *ringbuf.Reader

	sched      *schedObjects
	schedLinks []link.Link
	oomLink    link.Link
	oomRd      *ringbuf.Reader

	reasons []string
}

// errNoPrivilege wraps a load failure that means "not allowed".
type errNoPrivilege struct{ err error }

func (e errNoPrivilege) Error() string {
	// The syscall's own word; cilium/ebpf's wrapping suggests raising
	// RLIMIT_MEMLOCK, which is not the cause.
	var errno unix.Errno
	if errors.As(e.err, &errno) {
		return fmt.Sprintf("no privilege to load eBPF (needs root, or CAP_BPF with CAP_PERFMON): %v", errno)
	}
	return fmt.Sprintf("no privilege to load eBPF (needs root, or CAP_BPF with CAP_PERFMON): %v", e.err)
}

func (e errNoPrivilege) Unwrap() error { return e.err }

// noPrivilege tells "not allowed" (EPERM) from a program the verifier
// rejected, which fails with EACCES.
func noPrivilege(err error) bool {
	var ve *ebpf.VerifierError
	return errors.Is(err, unix.EPERM) && !errors.As(err, &ve)
}

// openKernel loads and attaches what it can. It returns an error only when
// nothing at all could be loaded; that error is the disabled reason. With
// pidErr (kernelPIDs: the upstream cannot be followed by PID) it leaves out
// the probes that only follow the upstream, CUDA and scheduler, which would
// otherwise cost a lookup on every context switch of the machine for
// nothing.
func openKernel(pidErr error) (kernel, error) {
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		return nil, fmt.Errorf("the kernel exposes no BTF (%w), which the CO-RE programs need", err)
	}
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, fmt.Errorf("count possible CPUs: %w", err)
	}
	// Kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK; later ones
	// ignore it. Raising it is best effort.
	_ = unix.Setrlimit(unix.RLIMIT_MEMLOCK, &unix.Rlimit{Cur: unix.RLIM_INFINITY, Max: unix.RLIM_INFINITY})
	// Before anything asks cilium/ebpf for tracefs: it remembers the answer.
	tracefsErr := ensureTracefs()

	k := &bpfKernel{ncpu: ncpu}
	var so schedObjects
	if err := loadSchedObjects(&so, nil); err != nil {
		if noPrivilege(err) {
			return nil, errNoPrivilege{err}
		}
		k.reasons = append(k.reasons, fmt.Sprintf("scheduler and OOM probes: load: %v", err))
	} else {
		k.sched = &so
		k.attachSched(tracefsErr, pidErr)
	}

	if pidErr != nil {
		k.reasons = append(k.reasons, fmt.Sprintf("CUDA probes: %v", pidErr))
	} else if err := k.loadCUDA(); err != nil {
		if noPrivilege(err) && k.sched == nil {
			return nil, errNoPrivilege{err}
		}
		k.reasons = append(k.reasons, fmt.Sprintf("CUDA probes: load: %v", err))
	} else if k.syncRd, err = ringbuf.NewReader(k.cuda.SyncEvents); err != nil {
		k.reasons = append(k.reasons, fmt.Sprintf("CUDA sync events: %v", err))
	}
	if k.cuda == nil && len(k.schedLinks) == 0 && k.oomLink == nil {
		k.close()
		return nil, errors.New(joinReasons(k.reasons))
	}
	return k, nil
}

// cudaProgs are the CUDA programs of one variant, single or multi.
type cudaProgs struct {
	launch, copy, syncEnter, syncExit, allocEnter, allocExit, free *ebpf.Program
}

func (p cudaProgs) of(kind progKind) (entry, exit *ebpf.Program) {
	switch kind {
	case progLaunch:
		return p.launch, nil
	case progCopy:
		return p.copy, nil
	case progSync:
		return p.syncEnter, p.syncExit
	case progAlloc:
		return p.allocEnter, p.allocExit
	default:
		return p.free, nil
	}
}

func (p cudaProgs) close() {
	for _, x := range []*ebpf.Program{p.launch, p.copy, p.syncEnter, p.syncExit, p.allocEnter, p.allocExit, p.free} {
		if x != nil {
			x.Close()
		}
	}
}

// The two variants of cuda.c's programs; LoadAndAssign loads only what a
// struct names.
type cudaSingle struct {
	cudaMaps
	cudaVariables
	Launch     *ebpf.Program `ebpf:"cuda_launch"`
	Copy       *ebpf.Program `ebpf:"cuda_copy"`
	SyncEnter  *ebpf.Program `ebpf:"cuda_sync_enter"`
	SyncExit   *ebpf.Program `ebpf:"cuda_sync_exit"`
	AllocEnter *ebpf.Program `ebpf:"cuda_alloc_enter"`
	AllocExit  *ebpf.Program `ebpf:"cuda_alloc_exit"`
	Free       *ebpf.Program `ebpf:"cuda_free"`
}

type cudaMulti struct {
	cudaMaps
	cudaVariables
	Launch     *ebpf.Program `ebpf:"cuda_launch_m"`
	Copy       *ebpf.Program `ebpf:"cuda_copy_m"`
	SyncEnter  *ebpf.Program `ebpf:"cuda_sync_enter_m"`
	SyncExit   *ebpf.Program `ebpf:"cuda_sync_exit_m"`
	AllocEnter *ebpf.Program `ebpf:"cuda_alloc_enter_m"`
	AllocExit  *ebpf.Program `ebpf:"cuda_alloc_exit_m"`
	Free       *ebpf.Program `ebpf:"cuda_free_m"`
}

// singleUprobes makes loadCUDA take the single-uprobe variant, so that
// tests cover it on kernels with uprobe_multi.
var singleUprobes = false

// loadCUDA loads the uprobe_multi variant where the kernel has it (6.6+),
// else the single-uprobe one.
func (k *bpfKernel) loadCUDA() error {
	spec, err := loadCuda()
	if err != nil {
		return err
	}
	if !singleUprobes && features.HaveBPFLinkUprobeMulti() == nil {
		var o cudaMulti
		if err := spec.LoadAndAssign(&o, nil); err != nil {
			return err
		}
		k.cuda, k.cudaVars, k.multi = &o.cudaMaps, &o.cudaVariables, true
		k.progs = cudaProgs{o.Launch, o.Copy, o.SyncEnter, o.SyncExit, o.AllocEnter, o.AllocExit, o.Free}
		return nil
	}
	var o cudaSingle
	if err := spec.LoadAndAssign(&o, nil); err != nil {
		return err
	}
	k.cuda, k.cudaVars = &o.cudaMaps, &o.cudaVariables
	k.progs = cudaProgs{o.Launch, o.Copy, o.SyncEnter, o.SyncExit, o.AllocEnter, o.AllocExit, o.Free}
	return nil
}

func (k *bpfKernel) attachSched(tracefsErr, pidErr error) {
	progs := []*ebpf.Program{k.sched.SchedWakeup, k.sched.SchedWakeupNew, k.sched.SchedSwitch}
	if pidErr != nil {
		k.reasons = append(k.reasons, fmt.Sprintf("scheduler probes: %v", pidErr))
		progs = nil
	}
	for _, p := range progs {
		l, err := link.AttachTracing(link.TracingOptions{Program: p})
		if err != nil {
			k.reasons = append(k.reasons, fmt.Sprintf("scheduler probes: attach %s: %v", p, err))
			for _, l := range k.schedLinks {
				l.Close()
			}
			k.schedLinks = nil
			break
		}
		k.schedLinks = append(k.schedLinks, l)
	}
	if tracefsErr != nil {
		k.reasons = append(k.reasons, fmt.Sprintf("OOM probe: %v", tracefsErr))
		return
	}
	l, err := link.Tracepoint("oom", "mark_victim", k.sched.OomMarkVictim, nil)
	if err != nil {
		k.reasons = append(k.reasons, fmt.Sprintf("OOM probe: attach oom:mark_victim: %v", err))
		return
	}
	rd, err := ringbuf.NewReader(k.sched.OomEvents)
	if err != nil {
		l.Close()
		k.reasons = append(k.reasons, fmt.Sprintf("OOM probe: ring buffer: %v", err))
		return
	}
	k.oomLink, k.oomRd = l, rd
}

func (k *bpfKernel) parts() (cuda, sched, oom bool, reasons []string) {
	return k.cuda != nil, len(k.schedLinks) > 0, k.oomLink != nil, k.reasons
}

// bpfBinary is an ELF file with its function symbols as file offsets.
type bpfBinary struct {
	k    *bpfKernel
	ex   *link.Executable
	syms map[string]uint64
}

func (k *bpfKernel) openBinary(path string) (elfFile, error) {
	if k.cuda == nil {
		return nil, errors.New("CUDA probes not loaded")
	}
	syms, err := funcOffsets(path)
	if err != nil {
		return nil, err
	}
	ex, err := link.OpenExecutable(path)
	if err != nil {
		return nil, err
	}
	return &bpfBinary{k: k, ex: ex, syms: syms}, nil
}

func (b *bpfBinary) has(sym string) bool { _, ok := b.syms[sym]; return ok }

func (b *bpfBinary) attach(ps []apiProbe, pid int) ([]io.Closer, error) {
	var out []io.Closer
	var errs []error
	if b.k.multi {
		// One link per program (and direction) for all the functions.
		for kind := progLaunch; kind <= progFree; kind++ {
			var addrs, cookies []uint64
			var names []string
			for _, p := range ps {
				if off, ok := b.syms[p.sym]; ok && p.prog == kind {
					addrs, cookies, names = append(addrs, off), append(cookies, p.cookie), append(names, p.sym)
				}
			}
			if len(addrs) == 0 {
				continue
			}
			opts := &link.UprobeMultiOptions{Addresses: addrs, Cookies: cookies, PID: uint32(pid)}
			entry, exit := b.k.progs.of(kind)
			l, err := b.ex.UprobeMulti(nil, entry, opts)
			if err != nil {
				errs = append(errs, fmt.Errorf("uprobes on %v: %w", names, err))
				continue
			}
			out = append(out, l)
			if exit != nil {
				r, err := b.ex.UretprobeMulti(nil, exit, opts)
				if err != nil {
					l.Close()
					out = out[:len(out)-1]
					errs = append(errs, fmt.Errorf("uretprobes on %v: %w", names, err))
					continue
				}
				out = append(out, r)
			}
		}
		return out, errors.Join(errs...)
	}
	for _, p := range ps {
		off, ok := b.syms[p.sym]
		if !ok {
			continue
		}
		entry, exit := b.k.progs.of(p.prog)
		opts := &link.UprobeOptions{Address: off, PID: pid, Cookie: p.cookie}
		l, err := b.ex.Uprobe(p.sym, entry, opts)
		if err != nil {
			errs = append(errs, fmt.Errorf("uprobe %s: %w", p.sym, err))
			continue
		}
		out = append(out, l)
		if exit != nil {
			r, err := b.ex.Uretprobe(p.sym, exit, opts)
			if err != nil {
				l.Close()
				out = out[:len(out)-1]
				errs = append(errs, fmt.Errorf("uretprobe %s: %w", p.sym, err))
				continue
			}
			out = append(out, r)
		}
	}
	return out, errors.Join(errs...)
}

func (k *bpfKernel) addTarget(pid int) error {
	key := uint32(pid)
	if k.cuda != nil {
		if err := k.cuda.CudaByPid.Update(key, make([]cudaCudaStats, k.ncpu), ebpf.UpdateAny); err != nil {
			return fmt.Errorf("add PID %d to cuda_by_pid: %w", pid, err)
		}
	}
	if k.sched != nil {
		if err := k.sched.SchedByPid.Update(key, make([]schedSchedStats, k.ncpu), ebpf.UpdateAny); err != nil {
			return fmt.Errorf("add PID %d to sched_by_pid: %w", pid, err)
		}
	}
	return nil
}

func (k *bpfKernel) removeTarget(pid int) {
	key := uint32(pid)
	if k.cuda != nil {
		_ = k.cuda.CudaByPid.Delete(key)
		_ = k.cuda.LibRanges.Delete(key)
		var ak cudaAllocKey
		var size uint64
		var stale []cudaAllocKey
		it := k.cuda.Allocs.Iterate()
		for it.Next(&ak, &size) {
			if ak.Tgid == key {
				stale = append(stale, ak)
			}
		}
		for _, s := range stale {
			_ = k.cuda.Allocs.Delete(s)
		}
		k.forgetFuncs(pid)
	}
	if k.sched != nil {
		_ = k.sched.SchedByPid.Delete(key)
	}
}

func (k *bpfKernel) setLibRanges(pid int, ranges [][2]uint64) error {
	if k.cuda == nil {
		return nil
	}
	var r cudaLibRanges
	for i, x := range ranges {
		if i == len(r.Lo) {
			break
		}
		r.Lo[i], r.Hi[i] = x[0], x[1]
	}
	if err := k.cuda.LibRanges.Update(uint32(pid), &r, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("set library ranges of PID %d: %w", pid, err)
	}
	return nil
}

func (k *bpfKernel) readCUDA(pid int) (cudaTotals, error) {
	var t cudaTotals
	if k.cuda == nil {
		return t, nil
	}
	var per []cudaCudaStats
	if err := k.cuda.CudaByPid.Lookup(uint32(pid), &per); err != nil {
		return t, fmt.Errorf("read CUDA counters of PID %d: %w", pid, err)
	}
	for _, v := range per {
		for i := range t.Launches {
			t.Launches[i] += v.Launches[i]
		}
		t.Nested += v.Nested
		for i := range t.Copies {
			t.Copies[i] += v.Copies[i]
			t.CopyBytes[i] += v.CopyBytes[i]
		}
		t.Syncs += v.Syncs
		t.SyncNs += v.SyncNs
		for i := range t.SyncHist {
			t.SyncHist[i] += v.SyncHist[i]
		}
		t.Allocs += v.Allocs
		t.AllocBytes += v.AllocBytes
		t.AllocFailed += v.AllocFailed
		t.Frees += v.Frees
		t.FreeBytes += v.FreeBytes
		t.FreesUntracked += v.FreesUntracked
	}
	return t, nil
}

func (k *bpfKernel) readSched(pid int) (schedTotals, error) {
	var t schedTotals
	if k.sched == nil {
		return t, nil
	}
	var per []schedSchedStats
	if err := k.sched.SchedByPid.Lookup(uint32(pid), &per); err != nil {
		return t, fmt.Errorf("read scheduler counters of PID %d: %w", pid, err)
	}
	for _, v := range per {
		t.RqWaits += v.RqWaits
		t.RqNs += v.RqNs
		for i := range t.RqHist {
			t.RqHist[i] += v.RqHist[i]
		}
		t.OffCPU += v.Offcpu
		t.OffCPUNs += v.OffcpuNs
	}
	return t, nil
}

func (k *bpfKernel) readHits() ([nHits]uint64, error) {
	var out [nHits]uint64
	read := func(m *ebpf.Map, first, n int) error {
		var per []uint64
		for i := 0; i < n; i++ {
			if err := m.Lookup(uint32(i), &per); err != nil {
				return fmt.Errorf("read hit counter %s: %w", hitNames[first+i], err)
			}
			for _, v := range per {
				out[first+i] += v
			}
		}
		return nil
	}
	if k.cuda != nil {
		if err := read(k.cuda.CudaHits, 0, nCUDAHits); err != nil {
			return out, err
		}
	}
	if k.sched != nil {
		if err := read(k.sched.SchedHits, nCUDAHits, nHits-nCUDAHits); err != nil {
			return out, err
		}
	}
	return out, nil
}

func (k *bpfKernel) setGate(open bool) error {
	if k.cuda == nil {
		return nil
	}
	var v uint32
	if open {
		v = 1
	}
	if err := k.cudaVars.LaunchGate.Set(v); err != nil {
		return fmt.Errorf("set the launch gate: %w", err)
	}
	return nil
}

func (k *bpfKernel) dropped() (syncEvents, allocTable uint64) {
	if k.cuda != nil {
		_ = k.cudaVars.RingbufFull.Get(&syncEvents)
		_ = k.cudaVars.AllocsFull.Get(&allocTable)
	}
	return syncEvents, allocTable
}

// drain hands every record waiting in rd to f, without blocking.
func drain(rd *ringbuf.Reader, f func([]byte)) error {
	if rd == nil {
		return nil
	}
	rd.SetDeadline(time.Now())
	var rec ringbuf.Record
	for {
		err := rd.ReadInto(&rec)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil
		}
		if err != nil {
			return err
		}
		f(rec.RawSample)
	}
}

func (k *bpfKernel) drainSync(f func(syncEvent)) error {
	return drain(k.syncRd, func(b []byte) {
		var e cudaSyncEvent
		if err := decode(b, &e); err == nil {
			f(syncEvent{Begin: e.Begin, End: e.End, TGID: e.Tgid, TID: e.Tid, Fn: e.Fn})
		}
	})
}

func (k *bpfKernel) drainOOM(f func(oomEvent)) error {
	return drain(k.oomRd, func(b []byte) {
		var e schedOomEvent
		if err := decode(b, &e); err == nil {
			comm := make([]byte, 0, len(e.Comm))
			for _, c := range e.Comm {
				if c == 0 {
					break
				}
				comm = append(comm, byte(c))
			}
			f(oomEvent{Ts: e.Ts, PID: e.Pid, UID: e.Uid, AnonRSSKB: e.AnonRssKb, TotalVMKB: e.TotalVmKb, Comm: string(comm)})
		}
	})
}

func (k *bpfKernel) launchedFuncs(f func(pid int, driver bool, fn, n uint64)) {
	if k.cuda == nil {
		return
	}
	var key cudaKernelKey
	var n uint64
	it := k.cuda.Kernels.Iterate()
	for it.Next(&key, &n) {
		f(int(key.Tgid), key.Api == 1, key.Func, n)
	}
}

func (k *bpfKernel) forgetFuncs(pid int) {
	if k.cuda == nil {
		return
	}
	var key cudaKernelKey
	var n uint64
	var stale []cudaKernelKey
	it := k.cuda.Kernels.Iterate()
	for it.Next(&key, &n) {
		if key.Tgid == uint32(pid) {
			stale = append(stale, key)
		}
	}
	for _, s := range stale {
		_ = k.cuda.Kernels.Delete(s)
	}
}

func (k *bpfKernel) close() error {
	var errs []error
	for _, l := range k.schedLinks {
		errs = append(errs, l.Close())
	}
	if k.oomLink != nil {
		errs = append(errs, k.oomLink.Close())
	}
	for _, rd := range []*ringbuf.Reader{k.syncRd, k.oomRd} {
		if rd != nil {
			errs = append(errs, rd.Close())
		}
	}
	if k.sched != nil {
		errs = append(errs, k.sched.Close())
	}
	if k.cuda != nil {
		k.progs.close()
		errs = append(errs, k.cuda.Close())
	}
	return errors.Join(errs...)
}

// decode reads a record written by a BPF program into a generated struct
// of the same layout.
func decode(b []byte, into any) error {
	return binary.Read(bytes.NewReader(b), binary.LittleEndian, into)
}

// funcOffsets reads the function symbols of an ELF file (dynamic and
// static) as file offsets, the address a uprobe takes.
func funcOffsets(path string) (map[string]uint64, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read ELF %s: %w", path, err)
	}
	defer f.Close()
	out := map[string]uint64{}
	for _, s := range funcSymbols(f) {
		if off, ok := vaddrToOffset(f, s.Value); ok {
			if _, dup := out[s.Name]; !dup {
				out[s.Name] = off
			}
		}
	}
	return out, nil
}

func vaddrToOffset(f *elf.File, v uint64) (uint64, bool) {
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && v >= p.Vaddr && v < p.Vaddr+p.Memsz {
			return v - p.Vaddr + p.Off, true
		}
	}
	return 0, false
}
