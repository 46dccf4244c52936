package alerting

import "maps"

// help is the # HELP text of each family the engine registers.
var help = map[string]string{
	"inferwatch_latency_ema_seconds":      "Exponential moving average of the mean call duration (time constant 1 minute), as of the latest closed window.",
	"inferwatch_latency_quantile_seconds": "P50/P90/P99/P99.9 call duration of the latest closed window, from the sketch (1% relative error).",
	"inferwatch_latency_stddev_seconds":   "Standard deviation (Welford) of the call duration in the latest closed window.",
	"inferwatch_throughput_latency_slope": "Least-squares slope of mean latency against QPS over the recent windows, in seconds per call/s.",
	"inferwatch_alert_firing":             "1 while the rule fires for the model, else 0.",
}

// MetricHelp returns the # HELP text of every family this package
// registers, for metricset.Set.AddHelp.
func MetricHelp() map[string]string { return maps.Clone(help) }
