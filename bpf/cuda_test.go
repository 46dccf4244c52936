package bpf

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// noDuty is a budget no workload of the tests can exceed: the launch
// probes stay attached and every count is exact.
const noDuty = 1000.0

// The calls cudaprog's script makes (testdata/cudaprog.c), and what the
// probes must make of them.
const (
	scriptRuntimeLaunches = 110 // cudaLaunchKernel: 100 of kernel_a, 10 of kernel_b
	scriptDriverLaunches  = 50  // cuLaunchKernel, direct
	scriptCopies          = 11
	scriptH2D             = 3*1000 + 777
	scriptD2H             = 2*2048 + 2*333
	scriptD2D             = 4096 + 100
	scriptOtherCopy       = 512
	scriptSyncs           = 6
	scriptSyncNominal     = 27 * time.Millisecond // 5+5+3+7 through the runtime, 4+3 direct
	scriptAllocs          = 7                     // 5 cudaMalloc of 1 MiB, 2 cuMemAlloc_v2 of 4 KiB
	scriptAllocBytes      = 5<<20 + 2*4096
	scriptFreeBytes       = 2<<20 + 4096
	scriptFreesUntracked  = 1 // cudaFree of a pointer never allocated
	scriptAllocFailed     = 1 // cudaMalloc of 0 bytes
	// Every runtime call reaches the driver once: 110 launches, 7 copies,
	// 4 syncs, 6 allocations (one failing), 3 frees (one untracked).
	scriptNested = 110 + 7 + 4 + 6 + 3
)

// TestCUDAProbesExact runs the script against probes that attach late (the
// libraries are loaded, and deleted from disk, after the probes follow the
// process) and checks every figure exactly; durations within timer
// resolution.
func TestCUDAProbesExact(t *testing.T) {
	requireRoot(t)
	t.Run("multi", testCUDAProbesExact)
	t.Run("single", func(t *testing.T) {
		forceSingleUprobes(t)
		testCUDAProbesExact(t)
	})
}

func testCUDAProbesExact(t *testing.T) {
	libdir := libCopy(t)
	var up pidHolder
	set := metrics.NewSet()
	p := startProbes(t, Options{PIDs: up.get, Budget: noDuty, Set: set})

	pr := startProg(t, libdir, "script", "unlink")
	pr.Expect("started", 5*time.Second)
	pid := pr.PID()
	up.set(pid)
	waitFor(t, 3*time.Second, "the process followed, the launch probes always on", func() bool {
		_, ok := targetStatus(p, pid)
		return ok && p.Overhead().LaunchDuty == 1 && p.Overhead().HitRates != nil
	})
	if n := probedLibs(p, pid); n != 0 {
		t.Fatalf("%d libraries probed before the program loaded any", n)
	}

	pr.Send("load")
	pr.Expect("loaded", 5*time.Second)
	waitFor(t, 3*time.Second, "both libraries probed", func() bool { return probedLibs(p, pid) == 2 })
	st, _ := targetStatus(p, pid)
	for _, l := range st.Libraries {
		if !l.Deleted {
			t.Errorf("library %s not seen as deleted: %+v", l.Path, l)
		}
		t.Logf("probed %s (%s): %d functions", l.Path, l.Kind, l.Functions)
	}

	from := quiet(t, p)
	pr.Send("go")
	line := pr.Expect("done", 10*time.Second)
	to := time.Now()
	syncNs, err := strconv.ParseInt(strings.TrimPrefix(line, "done sync_ns="), 10, 64)
	if err != nil {
		t.Fatalf("bad line %q: %v", line, err)
	}
	f := settledWindow(t, p, from, to)
	c := f.CUDA
	if c == nil {
		t.Fatalf("no CUDA facts: %+v", f)
	}
	t.Logf("facts: %+v", *c)

	check := func(name string, got, want float64) {
		t.Helper()
		if got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	check("launches", c.Launches, scriptRuntimeLaunches+scriptDriverLaunches)
	if c.LaunchesEstimated {
		t.Error("launches marked estimated with the launch probes always on")
	}
	check("copies", c.Copies, scriptCopies)
	check("h2d bytes", c.H2DBytes, scriptH2D)
	check("d2h bytes", c.D2HBytes, scriptD2H)
	check("d2d bytes", c.D2DBytes, scriptD2D)
	check("other copy bytes", c.OtherCopyBytes, scriptOtherCopy)
	check("allocs", c.Allocs, scriptAllocs)
	check("alloc bytes", c.AllocBytes, scriptAllocBytes)
	check("free bytes", c.FreeBytes, scriptFreeBytes)
	check("outstanding", float64(c.Outstanding), scriptAllocBytes-scriptFreeBytes)
	if b, ok := p.CUDAOutstanding(); !ok || b != scriptAllocBytes-scriptFreeBytes {
		t.Errorf("CUDAOutstanding() = %d, %v; want %d, true", b, ok, scriptAllocBytes-scriptFreeBytes)
	}
	check("syncs", float64(c.Syncs), scriptSyncs)
	// Entry to return of each call: the probes' times nest inside the
	// program's (it reads the clock before the call, they after the entry
	// trap; they before the return, it after), on the same monotonic
	// clock, so they can only be shorter, by their trap time (tens of µs a
	// call here) and whatever a loaded machine preempts in between; the
	// nominal sleeps below bound them from under. A sync counted twice
	// (the runtime's and the driver's nested inside it) would exceed it.
	d := c.SyncWait - time.Duration(syncNs)
	t.Logf("sync wait %v, the program timed %v: %v", c.SyncWait, time.Duration(syncNs), d)
	if d > 0 {
		t.Errorf("sync wait %v, the program timed %v: the probes' time exceeds it by %v", c.SyncWait, time.Duration(syncNs), d)
	}
	if c.SyncWait < scriptSyncNominal {
		t.Errorf("sync wait %v is below the %v the calls slept", c.SyncWait, scriptSyncNominal)
	}

	tot, err := p.k.readCUDA(pid)
	if err != nil {
		t.Fatal(err)
	}
	check("runtime launches", float64(tot.Launches[0]), scriptRuntimeLaunches)
	check("driver launches", float64(tot.Launches[1]), scriptDriverLaunches)
	check("nested calls", float64(tot.Nested), scriptNested)
	check("untracked frees", float64(tot.FreesUntracked), scriptFreesUntracked)
	check("failed allocations", float64(tot.AllocFailed), scriptAllocFailed)
	check("sync count in the kernel", float64(tot.Syncs), scriptSyncs)

	names := map[string]uint64{}
	for _, k := range p.Kernels(10) {
		names[fmt.Sprintf("%s/%s", k.API, k.Name)] = k.Launches
		t.Logf("kernel %+v", k)
	}
	for k, want := range map[string]uint64{"runtime/kernel_a": 100, "runtime/kernel_b": 10, "driver/": 50} {
		if names[k] != want {
			t.Errorf("kernel %s launched %d times, want %d (all: %v)", k, names[k], want, names)
		}
	}

	var buf bytes.Buffer
	set.WritePrometheus(&buf)
	out := buf.String()
	for _, want := range []string{
		fmt.Sprintf(`inferwatch_cuda_launches_total{pid="%d",estimated="false"} %d`, pid, scriptRuntimeLaunches+scriptDriverLaunches),
		fmt.Sprintf(`inferwatch_cuda_launches_total{pid="%d",estimated="true"} 0`, pid),
		fmt.Sprintf(`inferwatch_cuda_alloc_outstanding_bytes{pid="%d"} %d`, pid, scriptAllocBytes-scriptFreeBytes),
		fmt.Sprintf(`inferwatch_cuda_memcpy_bytes_total{direction="h2d"} %d`, scriptH2D),
		fmt.Sprintf(`inferwatch_cuda_sync_seconds_count %d`, scriptSyncs),
		`inferwatch_bpf_enabled 1`,
		`inferwatch_bpf_duty_ratio{probe="launch"} 1`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if t.Failed() {
		t.Logf("metrics:\n%s", out)
	}
}

// TestFollowRestart: the upstream exits and a new process (new PID, the
// same library file) takes its place; the probes follow.
func TestFollowRestart(t *testing.T) {
	requireRoot(t)
	libdir := libCopy(t)
	var up pidHolder
	set := metrics.NewSet()
	p := startProbes(t, Options{PIDs: up.get, Budget: noDuty, Set: set})

	run := func(n int) int {
		t.Helper()
		pr := startProg(t, libdir, "launches", strconv.Itoa(n))
		pr.Expect("loaded", 5*time.Second)
		pid := pr.PID()
		up.set(pid)
		waitFor(t, 3*time.Second, fmt.Sprintf("PID %d probed", pid), func() bool {
			return probedLibs(p, pid) == 2 && p.Overhead().LaunchDuty == 1
		})
		from := quiet(t, p)
		pr.Send("go")
		pr.Expect("done", 5*time.Second)
		f := settledWindow(t, p, from, time.Now())
		if f.CUDA == nil || f.CUDA.Launches != float64(n) {
			t.Fatalf("PID %d: facts %+v, want %d launches", pid, f.CUDA, n)
		}
		pr.Stop()
		return pid
	}
	first := run(20)
	second := run(30)
	waitFor(t, 3*time.Second, "the first process dropped", func() bool {
		_, ok := targetStatus(p, first)
		return !ok
	})
	var buf bytes.Buffer
	set.WritePrometheus(&buf)
	if strings.Contains(buf.String(), fmt.Sprintf(`pid="%d"`, first)) {
		t.Errorf("series of the exited PID %d remain", first)
	}
	if !strings.Contains(buf.String(), fmt.Sprintf(`inferwatch_cuda_launches_total{pid="%d",estimated="false"} 30`, second)) {
		t.Errorf("no launches of the new PID %d in the metrics:\n%s", second, buf.String())
	}
}
