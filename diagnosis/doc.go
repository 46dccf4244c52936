// Package diagnosis turns what the sidecar already measured into a ranked
// answer to "why did latency move": it is the last stage of the pipeline,
// after window statistics (windowstats/), host facts (gpu/, bpf/ via
// alerting.HostBreakdown) and the alert engine (alerting/), and it is what
// /debug/diagnose serves and `inferwatch diagnose` prints.
//
// Diagnose compares the breaching windows of one model (a time range, or an
// alert's windows) with the baseline windows before them and scores
// candidate causes, each with the numbers behind it and the trace ids of
// example slow calls:
//
//   - where: every phase (ingress, decode, upstream, transfer, egress) and
//     server stage (queue, compute, ...) with its share of the added mean
//     latency; the upstream phase's growth not covered by server stages is
//     the network's (CauseNetwork)
//   - why: cgroup CPU throttling, run-queue delay (a CPU neighbour), GPU
//     neighbours and saturation, OOM kills, memory growth (baseline.Leak,
//     with projected exhaustion), a model version change, load explained by
//     the throughput–latency slope of the baseline windows (not an anomaly)
//     or not, and periodic recurrence of exceedances over the window
//     history (with the period).
//
// Scores are in [0,1]; each cause's scoring is documented at its check and
// in docs/diagnose.md. History keeps the windows per model, bounded, and
// saves to and loads from a file so that a restart keeps them.
//
// The evidence holds figures, model names and versions, phase and stage
// names and trace ids only: no tensor data, no request bodies, no other
// label values; Prompt builds the LLM prompt from the evidence alone.
package diagnosis
