// Package tritonstats reads an upstream's own account of its work: it polls
// the Triton/KServe statistics extension (REST GET /v2/models/stats or gRPC
// ModelStatistics) and exports per-model stage times and counts from the
// deltas between polls.
//
// It stands beside the call pipeline rather than in it: the pipeline measures
// each call from the outside (record.Call → metricset), while the server's
// statistics say where the server's own time went (queue, input, compute,
// output, cache). Both land in the same metrics.Set, so a dashboard can put
// the sidecar's upstream phase next to Triton's queue and compute times. The
// first poll only sets a baseline, so a restarted sidecar does not report the
// upstream's whole history as one burst.
package tritonstats
