// Package tracing turns call records into OpenTelemetry traces.
//
// It has two halves. On the data path, Tracer.Start (the proxy's
// TraceContext hook) reads the client's W3C traceparent/tracestate, or B3,
// asks the sampler for the head decision, fills the record's trace fields and
// rewrites the trace context the upstream receives so that its own spans
// become children of the sidecar's upstream span; when the client sent no
// context the sidecar starts the trace. Off the data path, Tracer.Observe (a
// record.Sink on the pipeline goroutine) keeps the calls that were
// head-sampled or that the sampler's tail rules keep, builds their spans with
// the measured timestamps (Call.Start plus the recorded offsets), hands them
// to a bounded, batching OTLP export queue that drops and counts rather than
// waits, and remembers the last kept traces for the admin API, the /traces
// page and the `inferwatch traces` command (Render, FetchAndRender).
//
// docs/tracing.md describes the spans, their attributes and the settings.
package tracing
