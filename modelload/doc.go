// Package modelload follows the lifecycle of the upstream's models from the
// calls that pass through the sidecar: Triton's repository extension loading
// and unloading them (gRPC RepositoryModelLoad/RepositoryModelUnload, REST
// POST /v2/repository/models/{m}/load|unload), the readiness answers clients
// get (gRPC ModelReady, REST GET /v2/models/{m}/ready; TF Serving's
// GetModelStatus and KServe v1's and TF Serving's REST model status, read
// from the answer's body) and the first
// inference after each load, the cold call. The Tracker is a record.Sink on
// the sidecar's pipeline, so it sees each call once, after it finished, off
// the data path. A Poller beside it reads the upstream's repository index
// (Triton's RepositoryIndex, POST /v2/repository/index), so that loads and
// unloads nobody made through the sidecar change the readiness too.
//
// Exported (docs/metrics.md): inferwatch_model_load_seconds{model,version,kind}
// with kind "initial" or "reload", inferwatch_model_unload_seconds,
// inferwatch_model_load_failures_total, inferwatch_model_cold_request_duration_seconds,
// inferwatch_model_ready and inferwatch_model_ready_transitions_total. Model
// and version labels are the call metrics' own (metricset.Set.ModelLabels):
// sanitised, and capped together with them.
package modelload
