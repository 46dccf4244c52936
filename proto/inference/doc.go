// Package inference is the generated Go of grpc_service.proto: the KServe v2
// / Open Inference Protocol messages and service (which Triton serves too),
// with the parts of Triton's statistics and model repository extensions that
// inferwatch reads. The proxy's decoders read these field numbers on the
// wire; the demo model server, the load generator and the statistics poller
// use the types. Regenerate with `go generate ./proto`.
package inference
