package bpf

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"
)

// TestCalibrate checks that the per-hit costs are measured and plausible,
// with either uprobe variant.
func TestCalibrate(t *testing.T) {
	requireRoot(t)
	for _, single := range []bool{false, true} {
		t.Run(map[bool]string{false: "multi", true: "single"}[single], func(t *testing.T) {
			if single {
				forceSingleUprobes(t)
			}
			c, err := Calibrate()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("costs: %+v", c)
			if !c.Calibrated || c.Uprobe < 100*time.Nanosecond || c.Uprobe > time.Millisecond || c.Tracepoint > 100*time.Microsecond {
				t.Errorf("implausible costs %+v", c)
			}
		})
	}
}

// pacedRun is one phase of BenchmarkOverhead.
type pacedRun struct {
	name      string
	calls     int
	cpu, wall time.Duration
	launches  float64 // the probes' count or estimate over the run
	estimated bool
	over      Overhead
	spent     time.Duration // the probes' estimate of their cost over the run
	probed    bool
}

// runPaced runs cudaprog's paced launch loop, under probes with budget
// (none when budget is 0), and collects what the program and the probes
// say.
func runPaced(b *testing.B, name string, budget float64, rate int, secs float64) pacedRun {
	b.Helper()
	r := pacedRun{name: name, probed: budget > 0}
	libdir := libCopy(b)
	var up pidHolder
	var p *Probes
	if r.probed {
		log := quietLogger()
		if os.Getenv("BPF_BENCH_DEBUG") != "" {
			log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
		}
		p = startProbes(b, Options{PIDs: up.get, Budget: budget, Logger: log})
	}
	pr := startProg(b, libdir, "paced", strconv.Itoa(rate), fmt.Sprint(secs))
	pr.Expect("loaded", 5*time.Second)
	var from time.Time
	if p != nil {
		up.set(pr.PID())
		waitFor(b, 3*time.Second, "the workload probed", func() bool { return probedLibs(p, pr.PID()) == 2 })
		from = quiet(b, p)
		r.spent = -p.Overhead().Spent
	}
	pr.Send("go")
	line := pr.Expect("result", time.Duration(secs+10)*time.Second)
	to := time.Now()
	for _, kv := range strings.Fields(line)[1:] {
		k, v, _ := strings.Cut(kv, "=")
		n, _ := strconv.Atoi(v)
		switch k {
		case "calls":
			r.calls = n
		case "cpu_us":
			r.cpu = time.Duration(n) * time.Microsecond
		case "wall_us":
			r.wall = time.Duration(n) * time.Microsecond
		}
	}
	if p != nil {
		f := settledWindow(b, p, from, to)
		r.over = p.Overhead()
		r.spent += r.over.Spent
		if f.CUDA != nil {
			r.launches, r.estimated = f.CUDA.Launches, f.CUDA.LaunchesEstimated
		}
		p.Close()
	}
	pr.Stop()
	return r
}

// BenchmarkOverhead measures, in one run, the per-hit costs and what the
// probes cost a launch-heavy workload: the same paced loop of 20k
// cudaLaunchKernel/s unprobed, under the default 3% budget, and with every
// probe always on. Run it with
//
//	go test -run '^$' -bench Overhead -benchtime 1x ./bpf
func BenchmarkOverhead(b *testing.B) {
	requireRoot(b)
	const rate, secs = 20000, 20.0
	costs, err := Calibrate()
	if err != nil {
		b.Fatal(err)
	}
	for range b.N {
		runs := []pacedRun{
			runPaced(b, "unprobed", 0, rate, secs),
			runPaced(b, fmt.Sprintf("budget %g%%", 100*DefaultBudget), DefaultBudget, rate, secs),
			runPaced(b, "always on", noDuty, rate, secs),
		}
		base, all := runs[0], runs[2]
		fmt.Printf("per-hit cost, calibrated: uprobe %v, uretprobe %v, tracepoint %v (the plain call: %v)\n", costs.Uprobe, costs.Uretprobe, costs.Tracepoint, costs.Plain)
		if hits := 2 * float64(all.calls); hits > 0 {
			fmt.Printf("per-hit cost in the workload (always on): uprobe %v\n", time.Duration((all.cpu-base.cpu).Seconds()/hits*1e9))
		}
		fmt.Printf("workload: %d cudaLaunchKernel/s for %gs, each reaching cuLaunchKernel: 2 uprobe hits a launch\n", rate, secs)
		w := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(w, "mode\tlaunches\tprocess CPU\toverhead (of a core)\testimated\tuprobe cost used\tlaunch duty\tlaunches seen/est.\trate error")
		for _, r := range runs {
			if !r.probed {
				fmt.Fprintf(w, "%s\t%d\t%v\t-\t-\t-\t-\t-\t-\n", r.name, r.calls, r.cpu.Round(time.Millisecond))
				continue
			}
			over := (r.cpu - base.cpu).Seconds() / r.wall.Seconds()
			est := ""
			if r.estimated {
				est = " (est.)"
			}
			fmt.Fprintf(w, "%s\t%d\t%v\t%.2f%%\t%.2f%%\t%v\t%.3f\t%.0f%s\t%+.2f%%\n", r.name, r.calls, r.cpu.Round(time.Millisecond),
				100*over, 100*r.spent.Seconds()/r.wall.Seconds(), r.over.Costs.Uprobe.Round(100*time.Nanosecond), r.over.LaunchDuty,
				r.launches, est, 100*(r.launches-float64(r.calls))/float64(r.calls))
			b.ReportMetric(100*over, strings.ReplaceAll(r.name, " ", "_")+"_overhead_%")
		}
		w.Flush()
	}
}
