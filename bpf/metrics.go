package bpf

import (
	"fmt"
	"io"
	"maps"
	"strconv"
	"sync"

	"github.com/VictoriaMetrics/metrics"
)

// help is the # HELP text of each family; MetricHelp hands it out.
var help = map[string]string{
	"inferwatch_bpf_enabled":                    "1 when the eBPF probes loaded, else 0 (no privilege, no BTF, unsupported architecture).",
	"inferwatch_bpf_overhead_ratio":             "Estimated CPU cost of the probes over the last duty-cycle period, as a share of one core: Σ hit rate × calibrated per-hit cost.",
	"inferwatch_bpf_duty_ratio":                 "Fraction of each period a probe group is attached; launch is duty-cycled to keep within the budget, the others are always on.",
	"inferwatch_bpf_dropped_total":              "Work the probes had to drop: sync events (ring buffer full) or allocations (pointer table full).",
	"inferwatch_cuda_launches_total":            "CUDA kernel launches (cudaLaunchKernel*, cuLaunchKernel*) of the upstream, by PID; estimated=true is the part extrapolated while the duty-cycled launch probes were detached.",
	"inferwatch_cuda_memcpy_bytes_total":        "Bytes the upstream asked CUDA to copy, by direction (h2d, d2h, d2d, other).",
	"inferwatch_cuda_sync_seconds":              "Time threads of the upstream spent in one CUDA synchronisation call (stream, device, event, context).",
	"inferwatch_cuda_alloc_outstanding_bytes":   "Device memory the upstream allocated through CUDA while probed and has not freed, by PID: the leak signal.",
	"inferwatch_sched_runqueue_delay_seconds":   "Time a thread of the upstream waited runnable before it got a CPU, per wait.",
	"inferwatch_sched_offcpu_seconds_total":     "Time the upstream's threads spent switched out (blocked or waiting for a CPU), credited when they ran again.",
	"inferwatch_cgroup_throttled_seconds_total": "Time the upstream's cgroups were throttled by their CFS CPU quota (cpu.stat).",
	"inferwatch_oom_kills_total":                "OOM killer victims on the machine; upstream=true for the upstream's own processes.",
}

// MetricHelp returns the # HELP text of every family this package exports,
// for a writer that fills in help texts (metricset.WritePrometheus's table).
func MetricHelp() map[string]string {
	return maps.Clone(help)
}

// histLe are the log2 bucket bounds (in ns, as powers of two) exported as
// le bounds: 1µs to 69s in steps of 4×.
var histLe = []int{10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 34, 36}

// log2Hist is a cumulative histogram of log2 nanosecond buckets with an
// exact sum, written as a Prometheus histogram.
type log2Hist struct {
	counts [nBuckets]uint64
	sumNs  uint64
}

func (h *log2Hist) write(w io.Writer, name string) {
	fmt.Fprintf(w, "# HELP %s\n# TYPE %s histogram\n", name, name)
	var cum, total uint64
	for _, c := range h.counts {
		total += c
	}
	next := 0
	for _, k := range histLe {
		for ; next < k && next < nBuckets; next++ {
			cum += h.counts[next]
		}
		le := strconv.FormatFloat(float64(uint64(1)<<k)/1e9, 'g', -1, 64)
		fmt.Fprintf(w, "%s_bucket{le=%q} %d\n", name, le, cum)
	}
	fmt.Fprintf(w, "%s_bucket{le=\"+Inf\"} %d\n", name, total)
	fmt.Fprintf(w, "%s_sum %s\n", name, strconv.FormatFloat(float64(h.sumNs)/1e9, 'g', -1, 64))
	fmt.Fprintf(w, "%s_count %d\n", name, total)
}

// exporter keeps the metrics. Only the Probes loop updates it; the
// histogram writer runs on the scrape.
type exporter struct {
	set *metrics.Set

	mu        sync.Mutex
	closed    bool
	cuda      bool // CUDA probes loaded: export the CUDA families
	sched     bool
	syncHist  log2Hist
	rqHist    log2Hist
	pidSeries map[int][]string // per-PID series to drop when the PID goes
}

func newExporter(set *metrics.Set) *exporter {
	if set == nil {
		return nil
	}
	e := &exporter{set: set, pidSeries: map[int][]string{}}
	set.RegisterMetricsWriter(e.writeHistograms)
	return e
}

func (e *exporter) writeHistograms(w io.Writer) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	if e.cuda {
		e.syncHist.write(w, "inferwatch_cuda_sync_seconds")
	}
	if e.sched {
		e.rqHist.write(w, "inferwatch_sched_runqueue_delay_seconds")
	}
}

func (e *exporter) start(enabled, cuda, sched bool) {
	if e == nil {
		return
	}
	e.mu.Lock()
	e.cuda, e.sched = cuda, sched
	e.mu.Unlock()
	e.set.GetOrCreateGauge("inferwatch_bpf_enabled", nil).Set(b2f(enabled))
	if !enabled {
		return
	}
	e.set.GetOrCreateGauge("inferwatch_bpf_overhead_ratio", nil)
	for _, d := range dirNames {
		e.set.GetOrCreateCounter(`inferwatch_cuda_memcpy_bytes_total{direction="` + d + `"}`)
	}
	e.set.GetOrCreateFloatCounter("inferwatch_sched_offcpu_seconds_total")
	for _, u := range []string{"true", "false"} {
		e.set.GetOrCreateCounter(`inferwatch_oom_kills_total{upstream="` + u + `"}`)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// cudaSample exports one process's interval.
func (e *exporter) cudaSample(pid int, counted, estimated float64, d cudaTotals, outstanding int64) {
	if e == nil {
		return
	}
	p := strconv.Itoa(pid)
	names := []string{
		`inferwatch_cuda_launches_total{pid="` + p + `",estimated="false"}`,
		`inferwatch_cuda_launches_total{pid="` + p + `",estimated="true"}`,
		`inferwatch_cuda_alloc_outstanding_bytes{pid="` + p + `"}`,
	}
	if _, ok := e.pidSeries[pid]; !ok {
		e.pidSeries[pid] = names
	}
	e.set.GetOrCreateFloatCounter(names[0]).Add(counted)
	e.set.GetOrCreateFloatCounter(names[1]).Add(estimated)
	e.set.GetOrCreateGauge(names[2], nil).Set(float64(outstanding))
	for i, dir := range dirNames {
		e.set.GetOrCreateCounter(`inferwatch_cuda_memcpy_bytes_total{direction="` + dir + `"}`).AddInt64(int64(d.CopyBytes[i]))
	}
	e.mu.Lock()
	for i, c := range d.SyncHist {
		e.syncHist.counts[i] += c
	}
	e.syncHist.sumNs += d.SyncNs
	e.mu.Unlock()
}

// schedSample exports one process's interval.
func (e *exporter) schedSample(d schedTotals) {
	if e == nil {
		return
	}
	e.set.GetOrCreateFloatCounter("inferwatch_sched_offcpu_seconds_total").Add(float64(d.OffCPUNs) / 1e9)
	e.mu.Lock()
	for i, c := range d.RqHist {
		e.rqHist.counts[i] += c
	}
	e.rqHist.sumNs += d.RqNs
	e.mu.Unlock()
}

// forgetPID drops the series of a process that is gone.
func (e *exporter) forgetPID(pid int) {
	if e == nil {
		return
	}
	for _, n := range e.pidSeries[pid] {
		e.set.UnregisterMetric(n)
	}
	delete(e.pidSeries, pid)
}

func (e *exporter) throttled(d cpuStat) {
	if e == nil {
		return
	}
	e.set.GetOrCreateFloatCounter("inferwatch_cgroup_throttled_seconds_total").Add(d.throttledTime.Seconds())
}

func (e *exporter) oomKill(upstream bool) {
	if e == nil {
		return
	}
	e.set.GetOrCreateCounter(`inferwatch_oom_kills_total{upstream="` + strconv.FormatBool(upstream) + `"}`).Inc()
}

func (e *exporter) overhead(o Overhead, cuda, sched, oom bool) {
	if e == nil {
		return
	}
	e.set.GetOrCreateGauge("inferwatch_bpf_overhead_ratio", nil).Set(o.Estimated)
	duty := func(probe string, on bool, v float64) {
		if on {
			e.set.GetOrCreateGauge(`inferwatch_bpf_duty_ratio{probe="`+probe+`"}`, nil).Set(v)
		}
	}
	duty("launch", cuda, o.LaunchDuty)
	for _, p := range []string{"copy", "sync", "alloc"} {
		duty(p, cuda, 1)
	}
	duty("sched", sched, 1)
	duty("oom", oom, 1)
}

// dropped exports the kernel's cumulative drop counters.
func (e *exporter) dropped(syncEvents, allocTable uint64) {
	if e == nil {
		return
	}
	e.set.GetOrCreateCounter(`inferwatch_bpf_dropped_total{what="sync_events"}`).Set(syncEvents)
	e.set.GetOrCreateCounter(`inferwatch_bpf_dropped_total{what="alloc_table"}`).Set(allocTable)
}

func (e *exporter) close() {
	if e == nil {
		return
	}
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	e.set.GetOrCreateGauge("inferwatch_bpf_enabled", nil).Set(0)
}
