package tritonstats

// Stages are the statistics extension's duration kinds, in the order the
// protocol declares them; they are the `stage` label values.
var Stages = [numStages]string{
	"success", "fail", "queue", "compute_input", "compute_infer", "compute_output", "cache_hit", "cache_miss",
}

const numStages = 8

// modelKey names one model version as the upstream reports it (raw).
type modelKey struct{ name, version string }

// duration is one cumulative count/nanoseconds pair.
type duration struct{ count, ns uint64 }

// counters are one model's cumulative statistics at one poll.
type counters struct {
	inferences uint64
	executions uint64
	stages     [numStages]duration
}

// sub returns cur−prev. When any counter went backwards the upstream (or the
// model) restarted and cur counts from zero again: all of cur is the delta,
// since mixing old and new baselines across fields would be meaningless.
func sub(cur, prev counters) (d counters, reset bool) {
	if cur.inferences < prev.inferences || cur.executions < prev.executions {
		return cur, true
	}
	for i := range cur.stages {
		if cur.stages[i].count < prev.stages[i].count || cur.stages[i].ns < prev.stages[i].ns {
			return cur, true
		}
	}
	d.inferences = cur.inferences - prev.inferences
	d.executions = cur.executions - prev.executions
	for i := range cur.stages {
		d.stages[i] = duration{cur.stages[i].count - prev.stages[i].count, cur.stages[i].ns - prev.stages[i].ns}
	}
	return d, false
}
