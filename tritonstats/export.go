package tritonstats

import (
	"fmt"

	"github.com/VictoriaMetrics/metrics"

	"github.com/inferwatch/inferwatch/metricset"
)

// modelMetrics are the exported counters of one (model, version) label pair.
type modelMetrics struct {
	seconds    [numStages]*metrics.FloatCounter
	counts     [numStages]*metrics.Counter
	inferences *metrics.Counter
	executions *metrics.Counter
}

// exporter owns the per-model counters: label values are sanitised like the
// sidecar's own, and at most max pairs get their own series, the rest
// sharing model="other",version="other". Only the poll goroutine uses it.
type exporter struct {
	set    *metrics.Set
	max    int
	models map[modelKey]*modelMetrics // keyed by label values
}

func newExporter(set *metrics.Set, max int) *exporter {
	return &exporter{set: set, max: max, models: make(map[modelKey]*modelMetrics)}
}

// handles returns the counters for a raw model key, making them on first
// sight so that a series starts at zero and its first increase is visible
// to rate() and increase().
func (e *exporter) handles(k modelKey) *modelMetrics {
	l := modelKey{metricset.SanitizeLabelValue(k.name), metricset.SanitizeLabelValue(k.version)}
	if m := e.models[l]; m != nil {
		return m
	}
	if len(e.models) >= e.max {
		l = modelKey{metricset.Other, metricset.Other}
		if m := e.models[l]; m != nil {
			return m
		}
	}
	m := &modelMetrics{
		inferences: e.set.GetOrCreateCounter(fmt.Sprintf(`inferwatch_triton_inference_count_total{model=%q,version=%q}`, l.name, l.version)),
		executions: e.set.GetOrCreateCounter(fmt.Sprintf(`inferwatch_triton_execution_count_total{model=%q,version=%q}`, l.name, l.version)),
	}
	for i, st := range Stages {
		m.seconds[i] = e.set.GetOrCreateFloatCounter(fmt.Sprintf(`inferwatch_triton_stage_duration_seconds_total{model=%q,version=%q,stage=%q}`, l.name, l.version, st))
		m.counts[i] = e.set.GetOrCreateCounter(fmt.Sprintf(`inferwatch_triton_stage_count_total{model=%q,version=%q,stage=%q}`, l.name, l.version, st))
	}
	e.models[l] = m
	return m
}

func (m *modelMetrics) add(d counters) {
	m.inferences.AddInt64(int64(d.inferences))
	m.executions.AddInt64(int64(d.executions))
	for i, s := range d.stages {
		m.counts[i].AddInt64(int64(s.count))
		m.seconds[i].Add(float64(s.ns) / 1e9)
	}
}
