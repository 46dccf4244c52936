// Package sampling makes the trace sampling decisions of one sidecar. It is
// a pure library: the tracing package asks it, at the start of each call,
// whether to record the call's trace (Head) and, at the end of a call the
// head did not keep, whether the finished local trace is worth keeping
// anyway (Tail); it creates no spans and exports nothing.
//
// In the call pipeline:
//
//	request headers ─> tracing: parse traceparent/tracestate
//	                   Head(route/model, trace id, parent) ─> Decision (sampled, probability, tracestate to propagate)
//	... call runs, spans recorded (sampled) or buffered locally (not sampled) ...
//	record.Call done ─> ObserveLatency(model, total)      feeds the local P99
//	                   Tail(key, model, total, failed, headSampled) ─> keep buffered spans? (reason)
//	Run(ctx)          ─> Tick every Interval: recompute per-key probabilities, refill the tail budget
//
// Head sampling is consistent probability sampling as OpenTelemetry
// specifies it (tracestate `ot=th:<hex>`, randomness from the trace id's
// last 7 bytes or `rv`): the decision depends only on the trace's randomness
// and the threshold, so sidecars in a chain with the same probability keep
// the same traces and a backend can weigh each kept span by its adjusted
// count 1/p. The probability per (route, model) follows the observed QPS
// towards TargetPerSecond kept traces per second. An incoming sampled or
// not-sampled decision is honoured (parent-based).
//
// Tail keep records what head sampling misses and users hunt for: calls
// that failed, exceeded their model's SLO or were slower than the model's
// current P99, within a token-bucket budget. Tail-kept traces carry no
// threshold, so backends do not count them as a probability sample; the
// tracing package marks their spans with the attribute TailAttribute.
//
// docs/sampling.md describes the design and how it differs from Jaeger's
// adaptive sampling.
package sampling
