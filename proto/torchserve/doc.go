// Package torchserve is the generated Go of torchserve.proto: TorchServe's
// gRPC inference API (InferenceAPIsService), which inferwatch recognises.
// The sidecar's decoders read these field numbers on the wire and never
// import this package; tests use the types. A program that
// links TorchServe's own Go protos must not import it too: both register the
// same message names. Regenerate with `go generate ./proto`.
package torchserve
