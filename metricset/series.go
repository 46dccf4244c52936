package metricset

import (
	"github.com/VictoriaMetrics/metrics"
	"github.com/inferwatch/inferwatch/record"
)

// seriesKey is one (protocol, api, model, version) tuple, as label values.
type seriesKey struct{ protocol, api, model, version string }

// methodCode keys the request counters of a series.
type methodCode struct{ method, code string }

// series holds the metric handles of one seriesKey. Handles that depend on
// what a call carried (phases, stages, batch, errors) are made on first use
// so that, say, a model never batched has no batch histogram. The fields are
// guarded by Set.mu.
type series struct {
	key       seriesKey
	duration  *metrics.PrometheusHistogram
	reqBytes  *metrics.Counter
	respBytes *metrics.Counter

	requests   map[methodCode]*metrics.Counter
	phases     [len(record.Phases)]*metrics.PrometheusHistogram
	stages     map[string]*metrics.PrometheusHistogram
	errors     map[string]*metrics.Counter
	batch      *metrics.PrometheusHistogram
	tensorsIn  *metrics.Counter
	tensorsOut *metrics.Counter
	llm        *llmSeries // made on the first generative call
}

func newSeries(ms *metrics.Set, k seriesKey) *series {
	base := []string{"protocol", k.protocol, "api", k.api, "model", k.model, "version", k.version}
	return &series{
		key:       k,
		duration:  ms.GetOrCreatePrometheusHistogramExt(labelString("inferwatch_request_duration_seconds", base...), durationBuckets),
		reqBytes:  ms.GetOrCreateCounter(labelString("inferwatch_request_bytes_total", base...)),
		respBytes: ms.GetOrCreateCounter(labelString("inferwatch_response_bytes_total", base...)),
		requests:  make(map[methodCode]*metrics.Counter),
		stages:    make(map[string]*metrics.PrometheusHistogram),
		errors:    make(map[string]*metrics.Counter),
	}
}

// The getters below return the handle, making it when create is set (write
// lock held); without create a missing handle is nil.

func (x *series) request(ms *metrics.Set, mc methodCode, create bool) *metrics.Counter {
	c := x.requests[mc]
	if c == nil && create {
		c = ms.GetOrCreateCounter(labelString("inferwatch_requests_total",
			"protocol", x.key.protocol, "api", x.key.api, "method", mc.method,
			"model", x.key.model, "version", x.key.version, "code", mc.code))
		x.requests[mc] = c
	}
	return c
}

func (x *series) phase(ms *metrics.Set, i int, create bool) *metrics.PrometheusHistogram {
	if x.phases[i] == nil && create {
		x.phases[i] = ms.GetOrCreatePrometheusHistogramExt(labelString("inferwatch_phase_duration_seconds",
			"protocol", x.key.protocol, "api", x.key.api, "model", x.key.model,
			"version", x.key.version, "phase", record.Phases[i]), durationBuckets)
	}
	return x.phases[i]
}

func (x *series) stage(ms *metrics.Set, stage string, create bool) *metrics.PrometheusHistogram {
	h := x.stages[stage]
	if h == nil && create {
		h = ms.GetOrCreatePrometheusHistogramExt(labelString("inferwatch_server_stage_duration_seconds",
			"protocol", x.key.protocol, "api", x.key.api, "model", x.key.model,
			"version", x.key.version, "stage", stage), durationBuckets)
		x.stages[stage] = h
	}
	return h
}

// errorCounter is keyed without api: errors are about the transport and the
// payload, not which inference API carried them.
func (x *series) errorCounter(ms *metrics.Set, kind string, create bool) *metrics.Counter {
	c := x.errors[kind]
	if c == nil && create {
		c = ms.GetOrCreateCounter(labelString("inferwatch_errors_total",
			"protocol", x.key.protocol, "model", x.key.model, "version", x.key.version, "kind", kind))
		x.errors[kind] = c
	}
	return c
}

// Batch and tensor metrics are per model only; series of other protocols
// or APIs for the same model share them through GetOrCreate.

func (x *series) batchSize(ms *metrics.Set, create bool) *metrics.PrometheusHistogram {
	if x.batch == nil && create {
		x.batch = ms.GetOrCreatePrometheusHistogramExt(labelString("inferwatch_batch_size",
			"model", x.key.model, "version", x.key.version), batchBuckets)
	}
	return x.batch
}

func (x *series) tensors(ms *metrics.Set, output, create bool) *metrics.Counter {
	p, dir := &x.tensorsIn, "input"
	if output {
		p, dir = &x.tensorsOut, "output"
	}
	if *p == nil && create {
		*p = ms.GetOrCreateCounter(labelString("inferwatch_tensors_total",
			"model", x.key.model, "version", x.key.version, "direction", dir))
	}
	return *p
}
