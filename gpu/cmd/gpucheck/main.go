// Command gpucheck runs the real GPU sampler for a while and prints what it
// saw: devices, utilisation, memory, clocks, power, throttle reasons, error
// events and every process on each device, the upstream's marked. It is the
// device half of scripts/gpu-check.sh; without the NVIDIA driver it says so
// and exits 0, which is the absent path working.
//
//	gpucheck [-duration 10s] [-interval 500ms] [-port N | -pids 1,2] [-cgroup]
//	         [-require] [-expect-upstream] [-expect-neighbour]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/inferwatch/inferwatch/gpu"
	"github.com/inferwatch/inferwatch/gpu/pids"
)

func main() {
	var (
		duration  = flag.Duration("duration", 10*time.Second, "how long to sample")
		interval  = flag.Duration("interval", 500*time.Millisecond, "sampling interval (at least 100ms)")
		port      = flag.Int("port", 0, "the upstream is whatever listens on this TCP port")
		pidList   = flag.String("pids", "", "the upstream's PIDs, comma-separated")
		cgroup    = flag.Bool("cgroup", false, "widen the upstream to its cgroup's processes")
		require   = flag.Bool("require", false, "exit 1 when NVML is unavailable (a GPU machine)")
		expectUp  = flag.Bool("expect-upstream", false, "exit 1 unless the upstream's GPU work is seen")
		expectNbr = flag.Bool("expect-neighbour", false, "exit 1 unless another process's GPU work is seen")
	)
	flag.Parse()
	os.Exit(run(*duration, *interval, *port, *pidList, *cgroup, *require, *expectUp, *expectNbr))
}

func run(duration, interval time.Duration, port int, pidList string, cgroup, require, expectUp, expectNbr bool) int {
	spec := pids.Spec{Port: port, Cgroup: cgroup}
	for f := range strings.SplitSeq(pidList, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		p, err := strconv.Atoi(f)
		if err != nil {
			fmt.Fprintf(os.Stderr, "gpucheck: bad PID %q in -pids\n", f)
			return 2
		}
		spec.PIDs = append(spec.PIDs, p)
	}
	set := metrics.NewSet()
	log := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := gpu.Start(ctx, gpu.Options{Interval: interval, Upstream: spec, PIDRefresh: time.Second, TopProcesses: 8, Set: set, Logger: log})
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpucheck:", err)
		return 2
	}
	defer s.Close()
	fmt.Printf("gpucheck: pid %d, interval %v, duration %v, upstream %+v\n", os.Getpid(), interval, duration, spec)
	if !s.Available() {
		if strings.Contains(s.Reason(), "not found") || strings.Contains(s.Reason(), "not loaded") {
			fmt.Println("no NVIDIA driver: GPU facts absent")
		} else {
			fmt.Println("GPU facts absent:", s.Reason())
		}
		printMetrics(set)
		if require {
			fmt.Println("CHECK NVML available: FAIL (" + s.Reason() + ")")
			return 1
		}
		return 0
	}
	for _, d := range s.Devices() {
		fmt.Printf("device %d: %s %s, %.1f GiB\n", d.Index, d.UUID, d.Name, float64(d.MemoryTotal)/(1<<30))
	}

	start := time.Now()
	for t := time.NewTicker(time.Second); time.Since(start) < duration; {
		<-t.C
		fmt.Printf("--- t=%.0fs upstream PIDs %v\n", time.Since(start).Seconds(), s.UpstreamPIDs())
		for i, smp := range s.Latest() {
			printSample(s.Devices()[i], smp)
		}
	}
	end := time.Now()
	// Let the last interval be sampled so the window is covered.
	for !s.Settled(end) && time.Since(end) < 3*interval {
		time.Sleep(interval / 10)
	}

	f := s.Window(start, end)
	fmt.Printf("=== window %v (%s .. %s), overlap-weighted\n", end.Sub(start).Round(time.Millisecond), start.Format("15:04:05.000"), end.Format("15:04:05.000"))
	for _, d := range f.Devices {
		printFacts(d)
	}
	b, _ := json.Marshal(f)
	fmt.Printf("facts JSON: %s\n", b)
	st := s.Stats()
	fmt.Printf("sampler: %d ticks, %d read errors, last tick %v, longest tick %v\n", st.Ticks, st.ReadErrors, st.LastDuration, st.MaxDuration)
	printMetrics(set)

	ok := true
	check := func(name string, pass bool, detail string) {
		res := "ok"
		if !pass {
			res, ok = "FAIL", false
		}
		fmt.Printf("CHECK %s: %s (%s)\n", name, res, detail)
	}
	want := uint64(duration/interval) * 8 / 10
	check("sampler ticks", st.Ticks >= want, fmt.Sprintf("%d ticks, want at least %d", st.Ticks, want))
	check("tick within interval", st.MaxDuration < interval, fmt.Sprintf("longest %v", st.MaxDuration))
	if expectUp {
		var seen []string
		for _, d := range f.Devices {
			if d.Upstream != nil && d.Upstream.SMUtil != nil && d.Upstream.SMUtil.Max > 0 {
				seen = append(seen, fmt.Sprintf("gpu %d pids %v sm mean %.2f", d.Index, d.Upstream.PIDs, d.Upstream.SMUtil.Mean))
			}
		}
		check("upstream GPU work seen", len(seen) > 0, strings.Join(append(seen, "upstream PIDs "+fmt.Sprint(s.UpstreamPIDs())), "; "))
	}
	if expectNbr {
		var seen []string
		for _, d := range f.Devices {
			if d.Neighbours != nil && d.Neighbours.SMUtil != nil && d.Neighbours.SMUtil.Max > 0 {
				seen = append(seen, fmt.Sprintf("gpu %d pids %v sm mean %.2f", d.Index, d.Neighbours.PIDs, d.Neighbours.SMUtil.Mean))
			}
		}
		check("neighbour GPU work seen", len(seen) > 0, strings.Join(seen, "; "))
	}
	if !ok {
		return 1
	}
	return 0
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

func printSample(d gpu.DeviceInfo, s gpu.Sample) {
	throttle := "-"
	if s.Throttle != nil {
		throttle = fmt.Sprint(gpu.ReasonNames(*s.Throttle))
	}
	fmt.Printf("gpu %d: sm %s mem %s used %s/%s clocks sm %s mem %s power %s temp %s throttle %s xids %v ecc %d/%d\n",
		d.Index, pct(s.SMUtil), pct(s.MemUtil), gib(s.MemoryUsed), gib(s.MemoryTotal),
		num(s.SMClockHz, 1e6, "MHz"), num(s.MemClockHz, 1e6, "MHz"), num(s.PowerWatts, 1, "W"), num(s.TemperatureC, 1, "C"),
		throttle, s.XIDs, s.ECCSingle, s.ECCDouble)
	if !s.ProcUtilOK {
		fmt.Println("  per-process utilisation not read")
	}
	for _, p := range s.Processes {
		up := ""
		if p.Upstream {
			up = " UPSTREAM"
		}
		fmt.Printf("  pid %d (%s)%s: sm %s mem %s used %s\n", p.PID, comm(p.PID), up, pct(p.SMUtil), pct(p.MemUtil), gib(p.MemoryUsed))
	}
}

func stat(s *gpu.Stat, scale float64, unit string) string {
	if s == nil {
		return "-"
	}
	return fmt.Sprintf("mean %.2f%s min %.2f%s max %.2f%s", s.Mean/scale, unit, s.Min/scale, unit, s.Max/scale, unit)
}

func printFacts(d gpu.DeviceFacts) {
	fmt.Printf("gpu %d %s: %d samples, coverage %.3f\n", d.Index, d.UUID, d.Samples, d.Coverage)
	fmt.Printf("  sm util     %s\n", stat(d.SMUtil, 1, ""))
	fmt.Printf("  mem util    %s\n", stat(d.MemUtil, 1, ""))
	fmt.Printf("  memory used max %s of %s\n", gib(d.MemoryUsedMax), gib(d.MemoryTotal))
	fmt.Printf("  sm clock    %s\n", stat(d.SMClockHz, 1e6, "MHz"))
	fmt.Printf("  mem clock   %s\n", stat(d.MemClockHz, 1e6, "MHz"))
	fmt.Printf("  power       %s\n", stat(d.PowerWatts, 1, "W"))
	fmt.Printf("  temperature %s\n", stat(d.TemperatureC, 1, "C"))
	fmt.Printf("  throttle reasons seen %v; xids %v; ecc events %d single, %d double\n", d.ThrottleReasons, d.XIDs, d.ECCSingle, d.ECCDouble)
	for _, grp := range []struct {
		name string
		g    *gpu.GroupUsage
	}{{"upstream", d.Upstream}, {"neighbours", d.Neighbours}} {
		name, g := grp.name, grp.g
		if g == nil {
			fmt.Printf("  %s: none on this device\n", name)
			continue
		}
		fmt.Printf("  %s pids %v: sm %s; mem %s; memory max %s\n", name, g.PIDs, stat(g.SMUtil, 1, ""), stat(g.MemUtil, 1, ""), gib(g.MemoryUsedMax))
	}
	for _, p := range d.Processes {
		fmt.Printf("  process %d (%s) upstream=%v: sm %s; memory max %s\n", p.PID, comm(p.PID), p.Upstream, stat(p.SMUtil, 1, ""), gib(p.MemoryUsedMax))
	}
}

func printMetrics(set *metrics.Set) {
	var b strings.Builder
	set.WritePrometheus(&b)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	lines = slices.DeleteFunc(lines, func(l string) bool { return strings.HasPrefix(l, "#") })
	fmt.Printf("metrics (%d series):\n", len(lines))
	for _, l := range lines {
		fmt.Println("  " + l)
	}
}
