package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os/signal"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/inferwatch/inferwatch/internal/cmdline"

	"github.com/inferwatch/inferwatch/alerting"
	"github.com/inferwatch/inferwatch/config"
	"github.com/inferwatch/inferwatch/demo/loadgen"
	"github.com/inferwatch/inferwatch/demo/modelserver"
	"github.com/inferwatch/inferwatch/demo/table"
	"github.com/inferwatch/inferwatch/sidecar"
	"github.com/inferwatch/inferwatch/tracing"
	"github.com/inferwatch/inferwatch/windowstats"
)

// runDemo starts the embedded model server, the sidecar in front of it, and
// open-loop load through the sidecar, and prints a live table.
func runDemo(args []string, out, logw io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	qps := fs.Float64("qps", 200, "calls per second through the sidecar (open loop, gRPC and HTTP mixed)")
	llmQPS := fs.Float64("llm-qps", 4, "generations per second of the toy LLM (streamed over SSE and ModelStreamInfer, 24 tokens each); 0: none")
	duration := fs.Duration("duration", 0, "how long to run; 0 until Ctrl-C")
	every := fs.Duration("every", time.Second, "table refresh interval")
	grpcListen := fs.String("grpc-listen", "127.0.0.1:0", "sidecar gRPC address")
	httpListen := fs.String("http-listen", "127.0.0.1:0", "sidecar HTTP address")
	adminListen := fs.String("admin-listen", config.DefaultAdminListen, "sidecar admin address (/metrics)")
	workers := fs.Int("workers", 32, "model server executions at once (injected faults sleep, so many workers keep them from overloading the server)")
	statsEvery := fs.Duration("triton-stats-interval", 2*time.Second, "statistics-extension poll interval")
	logLevel := fs.String("log-level", "warn", "sidecar log level")
	dataPlane := fs.String("data-plane", config.DefaultDataPlane(), "how the gRPC route moves bytes: stdlib or frame; default from INFERWATCH_DATA_PLANE, else stdlib")
	window := fs.Duration("window", 10*time.Second, "window statistics window length (alerts evaluate per window)")
	speedup := fs.Float64("history-speedup", 1, "baseline history seconds per real second (e.g. 8640: a day of history every 10 s)")
	sla := &demoSLA{m: map[string]time.Duration{loadgen.ModelMLP: 25 * time.Millisecond}}
	fs.Var(sla, "sla", "latency SLA for LatencyMeanOverSLA: a duration for mnist-mlp, or model=duration as proxy's --sla takes it (repeatable; INFERWATCH_SLA in either form)")
	ttftSLO := fs.Duration("ttft-slo", 0, "P99 time-to-first-token SLO of toy-llm for LLMTimeToFirstTokenOverSLO; 0: none")
	base := fs.Duration("base-latency", 0, "a constant extra latency of every inference from the start (a slower model)")
	stepAt := fs.Duration("inject-step-at", 0, "after this long, the model server degrades for good: each inference gains an exponentially distributed delay of mean --step-extra (0: never)")
	stepExtra := fs.Duration("step-extra", 10*time.Millisecond, "mean of the degradation's added latency")
	var amURLs listFlag
	fs.Var(&amURLs, "alertmanager-url", "Alertmanager base URL to send alerts to (repeatable)")
	faults := faultFlags(fs)
	if err := cmdline.Parse(fs, args); err != nil {
		return err
	}
	f, err := faults()
	if err != nil {
		return err
	}
	// Checked before anything starts: the load generator refuses these
	// only once the server, sidecar and table run, and the demo then sat
	// without load until Ctrl-C.
	if !(*qps > 0) || math.IsInf(*qps, 0) {
		return fmt.Errorf("--qps %v: want calls per second above 0", *qps)
	}
	if !(*llmQPS >= 0) || math.IsInf(*llmQPS, 0) {
		return fmt.Errorf("--llm-qps %v: want generations per second, 0 for none", *llmQPS)
	}
	if *duration < 0 {
		return fmt.Errorf("--duration %v: must not be negative (0: until Ctrl-C)", *duration)
	}
	if f.SpikeEvery > 0 && f.SpikeFor < 4**window {
		fmt.Fprintf(logw, "inferwatch demo: note: a %v spike spans fewer than 4 %v windows; P99OverBaseline needs 3 breaching windows in a row\n", f.SpikeFor, *window)
	}
	logger := cmdline.Logger(logw, *logLevel)

	ms, err := startModelServer(modelserver.Options{Workers: *workers, Seed: 1, Faults: f}, "127.0.0.1:0", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ms.stop()
	msStart := time.Now() // the spike, neighbour and step count from here
	ms.SetExtraLatency(*base)

	cfg := config.Default()
	cfg.AdminListen = *adminListen
	cfg.LogLevel = *logLevel
	cfg.DataPlane = *dataPlane
	cfg.DrainTimeout = config.Duration(5 * time.Second)
	stats := config.TritonStats{Interval: config.Duration(*statsEvery)} // automatic: polled once, over gRPC
	cfg.Routes = []config.Route{
		{Name: "grpc", Protocol: "grpc", Listen: *grpcListen, Upstream: ms.grpcAddr, TritonStats: stats},
		{Name: "http", Protocol: "http", Listen: *httpListen, Upstream: ms.httpAddr, TritonStats: stats},
	}
	cfg.Alerting.Window = config.Duration(*window)
	cfg.Alerting.Baseline.Speedup = *speedup
	cfg.Alerting.AlertmanagerURLs = amURLs
	cfg.Alerting.Rules.Models = map[string]alerting.Thresholds{}
	for model, d := range sla.m {
		cfg.Alerting.Rules.Models[model] = alerting.Thresholds{SLA: d}
	}
	if *ttftSLO > 0 {
		t := cfg.Alerting.Rules.Models[loadgen.ModelLLM]
		t.TTFTSLO = *ttftSLO
		cfg.Alerting.Rules.Models[loadgen.ModelLLM] = t
	}
	cfg.Finish()
	tbl := table.New(out)
	sc, err := sidecar.New(cfg, logger, tbl)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	if err := sc.Start(context.Background()); err != nil {
		return err
	}
	addrs := sc.RouteAddrs()
	grpcAddr, httpAddr := addrs[0].String(), addrs[1].String()
	adminURL := "http://" + sc.AdminAddr().String()
	tbl.AddSection("Triton statistics (model server's own view, last poll interval)", func() []string {
		return tritonLines(sc)
	})
	tbl.AddSection(fmt.Sprintf("Window statistics (last closed %v window; EMA τ=1m; slope of latency against QPS)", *window), func() []string {
		return windowLines(sc.Engine().Stats())
	})
	tbl.AddSection("Alerts (also at "+adminURL+"/api/v1/alerts)", func() []string {
		return alertLines(sc.Engine().Alerts())
	})
	tbl.AddSection("Newest kept trace (all: "+adminURL+"/traces, or inferwatch traces --admin "+adminURL+")", func() []string {
		return traceLines(sc)
	})
	tbl.AddSection("Host facts for the upstream (this process: the embedded server), last second", func() []string {
		return hostLines(sc)
	})
	if *stepAt > 0 {
		go func() {
			select {
			case <-time.After(time.Until(msStart.Add(*stepAt))):
				ms.SetDegradation(*stepExtra)
			case <-ctx.Done():
			}
		}()
	}
	var skipped atomic.Int64 // due calls the load generators skipped as late
	faultLine := describeFaults(f, *base, *stepAt, *stepExtra, msStart)
	go tbl.Run(ctx, *every, func() []string {
		return []string{
			fmt.Sprintf("inferwatch demo — model server gRPC %s HTTP %s; sidecar gRPC %s HTTP %s", ms.grpcAddr, ms.httpAddr, grpcAddr, httpAddr),
			fmt.Sprintf("admin %s/metrics   %s   %s", adminURL, loadLine(*qps, *llmQPS, skipped.Load()), faultLine),
		}
	})

	targets := []loadgen.Target{
		{Protocol: loadgen.ProtocolGRPC, Addr: grpcAddr, Model: loadgen.ModelMLP},
		{Protocol: loadgen.ProtocolHTTP, Addr: httpAddr, Model: loadgen.ModelMLP},
		{Protocol: loadgen.ProtocolHTTP, Addr: httpAddr, Model: loadgen.ModelMLP, JSON: true},
		{Protocol: loadgen.ProtocolGRPC, Addr: grpcAddr, Model: loadgen.ModelEcho, Payload: 64 << 10},
	}
	if *llmQPS > 0 {
		go loadgen.Run(ctx, loadgen.Options{QPS: *llmQPS, OnLate: func() { skipped.Add(1) }, Targets: []loadgen.Target{
			{Protocol: loadgen.ProtocolHTTP, Addr: httpAddr, Model: loadgen.ModelLLM},
			{Protocol: loadgen.ProtocolGRPC, Addr: grpcAddr, Model: loadgen.ModelLLM},
		}})
	}
	_, lerr := loadgen.Run(ctx, loadgen.Options{QPS: *qps, Targets: targets, OnLate: func() { skipped.Add(1) }})
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := sc.Shutdown(sctx); err != nil {
		return err
	}
	if lerr != nil && !errors.Is(lerr, context.Canceled) && !errors.Is(lerr, context.DeadlineExceeded) {
		return fmt.Errorf("load: %w", lerr)
	}
	return nil
}

// loadLine states the load the demo drives, and how many due calls the
// load generator skipped because its in-flight bound was reached (a server
// too slow for the rate): those never reach the table.
func loadLine(qps, llmQPS float64, skipped int64) string {
	s := fmt.Sprintf("load %s QPS open-loop (gRPC + HTTP binary + HTTP JSON)", strconv.FormatFloat(qps, 'f', -1, 64))
	if llmQPS > 0 {
		s += fmt.Sprintf(" + %s LLM generations/s (SSE + ModelStreamInfer)", strconv.FormatFloat(llmQPS, 'f', -1, 64))
	}
	if skipped > 0 {
		s += fmt.Sprintf(", %d calls skipped (due with %d in flight)", skipped, loadgen.DefaultMaxInFlight)
	}
	return s
}

// describeFaults names what the demo injects, with the clock time a
// delayed fault starts (start: when the model server started).
func describeFaults(f modelserver.Faults, base, stepAt, stepExtra time.Duration, start time.Time) string {
	s := "faults:"
	if base > 0 {
		s += fmt.Sprintf(" base latency +%v;", base)
	}
	if stepAt > 0 {
		s += fmt.Sprintf(" degradation +%v (mean) from %s;", stepExtra, start.Add(stepAt).Format("15:04:05"))
	}
	if f.SpikeEvery > 0 {
		s += fmt.Sprintf(" spike +%v for %v every %v;", f.SpikeExtra, f.SpikeFor, f.SpikeEvery)
	}
	if f.LeakBytesPerSec > 0 {
		s += fmt.Sprintf(" leak %s/s;", byteSize(f.LeakBytesPerSec))
	}
	if f.NeighbourCPUs > 0 {
		s += fmt.Sprintf(" CPU neighbour %.1f cores", f.NeighbourCPUs)
		if f.NeighbourAfter > 0 {
			s += " from " + start.Add(f.NeighbourAfter).Format("15:04:05")
		}
		s += ";"
	}
	if s == "faults:" {
		s += " none"
	}
	return s
}

// byteSize writes n in the largest binary unit that holds it whole.
func byteSize(n int64) string {
	for _, u := range []struct {
		name string
		size int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.size && n%u.size == 0 {
			return fmt.Sprintf("%d %s", n/u.size, u.name)
		}
	}
	return fmt.Sprintf("%d B", n)
}

// tritonLines renders the pollers' latest per-model stage means.
func tritonLines(sc *sidecar.Sidecar) []string {
	var lines []string
	for _, p := range sc.Pollers() {
		snap := p.Snapshot()
		sort.Slice(snap, func(i, j int) bool { return snap[i].Model < snap[j].Model })
		nameWidth := 10 // as wide as the longest name, so the counts line up
		for _, m := range snap {
			nameWidth = max(nameWidth, utf8.RuneCountInString(m.Model))
		}
		for _, m := range snap {
			line := fmt.Sprintf("%-*s v%-3s %6d inferences", nameWidth, m.Model, m.Version, m.Inferences)
			for _, st := range m.Stages {
				if st.Count == 0 || st.Name == "success" {
					continue
				}
				line += fmt.Sprintf("  %s %.2fms", st.Name, float64(st.Mean)/float64(time.Millisecond))
			}
			lines = append(lines, line)
		}
	}
	if len(lines) == 0 {
		lines = append(lines, "(waiting for two polls)")
	}
	return lines
}

// windowLines renders the last closed window of every model, in columns
// as wide as their widest cell, so a long model name keeps its row's
// figures under their headings.
func windowLines(views []windowstats.ModelView) []string {
	ms := func(s float64) string { return fmt.Sprintf("%.2f", s*1000) }
	rows := [][]string{{"MODEL", "VERSION", "WINDOW", "QPS", "EMA", "P50", "P99", "P99.9", "STDDEV", "SLOPE ms/qps"}}
	for _, v := range views {
		w := v.Previous
		if w.Count == 0 {
			continue
		}
		slope := "-"
		if w.Fit.OK {
			slope = fmt.Sprintf("%.4f", w.Fit.Slope*1000)
		}
		rows = append(rows, []string{v.Model, orDash(v.Version), w.Start.Format("15:04:05"), rate(w.QPS),
			ms(w.EMA), ms(w.P50), ms(w.P99), ms(w.P999), ms(w.StdDev), slope})
	}
	if len(rows) == 1 {
		return []string{alignRows(rows, windowWidths, 2)[0], "(waiting for the first window to close)"}
	}
	return alignRows(rows, windowWidths, 2)
}

// windowWidths are the window columns' least widths.
var windowWidths = []int{10, 7, 8, 6, 8, 8, 8, 8, 9, 12}

// alignRows lays rows out in columns one space apart, each at least its
// least width and as wide as its widest cell: the first left columns
// left-aligned, the rest right-aligned.
func alignRows(rows [][]string, least []int, left int) []string {
	width := slices.Clone(least)
	for _, r := range rows {
		for i, c := range r {
			if i >= len(width) {
				width = append(width, 0)
			}
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	out := make([]string, 0, len(rows))
	for _, r := range rows {
		var b strings.Builder
		for i, c := range r {
			if i > 0 {
				b.WriteByte(' ')
			}
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			if i < left {
				b.WriteString(c + pad)
			} else {
				b.WriteString(pad + c)
			}
		}
		out = append(out, b.String())
	}
	return out
}

// rate shows a rate whole from 10/s up, and with two significant digits
// below, so that a model called under once a second does not read 0.
func rate(qps float64) string {
	if qps >= 10 || qps == 0 {
		return strconv.FormatFloat(qps, 'f', 0, 64)
	}
	return strconv.FormatFloat(qps, 'g', 2, 64)
}

// orDash shows an empty label value as "-".
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// alertLines renders active and recently resolved alerts.
func alertLines(alerts []alerting.Alert) []string {
	var lines []string
	for _, a := range alerts {
		line := fmt.Sprintf("%-8s %-30s %-14s since %s  %s", a.State, a.Labels["alertname"], modelVersion(a.Labels), a.StartsAt.Format("15:04:05"), a.Annotations["summary"])
		if a.State == alerting.StateResolved {
			line += "  (resolved " + a.EndsAt.Format("15:04:05") + ")"
		}
		lines = append(lines, line)
		if a.Snapshot != nil && len(a.Snapshot.Moved) > 0 {
			lines = append(lines, "         root cause: moved most: "+strings.Join(a.Snapshot.Moved, ", "))
		}
		if h := a.Annotations["host_facts"]; h != "" {
			lines = append(lines, "         host, window before → breaching window: "+h)
		}
	}
	if len(lines) == 0 {
		lines = append(lines, "(none)")
	}
	return lines
}

// traceLines renders the newest kept trace, preferring one kept for being
// slow or failed, since that is what a user hunts.
func traceLines(sc *sidecar.Sidecar) []string {
	tr := sc.Tracer()
	if tr == nil {
		return []string{"(tracing disabled)"}
	}
	traces := tr.Traces(50, "")
	if len(traces) == 0 {
		return []string{"(none yet)"}
	}
	pick := traces[:1]
	for i := range traces {
		if traces[i].Sampling == "tail" {
			pick = traces[i : i+1]
			break
		}
	}
	var b strings.Builder
	tracing.Render(&b, pick)
	return strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
}

// hostLines renders the eBPF and NVML facts of the last second.
func hostLines(sc *sidecar.Sidecar) []string {
	b, g, bpfOn, gpuOn := sc.HostWindow(time.Second)
	var lines []string
	switch {
	case !bpfOn:
		lines = append(lines, "scheduler/CUDA probes: disabled (no privilege to load eBPF, or no BTF)")
	default:
		line := "scheduler:"
		if b.Sched != nil {
			mean := 0.0
			if b.Sched.RunqueueWaits > 0 {
				mean = msOf(b.Sched.RunqueueDelay) / b.Sched.RunqueueWaits
			}
			line += fmt.Sprintf(" run-queue delay %.1fms in all, %.3fms per wait (p99 %.3fms, %.0f waits), off-CPU %.1fms summed over its threads",
				msOf(b.Sched.RunqueueDelay), mean, msOf(b.Sched.RunqueueP99), b.Sched.RunqueueWaits, msOf(b.Sched.OffCPU))
		} else {
			line += " (no sample yet)"
		}
		if b.Cgroup != nil {
			line += fmt.Sprintf(", CFS throttled %.1fms", msOf(b.Cgroup.Throttled))
		} else {
			line += ", throttling: no CPU limit on this cgroup"
		}
		lines = append(lines, line)
		if b.CUDA != nil {
			lines = append(lines, fmt.Sprintf("CUDA: %.0f launches, %.0f B copied, sync wait %.1fms", b.CUDA.Launches, b.CUDA.H2DBytes+b.CUDA.D2HBytes, msOf(b.CUDA.SyncWait)))
		} else {
			lines = append(lines, "CUDA: absent (the upstream maps no libcudart/libcuda)")
		}
	}
	if gpuOn && len(g.Devices) > 0 {
		for _, d := range g.Devices {
			if d.SMUtil != nil {
				lines = append(lines, fmt.Sprintf("GPU %d: SM %.0f%%", d.Index, d.SMUtil.Mean*100))
			}
		}
	} else {
		lines = append(lines, "GPU: absent (no NVIDIA driver on this machine)")
	}
	return lines
}

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// modelVersion names an alert's model as model:version when the version is
// known: one model served under two versions (or by two APIs, one of which
// has no version) has an alert, and a window row, for each.
func modelVersion(labels map[string]string) string {
	if v := labels["version"]; v != "" {
		return labels["model"] + ":" + v
	}
	return labels["model"]
}

// demoSLA is the demo's --sla: a duration for mnist-mlp, or model=duration
// pairs as proxy's --sla takes them. Both read INFERWATCH_SLA, which README
// sets in proxy's form; read as a plain duration, that stopped the demo
// from starting.
type demoSLA struct {
	given bool
	m     map[string]time.Duration
}

func (s *demoSLA) String() string {
	if s == nil {
		return ""
	}
	return fmt.Sprint(s.m)
}

// Set takes one duration or model=duration; the first given replaces the
// default.
func (s *demoSLA) Set(v string) error {
	if !s.given {
		s.given, s.m = true, map[string]time.Duration{}
	}
	model, d, pair := strings.Cut(v, "=")
	if !pair {
		model, d = loadgen.ModelMLP, v
	}
	dur, err := time.ParseDuration(d)
	if err != nil || dur <= 0 || model == "" {
		return fmt.Errorf("want a positive duration or model=duration, got %q", v)
	}
	s.m[model] = dur
	return nil
}

// Repeatable: INFERWATCH_SLA holds the pairs comma-separated.
func (s *demoSLA) Repeatable() {}
