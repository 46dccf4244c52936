package alerting

import (
	"fmt"

	"github.com/VictoriaMetrics/metrics"
	"github.com/inferwatch/inferwatch/windowstats"
)

// gauges are one model's exported statistics, as of its latest closed
// window, and whether each rule fires.
type gauges struct {
	ema, stddev, slope *metrics.Gauge
	quantiles          [len(windowstats.Quantiles)]*metrics.Gauge
	firing             [numRules]*metrics.Gauge
}

var quantileLabels = [len(windowstats.Quantiles)]string{"0.5", "0.9", "0.99", "0.999"}

// newGauges registers a model's gauges. Model and version are sanitised
// label values already (windowstats names them so), hence safe to quote.
func newGauges(set *metrics.Set, k modelKey) *gauges {
	mv := fmt.Sprintf("model=%q,version=%q", k.model, k.version)
	g := &gauges{
		ema:    set.GetOrCreateGauge("inferwatch_latency_ema_seconds{"+mv+"}", nil),
		stddev: set.GetOrCreateGauge("inferwatch_latency_stddev_seconds{"+mv+"}", nil),
		slope:  set.GetOrCreateGauge("inferwatch_throughput_latency_slope{"+mv+"}", nil),
	}
	for i, q := range quantileLabels {
		g.quantiles[i] = set.GetOrCreateGauge(fmt.Sprintf("inferwatch_latency_quantile_seconds{%s,quantile=%q}", mv, q), nil)
	}
	for i, r := range ruleNames {
		g.firing[i] = set.GetOrCreateGauge(fmt.Sprintf("inferwatch_alert_firing{alertname=%q,%s}", r, mv), nil)
	}
	return g
}

// exportSLA publishes the SLA and TTFT SLO a model is held to, per model
// (every version shares them), so that the fleet rules in deploy/rules
// judge against the same numbers as the engine: a model configured with
// its own SLA from the start, one under the defaults' SLA from its first
// window. A zero SLA or SLO is no series (no rule applies).
func exportSLA(set *metrics.Set, model string, th Thresholds) {
	if model == "" {
		return
	}
	for _, s := range []struct {
		name string
		d    float64
	}{{"inferwatch_model_sla_seconds", th.SLA.Seconds()}, {"inferwatch_model_ttft_slo_seconds", th.TTFTSLO.Seconds()}} {
		if s.d > 0 {
			set.GetOrCreateGauge(fmt.Sprintf("%s{model=%q}", s.name, model), func() float64 { return s.d })
		}
	}
}

// setGauges publishes the latest closed window of v. Held: e.mu.
func (e *Engine) setGauges(ms *modelState, v *windowstats.ModelView) {
	g := ms.g
	if g == nil {
		return
	}
	for i := range ms.rules.machines {
		f := 0.0
		if ms.rules.machines[i].state == StateFiring {
			f = 1
		}
		g.firing[i].Set(f)
	}
	if len(v.Closed) == 0 {
		return
	}
	w := &v.Previous
	g.ema.Set(w.EMA)
	if w.Count == 0 {
		return // an idle window has no spread nor quantiles: keep the last ones
	}
	g.stddev.Set(w.StdDev)
	for i, q := range [...]float64{w.P50, w.P90, w.P99, w.P999} {
		g.quantiles[i].Set(q)
	}
	if w.Fit.OK {
		g.slope.Set(w.Fit.Slope)
	}
}
