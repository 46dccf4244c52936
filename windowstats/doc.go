// Package windowstats is the window-statistics sink of the call pipeline
// (seed §2.2, the metric layer): Stats.Observe takes each finished
// record.Call on the pipeline goroutine and keeps, per (model, version), a
// ring of fixed-length windows (default 10 s) rolled up into a 1-minute view.
// The alerting package evaluates its rules on these windows as they close,
// and the admin API serves Stats.Snapshot as /api/v1/stats.
//
// Per window: count, QPS, mean and standard deviation (Welford), the
// quantiles P50/P90/P99/P99.9 of the total latency (a Sketch), the slowest
// few calls, and per record phase and per server-reported stage a mean and
// the same quantiles. Per closed window also: the EMA of the mean latency and
// a least-squares fit of mean latency against throughput over the last
// History closed windows. The call's time is Start+End, so tests drive
// windows by the records' own timestamps, without sleeping; Roll closes
// windows on the owner's clock when no calls come.
//
// # Quantiles: a DDSketch-style sketch, not HDR
//
// Both bound the relative error. The sketch's buckets grow geometrically
// with ratio γ = (1+α)/(1−α) and report the harmonic mean of a bucket's
// bounds, so every quantile is within α (default 1%) of the exact value of
// the same rank; the tests check that bound on uniform, lognormal, Pareto,
// bimodal and recorded streams. It was chosen over HDR because HDR needs its
// trackable range fixed in advance and spends memory on the whole range,
// while a window of one model covers a narrow band of latencies whose
// position nobody knows beforehand: the sketch stores only the buckets seen
// (a dense array grown on demand and reused across windows, so steady-state
// observation does not allocate), bounded by MaxBuckets with the lowest
// buckets collapsed beyond it, which can only hurt low quantiles. Sketches
// of the same α merge exactly by adding counts, which is how the 1-minute
// view is built from its windows. The index uses the float's exponent and
// mantissa instead of a logarithm (see Sketch), trading 44% more buckets for
// a cheaper Observe.
//
// # EMA of the mean latency
//
// The EMA weighs calls by their age in time, not by their number, so that its
// horizon is the time constant τ (default 1 minute) whatever the call rate.
// At each window close at time t_k, with n_k calls of latency sum s_k:
//
//	d_k = exp(−(t_k − t_{k−1}) / τ)
//	S_k = d_k·S_{k−1} + s_k
//	W_k = d_k·W_{k−1} + n_k
//	EMA_k = S_k / W_k
//
// that is, Σ x_i·e^{−(t−t_i)/τ} / Σ e^{−(t−t_i)/τ} over past calls i, with
// each call's time taken as its window's end. A naive per-call EMA,
// m ← m + a·(x − m), has a horizon of 1/a calls: a few seconds at peak, many
// minutes at night. Here a burst or a lull changes S and W alike and leaves
// the level alone; empty windows decay both and keep the EMA where it was;
// there is no start-up bias towards 0. The open window's EMA is provisional:
// computed as if it closed at its latest call.
//
// # Variance
//
// Welford's recurrence per call and Chan et al.'s pairwise merge across
// windows (see Welford); the standard deviation is the sample one (n−1).
//
// # Latency against throughput
//
// At each close, the closed windows kept (at most History, default 30;
// windows without calls and a series' first, partial window are left out)
// give points (QPS, mean latency), fitted by ordinary least squares from
// centred sums with the slope's standard error (see Fit). The alerting
// package compares the slope with its own earlier values.
//
// # Bounds
//
// At most MaxModels (model, version) pairs, with further ones counted as
// model="other", version="other"; at most MaxStages server stage names per
// model, further ones as "other". The sidecar's own parts (llm_ttft,
// llm_itl) have slots beside them, and a server stage of either name counts
// as "other". Names are sanitised as metric label values, the same way as
// the metricset package does, so the two agree on labels.
package windowstats
