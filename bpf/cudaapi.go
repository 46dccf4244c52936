package bpf

// progKind names the BPF program (cuda.c) a CUDA API function is probed
// with.
type progKind int

const (
	progLaunch progKind = iota // cuda_launch, uprobe
	progCopy                   // cuda_copy, uprobe
	progSync                   // cuda_sync_enter + cuda_sync_exit (uretprobe)
	progAlloc                  // cuda_alloc_enter + cuda_alloc_exit (uretprobe)
	progFree                   // cuda_free, uprobe
)

// Cookies of cuda.c's programs; keep in step with the defines there.
const (
	launchDriver   = 1 // LAUNCH_DRIVER
	launchFuncArg2 = 2 // LAUNCH_FUNC_ARG2
	copyKindArg    = 8 // COPY_KIND_ARG
)

// Copy directions, the index of cuda_stats.copies (DIR_* in cuda.c).
const (
	dirH2D = iota
	dirD2H
	dirD2D
	dirOther
	nDirs
)

var dirNames = [nDirs]string{"h2d", "d2h", "d2d", "other"}

// apiProbe is one probed API function.
type apiProbe struct {
	sym    string
	prog   progKind
	cookie uint64
}

// syncFuncs are the synchronisation calls; a sync probe's cookie is the
// index here, and sync events carry it back.
var syncFuncs = []string{
	"cudaStreamSynchronize",
	"cudaStreamSynchronize_ptsz",
	"cudaDeviceSynchronize",
	"cudaEventSynchronize",
	"cuCtxSynchronize",
	"cuStreamSynchronize",
	"cuStreamSynchronize_ptsz",
	"cuEventSynchronize",
}

func syncProbe(name string) apiProbe {
	for i, n := range syncFuncs {
		if n == name {
			return apiProbe{name, progSync, uint64(i)}
		}
	}
	panic("bpf: unknown sync function " + name)
}

// apiProbes lists what is probed in each library. Functions a library does
// not export are skipped. The _ptsz/_ptds variants are the per-thread
// default stream entry points (nvcc --default-stream per-thread).
var apiProbes = map[libKind][]apiProbe{
	libRuntime: {
		{"cudaLaunchKernel", progLaunch, 0},
		{"cudaLaunchKernel_ptsz", progLaunch, 0},
		{"cudaLaunchKernelExC", progLaunch, launchFuncArg2},
		{"cudaLaunchKernelExC_ptsz", progLaunch, launchFuncArg2},
		{"cudaMemcpy", progCopy, copyKindArg},
		{"cudaMemcpy_ptds", progCopy, copyKindArg},
		{"cudaMemcpyAsync", progCopy, copyKindArg},
		{"cudaMemcpyAsync_ptsz", progCopy, copyKindArg},
		syncProbe("cudaStreamSynchronize"),
		syncProbe("cudaStreamSynchronize_ptsz"),
		syncProbe("cudaDeviceSynchronize"),
		syncProbe("cudaEventSynchronize"),
		{"cudaMalloc", progAlloc, 0},
		{"cudaMallocAsync", progAlloc, 0},
		{"cudaMallocManaged", progAlloc, 0},
		{"cudaFree", progFree, 0},
		{"cudaFreeAsync", progFree, 0},
	},
	libDriver: {
		{"cuLaunchKernel", progLaunch, launchDriver},
		{"cuLaunchKernel_ptsz", progLaunch, launchDriver},
		{"cuLaunchKernelEx", progLaunch, launchDriver | launchFuncArg2},
		{"cuLaunchKernelEx_ptsz", progLaunch, launchDriver | launchFuncArg2},
		{"cuMemcpyHtoD_v2", progCopy, dirH2D},
		{"cuMemcpyHtoDAsync_v2", progCopy, dirH2D},
		{"cuMemcpyDtoH_v2", progCopy, dirD2H},
		{"cuMemcpyDtoHAsync_v2", progCopy, dirD2H},
		{"cuMemcpyDtoD_v2", progCopy, dirD2D},
		{"cuMemcpyDtoDAsync_v2", progCopy, dirD2D},
		{"cuMemcpy", progCopy, dirOther},
		{"cuMemcpyAsync", progCopy, dirOther},
		syncProbe("cuCtxSynchronize"),
		syncProbe("cuStreamSynchronize"),
		syncProbe("cuStreamSynchronize_ptsz"),
		syncProbe("cuEventSynchronize"),
		{"cuMemAlloc_v2", progAlloc, 0},
		{"cuMemAllocAsync", progAlloc, 0},
		{"cuMemAllocManaged", progAlloc, 0},
		{"cuMemFree_v2", progFree, 0},
		{"cuMemFreeAsync", progFree, 0},
	},
}

// Hit counters: cuda_hits (H_* in cuda.c) then sched_hits (sched.c), one
// index space. Their costs per hit come from Costs.
const (
	hitLaunch = iota
	hitCopy
	hitSyncEnter
	hitSyncExit
	hitAllocEnter
	hitAllocExit
	hitFree
	hitWakeup
	hitSwitch
	hitOOM
	nHits

	nCUDAHits = hitWakeup // the first sched_hits index
)

var hitNames = [nHits]string{"launch", "copy", "sync_enter", "sync_exit", "alloc_enter", "alloc_exit", "free", "sched_wakeup", "sched_switch", "oom"}

// hit is what one hit of counter i costs, by the kind of hook.
func (c Costs) hit(i int) float64 {
	switch {
	case i >= nCUDAHits: // sched.c's counters are all tracepoints
		return c.Tracepoint.Seconds()
	case i == hitSyncExit || i == hitAllocExit:
		return c.Uretprobe.Seconds()
	default:
		return c.Uprobe.Seconds()
	}
}
