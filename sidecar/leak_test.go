package sidecar

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/alerting"
	"github.com/inferwatch/inferwatch/baseline"
	"github.com/inferwatch/inferwatch/cgroup"
	"github.com/inferwatch/inferwatch/config"
	"github.com/inferwatch/inferwatch/gpu"
	"github.com/inferwatch/inferwatch/gpu/pids"
	"golang.org/x/sys/unix"
)

// TestMain lets the test binary double as an upstream that listens on a
// loopback port and grows its memory (SIDECAR_LEAK_HELPER=MiB per 100 ms;
// 0: allocate once, then hold). SIDECAR_LEAK_PORT makes it a further
// worker on that port (SO_REUSEPORT, as pre-forked servers listen).
func TestMain(m *testing.M) {
	if v, ok := os.LookupEnv("SIDECAR_LEAK_HELPER"); ok {
		step, _ := strconv.Atoi(v)
		port, _ := strconv.Atoi(os.Getenv("SIDECAR_LEAK_PORT"))
		leakUpstream(step, port)
		return
	}
	os.Exit(m.Run())
}

var held [][]byte

func leakUpstream(stepMiB, port int) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
		}); err != nil {
			return err
		}
		return serr
	}}
	l, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		fmt.Println("listen:", err)
		os.Exit(1)
	}
	defer l.Close() // held open: an unreachable listener is closed by the GC
	touch := func(n int) {
		b := make([]byte, n<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		held = append(held, b)
	}
	touch(16)
	fmt.Println(l.Addr().(*net.TCPAddr).Port)
	for range 600 { // at most a minute: the test kills it sooner
		time.Sleep(100 * time.Millisecond)
		if stepMiB > 0 {
			touch(stepMiB)
		}
	}
}

// startLeakUpstream runs the helper and returns its loopback address.
func startLeakUpstream(t *testing.T, stepMiB int) (string, *exec.Cmd) {
	t.Helper()
	return startLeakWorker(t, stepMiB, 0)
}

// startLeakWorker runs the helper listening on port (0: a free one).
func startLeakWorker(t *testing.T, stepMiB, port int) (string, *exec.Cmd) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SIDECAR_LEAK_HELPER="+strconv.Itoa(stepMiB), "SIDECAR_LEAK_PORT="+strconv.Itoa(port))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("helper's port: %v", err)
	}
	return "127.0.0.1:" + strings.TrimSpace(line), cmd
}

// A running sidecar samples the upstream it finds by port and raises
// MemoryLeakSuspected, with a projected exhaustion time, when the
// upstream's memory grows; not when it holds steady.
func TestMemoryLeakSuspectedThroughASidecar(t *testing.T) {
	for _, tc := range []struct {
		name    string
		stepMiB int
		limit   config.Bytes // host.upstream_memory_limit
		want    bool
	}{
		{"grows 2 MiB per 100ms", 2, 0, true},
		{"grows, limit configured", 2, 3 << 30, true},
		{"steady", 0, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			upstream, proc := startLeakUpstream(t, tc.stepMiB)
			cfg := config.Default()
			cfg.AdminListen = "127.0.0.1:0"
			no := false
			cfg.Routes = []config.Route{{Name: "http", Protocol: "http", Listen: "127.0.0.1:0", Upstream: upstream,
				Readiness: "none", TritonStats: config.TritonStats{Enabled: &no}}}
			cfg.Host.GPUDisabled, cfg.Host.BPFDisabled = true, true
			cfg.Host.UpstreamMemoryLimit = tc.limit
			cfg.Tracing.Disabled = true
			cfg.Alerting.Baseline.Disabled = true
			cfg.Alerting.MemoryLeak = config.MemoryLeak{Interval: config.Duration(100 * time.Millisecond), MinSpan: config.Duration(time.Second)}
			sc := runSidecar(t, cfg)
			// The steady case is judged after as many samples as the
			// growing one needs at most (30 s is only a bound on failure).
			// The helper's own growth, read by the test, is what the
			// alert's slope is held to: the race detector's shadow memory
			// makes it grow faster than the bytes it writes.
			t0 := time.Now()
			r0, err := baseline.ReadRSS(proc.Process.Pid)
			if err != nil {
				t.Fatal(err)
			}
			var got *alerting.Alert
			deadline := time.Now().Add(30 * time.Second)
			samples := 0
			for time.Now().Before(deadline) && got == nil && (tc.want || samples < 50) {
				time.Sleep(100 * time.Millisecond)
				if rssGauge(t, sc) > 0 {
					samples++
				}
				for _, a := range sc.Engine().Alerts() {
					if a.Labels["alertname"] == alerting.RuleMemoryLeakSuspected && a.State == alerting.StateFiring {
						got = &a
					}
				}
			}
			if (got != nil) != tc.want {
				t.Fatalf("MemoryLeakSuspected firing: %v, want %v (%d samples seen; alert %+v)", got != nil, tc.want, samples, got)
			}
			if got == nil {
				return
			}
			t.Logf("%s", got.Annotations["summary"])
			if got.Labels["upstream"] != upstream {
				t.Errorf("upstream label %q, want %q", got.Labels["upstream"], upstream)
			}
			at, err := time.Parse(time.RFC3339, got.Annotations["projected_exhaustion"])
			if err != nil {
				t.Fatalf("projected_exhaustion: %v (%v)", err, got.Annotations)
			}
			if !at.After(got.StartsAt.Add(-time.Second)) {
				t.Errorf("projected exhaustion %v before the alert %v", at, got.StartsAt)
			}
			// The projection agrees with the figures it is made of: the
			// memory left at the slope reported.
			ttl, err := time.ParseDuration(got.Annotations["time_to_exhaustion"])
			if err != nil {
				t.Fatal(err)
			}
			num := func(k string) float64 {
				v, err := strconv.ParseFloat(got.Annotations[k], 64)
				if err != nil {
					t.Fatalf("%s: %v", k, err)
				}
				return v
			}
			rss, limit, slope := num("rss_bytes"), num("limit_bytes"), num("slope_bytes_per_second")
			wantLimit := float64(tc.limit)
			if wantLimit == 0 { // the upstream's cgroup limit on this machine, else its memory
				if wantLimit, err = baseline.MemTotal(); err != nil {
					t.Fatal(err)
				}
				mounts, err := cgroup.SelfMounts()
				if err != nil {
					t.Fatal(err)
				}
				if n, _, err := cgroup.ProcessMemoryLimit(upstreamPID(t, upstream), mounts); err == nil && n > 0 {
					wantLimit = float64(n)
				}
			}
			if limit != wantLimit {
				t.Errorf("limit %v, want %v", limit, wantLimit)
			}
			r1, err := baseline.ReadRSS(proc.Process.Pid)
			if err != nil {
				t.Fatal(err)
			}
			seen := (r1 - r0) / time.Since(t0).Seconds()
			if seen < 1<<20 {
				t.Fatalf("the helper grew %.0f B/s, not a leak", seen)
			}
			t.Logf("slope %.1f MiB/s; the helper grew %.1f MiB/s", slope/(1<<20), seen/(1<<20))
			if slope < seen/2 || slope > seen*2 {
				t.Errorf("slope %.0f B/s, want within 2× of the %.0f B/s the helper grew", slope, seen)
			}
			want := time.Duration((limit - rss) / slope * float64(time.Second))
			if d := ttl - want; d < -2*time.Second || d > 2*time.Second {
				t.Errorf("time to exhaustion %v, want (limit−rss)/slope = %v", ttl, want)
			}
			// The leaking process goes away (a restart): the episode resolves.
			proc.Process.Kill()
			proc.Wait()
			resolved := false
			for end := time.Now().Add(30 * time.Second); time.Now().Before(end) && !resolved; {
				time.Sleep(100 * time.Millisecond)
				for _, a := range sc.Engine().Alerts() {
					if a.Labels["alertname"] == alerting.RuleMemoryLeakSuspected && a.State == alerting.StateResolved {
						resolved = true
					}
				}
			}
			if !resolved {
				t.Error("MemoryLeakSuspected not resolved after the upstream process went away")
			}
		})
	}
}

func upstreamPID(t *testing.T, addr string) int {
	_, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	ps, err := pids.Spec{Port: p}.Resolve()
	if err != nil || len(ps) != 1 {
		t.Fatalf("upstream pid: %v %v", ps, err)
	}
	return ps[0]
}

// rssGauge reads inferwatch_upstream_rss_bytes from the sidecar's metrics.
func rssGauge(t *testing.T, sc *Sidecar) float64 {
	var b strings.Builder
	sc.Metrics().Metrics().WritePrometheus(&b)
	for _, line := range strings.Split(b.String(), "\n") {
		if v, ok := strings.CutPrefix(line, "inferwatch_upstream_rss_bytes "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	return 0
}

// BenchmarkLeakTick is the watcher's cost per interval (10 s by default),
// on its own goroutine: one /proc/PID/status read of this process and one
// trend estimate over a full 6 h ring (2160 samples, thinned to 300).
// The "sample" case is the /proc read alone (before MinSpan is held).
func BenchmarkLeakTick(b *testing.B) {
	for _, tc := range []struct {
		name     string
		estimate bool
	}{{"sample", false}, {"sample+estimate", true}} {
		b.Run(tc.name, func(b *testing.B) {
			o := leakDefaults(config.MemoryLeak{MinSpan: config.Duration(time.Nanosecond), Span: config.Duration(6 * time.Hour)}, 10*time.Second)
			lw := newLeakWatch(o, pids.Spec{PIDs: []int{os.Getpid()}}, 0)
			t0 := time.Now()
			for i := range lw.host.w.Max {
				lw.sample(t0.Add(time.Duration(i) * 10 * time.Second))
			}
			now := t0.Add(time.Duration(lw.host.w.Max) * 10 * time.Second)
			b.ResetTimer()
			for range b.N {
				now = now.Add(10 * time.Second)
				if tc.estimate {
					lw.tick(now)
				} else {
					lw.sample(now)
				}
			}
		})
	}
}

// TestDeviceLeak: the outstanding CUDA allocations of the upstream (from
// the eBPF probes, bpf.TestCUDAProbesExact checks that level against a
// real process) are judged as a second level beside RSS. The level here
// is a function of the tick, as the probes would report it; the GPU's
// free memory, which needs NVML and a GPU, likewise.
func TestDeviceLeak(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name      string
		level     func(i int) float64 // bytes outstanding at tick i
		free      float64             // GPU memory free; 0: not known
		want      bool
		projected bool
		minRise   float64 // device_min_rise_mib; 0: the default
	}{
		// 4 MiB a tick (a second here) with 2 GiB free: 512 s to fill it.
		{"leak, free memory known", func(i int) float64 { return 100*mib + float64(i)*4*mib }, 2048 * mib, true, true, 0},
		{"leak, free memory unknown", func(i int) float64 { return float64(i) * 4 * mib }, 0, true, false, 0},
		// The same rate with 1 PiB free is not exhaustion within the horizon.
		{"leak out of the horizon's reach", func(i int) float64 { return float64(i) * 4 * mib }, 1 << 50, false, false, 0},
		// 32 MiB over the samples: under the default floor (64 MiB), over
		// a floor set to 16.
		{"rise under the floor", func(i int) float64 { return float64(i) * mib / 2 }, 0, false, false, 0},
		{"rise over a lowered floor", func(i int) float64 { return float64(i) * mib / 2 }, 0, true, false, 16},
		// 256 MiB over the samples, under a floor raised to 512.
		{"leak under a raised floor", func(i int) float64 { return float64(i) * 4 * mib }, 0, false, false, 512},
		{"steady with noise", func(i int) float64 { return 900*mib + float64((i*7919)%13)*mib }, 2048 * mib, false, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := leakDefaults(config.MemoryLeak{Interval: config.Duration(time.Second), MinSpan: config.Duration(time.Minute), DeviceMinRiseMiB: tc.minRise}, 10*time.Second)
			lw := newLeakWatch(o, pids.Spec{PIDs: []int{os.Getpid()}}, 0)
			i := 0
			lw.device = func() (float64, bool) { return tc.level(i), true }
			if tc.free > 0 {
				lw.deviceFree = func() (float64, bool) { return tc.free, true }
			}
			t0 := time.Now()
			var fired *leakChange
			for ; i < 64 && fired == nil; i++ {
				for _, c := range lw.tick(t0.Add(time.Duration(i) * time.Second)) {
					if c.device && c.firing {
						fired = &c
					}
				}
			}
			if (fired != nil) != tc.want {
				t.Fatalf("device leak fired %v after %d ticks, want %v (%+v)", fired != nil, i, tc.want, fired)
			}
			if fired == nil {
				return
			}
			t.Logf("tick %d: %s", i-1, fired.ann["summary"])
			if i-1 < 60 {
				t.Errorf("fired at tick %d, before MinSpan (60 ticks) of samples", i-1)
			}
			rate := tc.level(1) - tc.level(0) // bytes a tick, a tick a second
			slope, err := strconv.ParseFloat(fired.ann["slope_bytes_per_second"], 64)
			if err != nil || slope != rate {
				t.Errorf("slope %q, want %v B/s (%v)", fired.ann["slope_bytes_per_second"], rate, err)
			}
			ttl, err := time.ParseDuration(fired.ann["time_to_exhaustion"])
			if tc.projected {
				// Free memory is taken as it is now; the allocations fill it
				// at the slope.
				if want := time.Duration(tc.free / rate * float64(time.Second)); err != nil || ttl < want-2*time.Second || ttl > want+2*time.Second {
					t.Errorf("time to exhaustion %q, want %v (%v)", fired.ann["time_to_exhaustion"], want, err)
				}
			} else if fired.ann["time_to_exhaustion"] != "" {
				t.Errorf("a projection without free memory known: %v", fired.ann)
			}

			// The allocations are freed and stay flat: the episode ends
			// after three calm estimates.
			flat := tc.level(i)
			lw.device = func() (float64, bool) { return flat, true }
			resolved := false
			for j := 0; j < 200 && !resolved; j++ {
				for _, c := range lw.tick(t0.Add(time.Duration(i+j) * time.Second)) {
					if c.device && !c.firing {
						resolved = true
					}
				}
			}
			if !resolved {
				t.Error("device leak not resolved once the level held flat")
			}
		})
	}
}

func TestUpstreamGPUFree(t *testing.T) {
	u := func(v uint64) *uint64 { return &v }
	up := []gpu.Process{{PID: 1, Upstream: true}}
	other := []gpu.Process{{PID: 2}}
	for _, tc := range []struct {
		name    string
		samples []gpu.Sample
		free    float64
		ok      bool
	}{
		{"no devices", nil, 0, false},
		{"the upstream's device only", []gpu.Sample{
			{MemoryTotal: u(80 << 30), MemoryUsed: u(30 << 30), Processes: up},
			{MemoryTotal: u(80 << 30), MemoryUsed: u(10 << 30), Processes: other},
		}, 50 << 30, true},
		{"two of the upstream's", []gpu.Sample{
			{MemoryTotal: u(80 << 30), MemoryUsed: u(30 << 30), Processes: up},
			{MemoryTotal: u(40 << 30), MemoryUsed: u(10 << 30), Processes: append(other, up...)},
		}, 80 << 30, true},
		{"memory not read", []gpu.Sample{{Processes: up}}, 0, false},
		{"used over total", []gpu.Sample{{MemoryTotal: u(8 << 30), MemoryUsed: u(9 << 30), Processes: up}}, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			free, ok := upstreamGPUFree(tc.samples)
			if free != tc.free || ok != tc.ok {
				t.Fatalf("upstreamGPUFree = %v, %v; want %v, %v", free, ok, tc.free, tc.ok)
			}
		})
	}
}

// runSidecar finishes cfg, starts a sidecar on it and shuts it down when
// the test ends.
func runSidecar(t *testing.T, cfg config.Config) *Sidecar {
	t.Helper()
	cfg.Finish()
	sc, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := sc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		sc.Shutdown(ctx)
	})
	return sc
}

// TestLeakLookupBackoff: an upstream not found is looked for on every tick
// in the first minute (the server may start after the sidecar), then at
// most once a minute (a lookup can walk every process's descriptors).
func TestLeakLookupBackoff(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close() // nobody listens there now
	lw := newLeakWatch(leakDefaults(config.MemoryLeak{}, 10*time.Second), pids.Spec{Port: port}, 0)
	t0 := time.Now()
	var looked []time.Duration
	for i := 0; i <= 15; i++ {
		at := t0.Add(time.Duration(i) * 10 * time.Second)
		before := lw.resolved
		lw.tick(at)
		if lw.resolved != before {
			looked = append(looked, at.Sub(t0))
		}
	}
	want := []time.Duration{0, 10 * time.Second, 20 * time.Second, 30 * time.Second, 40 * time.Second, 50 * time.Second, 110 * time.Second}
	if !slices.Equal(looked, want) {
		t.Fatalf("looked at %v, want %v", looked, want)
	}
}

// TestLeakWatchFollowsWorkers: the upstream's processes are looked up on
// every tick, so a worker started while the first process lives counts in
// the RSS, as the server's memory; each change of the set starts a new
// trend (the sum steps, which is no leak), and the last process going away
// ends it.
func TestLeakWatchFollowsWorkers(t *testing.T) {
	addr, first := startLeakWorker(t, 0, 0)
	_, p, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(p)
	lw := newLeakWatch(leakDefaults(config.MemoryLeak{Interval: config.Duration(time.Second)}, 10*time.Second), pids.Spec{Port: port}, 0)
	rss := func(cmds ...*exec.Cmd) float64 {
		var sum float64
		for _, c := range cmds {
			v, err := baseline.ReadRSS(c.Process.Pid)
			if err != nil {
				t.Fatal(err)
			}
			sum += v
		}
		return sum
	}
	t0 := time.Now()
	tick := 0
	// check takes a sample and holds it to the RSS of want, read beside it
	// (the helpers hold their memory still: a few pages of slack).
	check := func(step string, want ...*exec.Cmd) {
		t.Helper()
		lw.tick(t0.Add(time.Duration(tick) * time.Second))
		tick++
		var wantPIDs []int
		for _, c := range want {
			wantPIDs = append(wantPIDs, c.Process.Pid)
		}
		slices.Sort(wantPIDs)
		if !slices.Equal(lw.pids, wantPIDs) {
			t.Fatalf("%s: watching %v, want %v", step, lw.pids, wantPIDs)
		}
		got, w := math.Float64frombits(lw.rss.Load()), rss(want...)
		if math.Abs(got-w) > 4<<20 {
			t.Fatalf("%s: RSS %.1f MiB, want %.1f MiB (the processes' sum)", step, got/(1<<20), w/(1<<20))
		}
		if lw.lim.Load() == 0 {
			t.Fatalf("%s: no memory limit", step)
		}
	}
	check("one process", first)
	trend := lw.host.first

	_, second := startLeakWorker(t, 0, port)
	check("a worker forked later", first, second)
	if lw.host.first == trend {
		t.Errorf("a worker forked later kept the trend from %v: its memory would read as a leak", trend)
	}
	trend = lw.host.first

	first.Process.Kill()
	first.Wait()
	check("the first gone, the worker stays", second)
	if lw.host.first == trend {
		t.Errorf("a worker leaving kept the trend from %v", trend)
	}

	second.Process.Kill()
	second.Wait()
	lw.tick(t0.Add(time.Duration(tick) * time.Second))
	if lw.pids != nil {
		t.Errorf("still watching %v after every process went away", lw.pids)
	}
}
