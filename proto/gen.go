// Package proto holds the wire contracts inferwatch recognises: the KServe v2 /
// Open Inference Protocol gRPC service (which Triton also serves) with the
// parts of Triton's statistics extension the sidecar polls, and the gRPC
// APIs of TensorFlow Serving and TorchServe. The generated Go code in
// proto/inference, proto/tfserving and proto/torchserve is committed;
// regenerate it with `go generate ./proto` (needs Debian's protobuf-compiler
// and the Go plugins pinned in scripts/check-generated.sh).
package proto

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative inference/grpc_service.proto tfserving/tfserving.proto torchserve/torchserve.proto
