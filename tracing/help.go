package tracing

import "maps"

// help is the # HELP text of each family the export queue registers.
var help = map[string]string{
	"inferwatch_traces_exported_total":      "Traces the tracing backend accepted.",
	"inferwatch_trace_spans_exported_total": "Spans the tracing backend accepted.",
	"inferwatch_traces_dropped_total":       "Kept traces lost on the way to the backend, by reason (queue_full, export_failed, shutdown).",
	"inferwatch_traces_export_queue":        "Traces waiting for export now.",
}

// MetricHelp returns the # HELP text of every family this package
// registers, for metricset.Set.AddHelp.
func MetricHelp() map[string]string { return maps.Clone(help) }
