package sampling

import "maps"

// help is the # HELP text of each inferwatch_traces_* family the sampler
// registers.
var help = map[string]string{
	"inferwatch_traces_considered_total":            "Head sampling decisions made, one per call.",
	"inferwatch_traces_head_kept_total":             "Head decisions that sampled the call (new roots and sampled parents).",
	"inferwatch_traces_tail_kept_total":             "Traces kept at the call's end whatever the head decided, by reason (error, slo, p99).",
	"inferwatch_traces_tail_budget_exhausted_total": "Calls that qualified for a tail keep but found the tail budget empty.",
	"inferwatch_traces_probability":                 "Current head sampling probability of a route and model, exactly what the tracestate th encodes.",
}

// MetricHelp returns the # HELP text of every family this package
// registers, for metricset.Set.AddHelp.
func MetricHelp() map[string]string { return maps.Clone(help) }
