// Package tfserving is the generated Go of tfserving.proto: the parts of
// TensorFlow Serving's gRPC API (PredictionService, ModelService) that
// inferwatch recognises. The sidecar's decoders read these field numbers on
// the wire and never import this package; tests use the types.
// A program that links TensorFlow Serving's own Go protos must not import it
// too: both register the same message names. Regenerate with `go generate
// ./proto`.
package tfserving
