// Package proto holds the wire contracts inferwatch recognises: the KServe v2 /
// Open Inference Protocol gRPC service (which Triton also serves) and the parts
// of Triton's statistics extension the sidecar polls. The generated Go code in
// proto/inference is committed; regenerate it with `go generate ./proto`
// (needs Debian's protobuf-compiler and the Go plugins pinned in tools/).
package proto

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative inference/grpc_service.proto
