// Package interceptors is the in-process front of the call record: a gRPC
// stats.Handler and an HTTP middleware that fill a record.Call for every call
// a Go server (or client) handles, without a proxy hop, and hand it to the
// same record.Pipeline the proxy uses, so every sink works unchanged.
//
// In-process, the phases mean: ingress — call began until the request
// message was received and decoded; decode — grpc-go's own unmarshal of it
// (InPayload's receive-to-decode time is not exposed, so for gRPC decode is
// the sidecar-independent part grpc-go reports: none; HTTP: none); upstream
// — request received until the first response byte was sent (the handler's
// work); transfer — first to last response byte written; egress — 0.
package interceptors
