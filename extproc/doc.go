// Package extproc is the Envoy external-processing front of the call record:
// a gRPC server implementing envoy.service.ext_proc.v3.ExternalProcessor that
// Envoy's ext_proc HTTP filter streams each request's headers, bodies and
// trailers to. It observes and never mutates: in the ordinary (synchronous)
// mode every message gets its answer at once, an empty CommonResponse (in
// the FULL_DUPLEX_STREAMED and GRPC body modes the chunk handed back
// unchanged, as those modes require), before anything is measured; in observability mode
// (asynchronous) nothing is answered.
//
// From the messages it builds the same record.Call the proxy builds: model
// and version from the path or, with a body mode other than NONE, from the
// body with inferapi's decoders under the same capture budget; phases from
// when each message arrived and was answered, the start from Envoy's
// request.time attribute when sent; server stages from Server-Timing in the
// response headers and trailers; the gRPC status from the trailers. Finished
// records go to a record.Pipeline without blocking, so a slow sink never
// delays an answer.
//
// Malformed sequences (a body before its headers, messages after the
// response ended, unknown fields or message kinds, a message over the
// receive limit) are logged (at most one line per kind per second) and
// counted in inferwatch_extproc_errors_total{kind}; the stream is still
// answered, or closed cleanly so that Envoy carries on without us.
package extproc
