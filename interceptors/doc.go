// Package interceptors is the in-process front of the call record: grpc-go
// unary and stream interceptors (server and client), a stats.Handler and an
// HTTP middleware that fill a record.Call for every call a Go server (or
// client) handles, without a proxy hop, and hand it to the same kind of
// record.Pipeline the proxy uses, so every sink works unchanged. New builds
// that pipeline — metrics, window statistics and alerts, traces — in one
// call; its Recorder hands out the fronts and the admin endpoints.
//
// In-process, the phases mean: ingress — none for gRPC (the request is
// whole and decoded before an interceptor runs), the handler's reading of
// the body for HTTP; decode — HTTP: the same bounded decode as the proxy,
// off the call's path; gRPC: not priced (grpc-go unmarshals before the
// interceptor); upstream — on a server, the handler's work (request
// received until the response was produced); on a client, the whole call
// as the client sees it (network, both serializations, the server);
// transfer — first to last response byte written (HTTP) or message sent
// (streams); egress — 0.
// There is no network share: the difference between a sidecar's upstream
// phase and a server interceptor's is the network and grpc-go's framing
// (docs/extproc.md).
package interceptors
