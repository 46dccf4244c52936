package tritonstats

import "maps"

// help is the # HELP text of each inferwatch_triton_* family.
var help = map[string]string{
	"inferwatch_triton_stage_duration_seconds_total": "Time the server spent in a stage (queue, compute_input, compute_infer, compute_output, ...), from its statistics endpoint.",
	"inferwatch_triton_stage_count_total":            "How many times the server counted the stage (per request).",
	"inferwatch_triton_inference_count_total":        "Inferences the server ran; each request of a batch counts.",
	"inferwatch_triton_execution_count_total":        "Model executions (batches); inferences per execution is the achieved batch size.",
	"inferwatch_triton_poll_errors_total":            "Failed polls of the server's statistics (unreachable, error status, malformed answer).",
}

// MetricHelp returns the # HELP text of every family this package
// registers, for metricset.Set.AddHelp.
func MetricHelp() map[string]string { return maps.Clone(help) }
