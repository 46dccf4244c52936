// Package bpf gives each inference call the kernel's view of the upstream
// during the call's window: how many CUDA kernels it launched, how many
// bytes it copied to and from the GPU, how long its threads waited in CUDA
// synchronisation calls, how much device memory it holds (the leak
// signal), how long its threads waited for a CPU and how long they were
// off it, whether its cgroup was CPU-throttled, how much the machine
// stalled on CPU, memory and I/O, and whether the OOM killer struck.
//
// Like gpu and tritonstats it stands beside the call pipeline: Probes
// follows the upstream's processes (Options.PIDs, resolved again every
// second, so a restarted upstream is followed), samples the in-kernel
// aggregates into a bounded ring, and when a call record (record.Call) is
// finished, Window or ForCall joins the call's time span to the samples it
// overlaps and returns Facts for the record's sinks. Counters are
// attributed proportionally to overlap: a sample of interval (a, b] that a
// window covers for a share w of its length contributes w times its
// counts. Synchronisation waits are exact: each wait's begin and end reach
// user space through a ring buffer and are clipped to the window.
// Concurrent calls share the same samples; nothing is divided among them.
//
// The BPF programs (C beside bpf2go's generated Go, built for x86-64 with
// CO-RE against the kernel's BTF) are:
//
//   - cuda.c: uprobes and uretprobes on libcudart and libcuda, found in
//     /proc/PID/maps under any soname version, deleted or loaded late, and
//     attached through /proc/PID/map_files. Kernel launches, copies with
//     their byte counts and direction, synchronisation waits, and
//     allocations and frees (device pointers matched in a hash) are
//     aggregated per process in the kernel. A call the CUDA libraries make
//     themselves (the runtime reaching the driver) counts once.
//   - sched.c: BTF tracepoints sched_wakeup, sched_wakeup_new and
//     sched_switch for run-queue delay (log2 histogram) and off-CPU time of
//     the upstream's threads, and the oom:mark_victim tracepoint.
//
// Overhead is bounded by design. A uprobe hit is dear (about 15–20 µs in a
// VM), so Probes keeps an overhead budget (Options.Budget, 3% of one core
// by default): it measures the per-hit costs at start (Calibrate), counts
// every program's hits in the kernel, and estimates its cost as Σ hit
// rate × per-hit cost. Copies, synchronisation, allocations, the scheduler
// and OOM probes are always on; the launch probes, which fire thousands of
// times a second, are attached for the fraction of each period (1 s) that
// the budget allows. Launches in the rest of the period are estimated from
// the rate of the attached part and marked as estimates.
//
// Without the privilege to load BPF (not root, no CAP_BPF and
// CAP_PERFMON), without BTF, or on another architecture, Start logs one
// line saying why and returns Probes whose Enabled is false; the cgroup and
// pressure facts, read from files, still work, and so does everything
// else in the sidecar.
//
// To rebuild the BPF objects (clang, llvm-strip and libbpf-dev needed;
// the generated files are committed, so building the package needs none
// of them):
//
//	go generate ./bpf
package bpf
