// Command gpucheck runs the real GPU sampler (gpu/) and, with -cuda, the
// eBPF CUDA probes (bpf/) against the upstream for a while, and prints what
// they saw: devices, utilisation, memory, clocks, power, throttle reasons,
// error events and every process on each device with the upstream's
// marked; the upstream's CUDA kernel launches, copies, synchronisation
// waits and allocations, the kernels it launched most, and what the probes
// cost. It is the device half of scripts/gpu-check.sh. Without the NVIDIA
// driver it says so, and exits 0 unless -require; the CUDA probes do not
// need the driver (the tests run them against a stand-in libcuda).
//
//	gpucheck [-duration 10s] [-interval 500ms] [-port N | -pids 1,2] [-cgroup]
//	         [-require] [-expect-upstream] [-expect-neighbour]
//	         [-cuda [-budget 0.03] [-expect-cuda] [-expect-copies]]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/inferwatch/inferwatch/bpf"
	"github.com/inferwatch/inferwatch/gpu"
	"github.com/inferwatch/inferwatch/gpu/pids"
)

// config is what the flags ask for.
type config struct {
	duration, interval time.Duration
	spec               pids.Spec

	require   bool // NVML must be there (a GPU machine)
	expectUp  bool // the upstream's GPU work must show in NVML
	expectNbr bool // another process's GPU work must show in NVML

	cuda         bool    // attach the eBPF CUDA probes to the upstream
	budget       float64 // their overhead budget, share of one core
	expectCUDA   bool    // launches and synchronisation waits must be seen
	expectCopies bool    // copies with bytes and allocations must be seen
}

// result is what one run saw, for the tests.
type result struct {
	code     int
	gpuOK    bool
	gpu      gpu.Facts
	probesOn bool
	cuda     bpf.Facts
}

func main() {
	var (
		cfg     config
		pidList string
	)
	flag.DurationVar(&cfg.duration, "duration", 10*time.Second, "how long to sample")
	flag.DurationVar(&cfg.interval, "interval", 500*time.Millisecond, "sampling interval (at least 100ms)")
	flag.IntVar(&cfg.spec.Port, "port", 0, "the upstream is whatever listens on this TCP port")
	flag.StringVar(&pidList, "pids", "", "the upstream's PIDs, comma-separated")
	flag.BoolVar(&cfg.spec.Cgroup, "cgroup", false, "widen the upstream to its cgroup's processes")
	flag.BoolVar(&cfg.require, "require", false, "exit 1 when NVML is unavailable (a GPU machine)")
	flag.BoolVar(&cfg.expectUp, "expect-upstream", false, "exit 1 unless the upstream's GPU work is seen")
	flag.BoolVar(&cfg.expectNbr, "expect-neighbour", false, "exit 1 unless another process's GPU work is seen")
	flag.BoolVar(&cfg.cuda, "cuda", false, "attach the eBPF CUDA probes to the upstream (root)")
	flag.Float64Var(&cfg.budget, "budget", bpf.DefaultBudget, "the probes' overhead budget, share of one core")
	flag.BoolVar(&cfg.expectCUDA, "expect-cuda", false, "with -cuda: exit 1 unless the upstream's kernel launches and sync waits are seen")
	flag.BoolVar(&cfg.expectCopies, "expect-copies", false, "with -cuda: exit 1 unless copies with bytes and allocations are seen")
	flag.Parse()
	for f := range strings.SplitSeq(pidList, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		p, err := strconv.Atoi(f)
		if err != nil {
			fmt.Fprintf(os.Stderr, "gpucheck: bad PID %q in -pids\n", f)
			os.Exit(2)
		}
		cfg.spec.PIDs = append(cfg.spec.PIDs, p)
	}
	if (cfg.expectCUDA || cfg.expectCopies) && !cfg.cuda {
		fmt.Fprintln(os.Stderr, "gpucheck: -expect-cuda and -expect-copies need -cuda")
		os.Exit(2)
	}
	os.Exit(run(context.Background(), cfg, os.Stdout).code)
}

func run(ctx context.Context, cfg config, w io.Writer) result {
	var res result
	// The samplers log from their own goroutines into the same output.
	w = &syncWriter{w: w}
	set := metrics.NewSet()
	log := slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := gpu.Start(ctx, gpu.Options{Interval: cfg.interval, Upstream: cfg.spec, PIDRefresh: time.Second, TopProcesses: 8, Set: set, Logger: log})
	if err != nil {
		fmt.Fprintln(w, "gpucheck:", err)
		res.code = 2
		return res
	}
	defer s.Close()
	var probes *bpf.Probes
	if cfg.cuda {
		probes, err = bpf.Start(ctx, bpf.Options{
			PIDs:   func() ([]int, error) { return cfg.spec.Resolve() },
			Budget: cfg.budget, Set: set, Logger: log,
		})
		if err != nil {
			fmt.Fprintln(w, "gpucheck:", err)
			res.code = 2
			return res
		}
		defer probes.Close()
		res.probesOn = probes.Enabled()
		if !res.probesOn {
			fmt.Fprintln(w, "eBPF probes disabled:", strings.Join(probes.Reasons(), "; "))
		}
	}
	fmt.Fprintf(w, "gpucheck: pid %d, interval %v, duration %v, upstream %+v, cuda probes %v\n", os.Getpid(), cfg.interval, cfg.duration, cfg.spec, cfg.cuda)

	ok := true
	check := func(name string, pass bool, detail string) {
		r := "ok"
		if !pass {
			r, ok = "FAIL", false
		}
		fmt.Fprintf(w, "CHECK %s: %s (%s)\n", name, r, detail)
	}

	res.gpuOK = s.Available()
	if !res.gpuOK {
		if strings.Contains(s.Reason(), "not found") || strings.Contains(s.Reason(), "not loaded") {
			fmt.Fprintln(w, "no NVIDIA driver: GPU facts absent")
		} else {
			fmt.Fprintln(w, "GPU facts absent:", s.Reason())
		}
		if cfg.require {
			check("NVML available", false, s.Reason())
		}
		if !cfg.cuda {
			printMetrics(w, set)
			return finish(res, ok)
		}
	}
	for _, d := range s.Devices() {
		fmt.Fprintf(w, "device %d: %s %s, %.1f GiB\n", d.Index, d.UUID, d.Name, float64(d.MemoryTotal)/(1<<30))
	}

	start := time.Now()
	var libs string
	for t := time.NewTicker(time.Second); time.Since(start) < cfg.duration; {
		now := <-t.C
		fmt.Fprintf(w, "--- t=%.0fs\n", time.Since(start).Seconds())
		if res.gpuOK {
			fmt.Fprintf(w, "upstream PIDs %v\n", s.UpstreamPIDs())
			for i, smp := range s.Latest() {
				printSample(w, s.Devices()[i], smp)
			}
		}
		if res.probesOn {
			if l := targetLine(probes.Targets()); l != libs {
				libs = l
				fmt.Fprintln(w, "probed:", l)
			}
			printCUDA(w, "last second", probes.Window(now.Add(-time.Second), now))
		}
	}
	end := time.Now()
	// Let the last interval be sampled so the window is covered.
	for time.Since(end) < 3*max(cfg.interval, bpf.DefaultSample) {
		if (!res.gpuOK || s.Settled(end)) && (!res.probesOn || probes.Settled(end)) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Fprintf(w, "=== window %v (%s .. %s), overlap-weighted\n", end.Sub(start).Round(time.Millisecond), start.Format("15:04:05.000"), end.Format("15:04:05.000"))

	if res.gpuOK {
		res.gpu = s.Window(start, end)
		for _, d := range res.gpu.Devices {
			printFacts(w, d)
		}
		b, _ := json.Marshal(res.gpu)
		fmt.Fprintf(w, "gpu facts JSON: %s\n", b)
		st := s.Stats()
		fmt.Fprintf(w, "sampler: %d ticks, %d read errors, last tick %v, longest tick %v\n", st.Ticks, st.ReadErrors, st.LastDuration, st.MaxDuration)
		want := uint64(cfg.duration/cfg.interval) * 8 / 10
		check("sampler ticks", st.Ticks >= want, fmt.Sprintf("%d ticks, want at least %d", st.Ticks, want))
		check("tick within interval", st.MaxDuration < cfg.interval, fmt.Sprintf("longest %v", st.MaxDuration))
		if cfg.expectUp {
			var seen []string
			for _, d := range res.gpu.Devices {
				if d.Upstream != nil && d.Upstream.SMUtil != nil && d.Upstream.SMUtil.Max > 0 {
					seen = append(seen, fmt.Sprintf("gpu %d pids %v sm mean %.2f", d.Index, d.Upstream.PIDs, d.Upstream.SMUtil.Mean))
				}
			}
			check("upstream GPU work seen", len(seen) > 0, strings.Join(append(seen, "upstream PIDs "+fmt.Sprint(s.UpstreamPIDs())), "; "))
		}
		if cfg.expectNbr {
			var seen []string
			for _, d := range res.gpu.Devices {
				if d.Neighbours != nil && d.Neighbours.SMUtil != nil && d.Neighbours.SMUtil.Max > 0 {
					seen = append(seen, fmt.Sprintf("gpu %d pids %v sm mean %.2f", d.Index, d.Neighbours.PIDs, d.Neighbours.SMUtil.Mean))
				}
			}
			check("neighbour GPU work seen", len(seen) > 0, strings.Join(seen, "; "))
		}
	}

	if cfg.cuda {
		if res.probesOn {
			res.cuda = probes.Window(start, end)
			fmt.Fprintln(w, "probed:", targetLine(probes.Targets()))
			printCUDA(w, "window", res.cuda)
			for _, k := range probes.Kernels(10) {
				name := k.Name
				if name == "" {
					name = "(no symbol: a driver launch passes a CUfunction handle)"
				}
				fmt.Fprintf(w, "  kernel pid %d %s func %#x %s: %d launches while probed\n", k.PID, k.API, k.Func, name, k.Launches)
			}
			o := probes.Overhead()
			fmt.Fprintf(w, "probe cost: per hit uprobe %v uretprobe %v tracepoint %v (calibrated %v); last period %.2f%% of a core (budget %.1f%%), launch duty %.2f at %.0f launches/s; spent %v in all\n",
				o.Costs.Uprobe, o.Costs.Uretprobe, o.Costs.Tracepoint, o.Costs.Calibrated, 100*o.Estimated, 100*o.Budget, o.LaunchDuty, o.LaunchRate, o.Spent)
			b, _ := json.Marshal(res.cuda)
			fmt.Fprintf(w, "cuda facts JSON: %s\n", b)
		}
		if cfg.expectCUDA || cfg.expectCopies {
			check("eBPF probes loaded", res.probesOn, strings.Join(probes.Reasons(), "; "))
			libsSeen := false
			for _, t := range probes.Targets() {
				libsSeen = libsSeen || len(t.Libraries) > 0
			}
			check("CUDA libraries probed", libsSeen, targetLine(probes.Targets()))
		}
		c := res.cuda.CUDA
		if cfg.expectCUDA {
			check("kernel launches seen", c != nil && c.Launches > 0, cudaLine(c))
			check("synchronisation waits seen", c != nil && c.Syncs > 0 && c.SyncWait > 0, cudaLine(c))
		}
		if cfg.expectCopies {
			check("copies seen", c != nil && c.H2DBytes > 0 && c.D2HBytes > 0, cudaLine(c))
			check("allocations seen", c != nil && c.Allocs > 0 && c.AllocBytes > 0, cudaLine(c))
		}
	}
	printMetrics(w, set)
	return finish(res, ok)
}

// syncWriter serialises writes from several goroutines.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func finish(res result, ok bool) result {
	if !ok && res.code == 0 {
		res.code = 1
	}
	return res
}

// targetLine says which processes are followed and which CUDA libraries
// are probed in each.
func targetLine(ts []bpf.TargetStatus) string {
	if len(ts) == 0 {
		return "no upstream process found yet"
	}
	var parts []string
	for _, t := range ts {
		var libs []string
		for _, l := range t.Libraries {
			s := fmt.Sprintf("%s %s (%d functions)", l.Kind, l.Path, l.Functions)
			if l.Error != "" {
				s += " error: " + l.Error
			}
			libs = append(libs, s)
		}
		if len(libs) == 0 {
			libs = append(libs, "no CUDA library mapped")
		}
		if t.Error != "" {
			libs = append(libs, "error: "+t.Error)
		}
		parts = append(parts, fmt.Sprintf("pid %d: %s", t.PID, strings.Join(libs, ", ")))
	}
	return strings.Join(parts, "; ")
}

func cudaLine(c *bpf.CUDAFacts) string {
	if c == nil {
		return "no CUDA facts"
	}
	est := ""
	if c.LaunchesEstimated {
		est = " (estimated: the launch probes were detached for part of the window)"
	}
	return fmt.Sprintf("launches %.0f%s; copies %.0f: h2d %.0f B, d2h %.0f B, d2d %.0f B, other %.0f B; sync wait %v in %d syncs; allocs %.0f (%.0f B), frees %.0f B, outstanding %d B",
		c.Launches, est, c.Copies, c.H2DBytes, c.D2HBytes, c.D2DBytes, c.OtherCopyBytes, c.SyncWait, c.Syncs, c.Allocs, c.AllocBytes, c.FreeBytes, c.Outstanding)
}

func printCUDA(w io.Writer, what string, f bpf.Facts) {
	fmt.Fprintf(w, "cuda %s: %s\n", what, cudaLine(f.CUDA))
	if sc := f.Sched; sc != nil {
		fmt.Fprintf(w, "  sched: run-queue delay %v in %.0f waits (p99 %v), off-CPU %v\n", sc.RunqueueDelay, sc.RunqueueWaits, sc.RunqueueP99, sc.OffCPU)
	}
	if cg := f.Cgroup; cg != nil {
		fmt.Fprintf(w, "  cgroup: throttled %v in %.0f of %.0f periods\n", cg.Throttled, cg.ThrottledPeriods, cg.Periods)
	}
	for _, k := range f.OOMKills {
		fmt.Fprintf(w, "  OOM kill: pid %d %s upstream=%v\n", k.PID, k.Comm, k.Upstream)
	}
}

func pct(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", *v*100)
}

func gib(v *uint64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.2fGiB", float64(*v)/(1<<30))
}

func num(v *float64, scale float64, unit string) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.0f%s", *v/scale, unit)
}

// comm names a process, and says when this PID namespace cannot see it
// (NVML reports PIDs as the driver sees them).
func comm(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return "not in this PID namespace"
	}
	return strings.TrimSpace(string(b))
}

func printSample(w io.Writer, d gpu.DeviceInfo, s gpu.Sample) {
	throttle := "-"
	if s.Throttle != nil {
		throttle = fmt.Sprint(gpu.ReasonNames(*s.Throttle))
	}
	fmt.Fprintf(w, "gpu %d: sm %s mem %s used %s/%s clocks sm %s mem %s power %s temp %s throttle %s xids %v ecc %d/%d\n",
		d.Index, pct(s.SMUtil), pct(s.MemUtil), gib(s.MemoryUsed), gib(s.MemoryTotal),
		num(s.SMClockHz, 1e6, "MHz"), num(s.MemClockHz, 1e6, "MHz"), num(s.PowerWatts, 1, "W"), num(s.TemperatureC, 1, "C"),
		throttle, s.XIDs, s.ECCSingle, s.ECCDouble)
	if !s.ProcUtilOK {
		fmt.Fprintln(w, "  per-process utilisation not read")
	}
	for _, p := range s.Processes {
		up := ""
		if p.Upstream {
			up = " UPSTREAM"
		}
		fmt.Fprintf(w, "  pid %d (%s)%s: sm %s mem %s used %s\n", p.PID, comm(p.PID), up, pct(p.SMUtil), pct(p.MemUtil), gib(p.MemoryUsed))
	}
}

func stat(s *gpu.Stat, scale float64, unit string) string {
	if s == nil {
		return "-"
	}
	return fmt.Sprintf("mean %.2f%s min %.2f%s max %.2f%s", s.Mean/scale, unit, s.Min/scale, unit, s.Max/scale, unit)
}

func printFacts(w io.Writer, d gpu.DeviceFacts) {
	fmt.Fprintf(w, "gpu %d %s: %d samples, coverage %.3f\n", d.Index, d.UUID, d.Samples, d.Coverage)
	fmt.Fprintf(w, "  sm util     %s\n", stat(d.SMUtil, 1, ""))
	fmt.Fprintf(w, "  mem util    %s\n", stat(d.MemUtil, 1, ""))
	fmt.Fprintf(w, "  memory used max %s of %s\n", gib(d.MemoryUsedMax), gib(d.MemoryTotal))
	fmt.Fprintf(w, "  sm clock    %s\n", stat(d.SMClockHz, 1e6, "MHz"))
	fmt.Fprintf(w, "  mem clock   %s\n", stat(d.MemClockHz, 1e6, "MHz"))
	fmt.Fprintf(w, "  power       %s\n", stat(d.PowerWatts, 1, "W"))
	fmt.Fprintf(w, "  temperature %s\n", stat(d.TemperatureC, 1, "C"))
	fmt.Fprintf(w, "  throttle reasons seen %v; xids %v; ecc events %d single, %d double\n", d.ThrottleReasons, d.XIDs, d.ECCSingle, d.ECCDouble)
	for _, grp := range []struct {
		name string
		g    *gpu.GroupUsage
	}{{"upstream", d.Upstream}, {"neighbours", d.Neighbours}} {
		name, g := grp.name, grp.g
		if g == nil {
			fmt.Fprintf(w, "  %s: none on this device\n", name)
			continue
		}
		fmt.Fprintf(w, "  %s pids %v: sm %s; mem %s; memory max %s\n", name, g.PIDs, stat(g.SMUtil, 1, ""), stat(g.MemUtil, 1, ""), gib(g.MemoryUsedMax))
	}
	for _, p := range d.Processes {
		fmt.Fprintf(w, "  process %d (%s) upstream=%v: sm %s; memory max %s\n", p.PID, comm(p.PID), p.Upstream, stat(p.SMUtil, 1, ""), gib(p.MemoryUsedMax))
	}
}

func printMetrics(w io.Writer, set *metrics.Set) {
	var b strings.Builder
	set.WritePrometheus(&b)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	lines = slices.DeleteFunc(lines, func(l string) bool { return strings.HasPrefix(l, "#") })
	fmt.Fprintf(w, "metrics (%d series):\n", len(lines))
	for _, l := range lines {
		fmt.Fprintln(w, "  "+l)
	}
}
