package gpu

import (
	"fmt"
	"maps"
	"strconv"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// maxXIDLabels bounds the distinct xid label values per device; XIDs are
// small integers, but a broken driver must not grow the series forever.
const maxXIDLabels = 32

// help is the # HELP text of each family; MetricHelp hands it out.
var help = map[string]string{
	"inferwatch_gpu_available":                 "1 when NVML answered at start and GPU facts are collected, else 0.",
	"inferwatch_gpu_utilization_ratio":         "Device utilisation over the last sample period: kind=sm is the fraction of time a kernel ran, kind=memory the fraction of time device memory was read or written.",
	"inferwatch_gpu_memory_used_bytes":         "Device memory in use.",
	"inferwatch_gpu_memory_total_bytes":        "Device memory installed.",
	"inferwatch_gpu_clock_hz":                  "Current SM (kind=sm) and memory (kind=memory) clock.",
	"inferwatch_gpu_power_watts":               "Board power draw.",
	"inferwatch_gpu_temperature_celsius":       "GPU core temperature.",
	"inferwatch_gpu_throttle_reasons":          "1 when the clocks event (throttle) reason is active at the last sample, else 0.",
	"inferwatch_gpu_xid_errors_total":          "XID critical error events the driver delivered, by XID.",
	"inferwatch_gpu_ecc_error_events_total":    "ECC error events the driver delivered, by kind (single_bit, double_bit).",
	"inferwatch_gpu_process_utilization_ratio": "A process's utilisation of the device (NVML per-process samples) for the top processes, upstream first.",
	"inferwatch_gpu_process_memory_bytes":      "Device memory used by a process, for the top processes, upstream first.",
	"inferwatch_gpu_group_utilization_ratio":   "Summed utilisation of all the upstream's processes (upstream=true) or all other processes (upstream=false) on the device.",
	"inferwatch_gpu_sample_errors_total":       "Failed NVML reads by reading and NVML error; not_supported is counted once per device and reading, which is then skipped.",
	"inferwatch_gpu_sample_duration_seconds":   "How long the last sampling tick took, all devices together.",
}

// MetricHelp returns the # HELP text of every inferwatch_gpu_* family, for
// a writer that fills in help texts (metricset.WritePrometheus's table).
func MetricHelp() map[string]string {
	return maps.Clone(help)
}

// exporter turns samples into series. Gauges exist only while their reading
// does: a reading that disappears (unsupported, GPU lost, process gone,
// dropped out of the top K) is unregistered, so a scrape never shows a stale
// or invented value. Only the sampler goroutine calls update.
type exporter struct {
	set        *metrics.Set
	topK       int
	live, next map[string]*metrics.Gauge
	xids       map[int]map[uint64]bool // per NVML index: xid label values admitted
}

func newExporter(set *metrics.Set, topK int) *exporter {
	if set == nil {
		return nil
	}
	return &exporter{set: set, topK: topK, live: map[string]*metrics.Gauge{}, next: map[string]*metrics.Gauge{}, xids: map[int]map[uint64]bool{}}
}

func (e *exporter) setAvailable(ok bool) {
	if e == nil {
		return
	}
	v := 0.0
	if ok {
		v = 1
	}
	e.set.GetOrCreateGauge("inferwatch_gpu_available", nil).Set(v)
}

func (e *exporter) gauge(name string, v float64) {
	g := e.live[name]
	if g == nil {
		g = e.set.GetOrCreateGauge(name, nil)
	}
	g.Set(v)
	e.next[name] = g
}

func boolLabel(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

func (e *exporter) update(devs []DeviceInfo, samples []Sample, errs []readError, dur time.Duration) {
	if e == nil {
		return
	}
	for i := range samples {
		s, d := &samples[i], devs[i]
		gpu := strconv.Itoa(d.Index)
		dev := fmt.Sprintf(`gpu=%q,uuid=%q`, gpu, d.UUID)
		if s.SMUtil != nil {
			e.gauge(`inferwatch_gpu_utilization_ratio{`+dev+`,kind="sm"}`, *s.SMUtil)
		}
		if s.MemUtil != nil {
			e.gauge(`inferwatch_gpu_utilization_ratio{`+dev+`,kind="memory"}`, *s.MemUtil)
		}
		if s.MemoryUsed != nil {
			e.gauge(`inferwatch_gpu_memory_used_bytes{`+dev+`}`, float64(*s.MemoryUsed))
		}
		if s.MemoryTotal != nil {
			e.gauge(`inferwatch_gpu_memory_total_bytes{`+dev+`}`, float64(*s.MemoryTotal))
		}
		if s.SMClockHz != nil {
			e.gauge(`inferwatch_gpu_clock_hz{`+dev+`,kind="sm"}`, *s.SMClockHz)
		}
		if s.MemClockHz != nil {
			e.gauge(`inferwatch_gpu_clock_hz{`+dev+`,kind="memory"}`, *s.MemClockHz)
		}
		if s.PowerWatts != nil {
			e.gauge(`inferwatch_gpu_power_watts{`+dev+`}`, *s.PowerWatts)
		}
		if s.TemperatureC != nil {
			e.gauge(`inferwatch_gpu_temperature_celsius{`+dev+`}`, *s.TemperatureC)
		}
		if s.Throttle != nil {
			active := map[string]bool{}
			for _, r := range ReasonNames(*s.Throttle) {
				active[r] = true
			}
			for _, r := range ThrottleReasons() {
				v := 0.0
				if active[r] {
					v = 1
				}
				e.gauge(`inferwatch_gpu_throttle_reasons{`+dev+`,reason="`+r+`"}`, v)
			}
		}
		for _, x := range s.XIDs {
			e.set.GetOrCreateCounter(`inferwatch_gpu_xid_errors_total{` + dev + `,xid="` + e.xidLabel(d.Index, x) + `"}`).Inc()
		}
		if s.ECCSingle > 0 {
			e.set.GetOrCreateCounter(`inferwatch_gpu_ecc_error_events_total{` + dev + `,kind="single_bit"}`).AddInt64(int64(s.ECCSingle))
		}
		if s.ECCDouble > 0 {
			e.set.GetOrCreateCounter(`inferwatch_gpu_ecc_error_events_total{` + dev + `,kind="double_bit"}`).AddInt64(int64(s.ECCDouble))
		}

		// s.Processes is sorted upstream first, busiest first.
		var sum [2][2]float64 // [upstream][sm, memory]
		for j := range s.Processes {
			p := &s.Processes[j]
			up := 0
			if p.Upstream {
				up = 1
			}
			if p.SMUtil != nil {
				sum[up][0] += *p.SMUtil
			}
			if p.MemUtil != nil {
				sum[up][1] += *p.MemUtil
			}
			if j >= e.topK {
				continue
			}
			proc := fmt.Sprintf(`gpu=%q,pid="%d",upstream="%s"`, gpu, p.PID, boolLabel(p.Upstream))
			if p.SMUtil != nil {
				e.gauge(`inferwatch_gpu_process_utilization_ratio{`+proc+`,kind="sm"}`, *p.SMUtil)
			}
			if p.MemUtil != nil {
				e.gauge(`inferwatch_gpu_process_utilization_ratio{`+proc+`,kind="memory"}`, *p.MemUtil)
			}
			if p.MemoryUsed != nil {
				e.gauge(`inferwatch_gpu_process_memory_bytes{`+proc+`}`, float64(*p.MemoryUsed))
			}
		}
		if s.ProcUtilOK {
			for up := range sum {
				g := `inferwatch_gpu_group_utilization_ratio{` + dev + `,upstream="` + boolLabel(up == 1) + `"`
				e.gauge(g+`,kind="sm"}`, sum[up][0])
				e.gauge(g+`,kind="memory"}`, sum[up][1])
			}
		}
	}
	for _, re := range errs {
		gpu := "unknown"
		if re.gpu >= 0 {
			gpu = strconv.Itoa(re.gpu)
		}
		e.set.GetOrCreateCounter(fmt.Sprintf(`inferwatch_gpu_sample_errors_total{gpu=%q,call=%q,error=%q}`, gpu, re.call, re.code)).Inc()
	}
	e.gauge("inferwatch_gpu_sample_duration_seconds", dur.Seconds())

	for name := range e.live {
		if _, ok := e.next[name]; !ok {
			e.set.UnregisterMetric(name)
		}
	}
	e.live, e.next = e.next, e.live
	clear(e.next)
}

// xidLabel admits up to maxXIDLabels distinct XIDs per device, then "other".
func (e *exporter) xidLabel(gpu int, xid uint64) string {
	seen := e.xids[gpu]
	if seen == nil {
		seen = map[uint64]bool{}
		e.xids[gpu] = seen
	}
	if !seen[xid] {
		if len(seen) >= maxXIDLabels {
			return "other"
		}
		seen[xid] = true
	}
	return strconv.FormatUint(xid, 10)
}
