// Package proxy is the data plane: listeners, the transparent gRPC and HTTP
// stream proxy in front of one upstream, and the taps that fill a call record
// from what passes through without delaying it.
//
// Both protocols share one design, an HTTP/2 (and HTTP/1.1) stream proxy on
// net/http: request and response bodies are copied chunk by chunk as they
// arrive, so memory per call is bounded by the copy buffer and HTTP/2 flow
// control whatever the tensor size, and gRPC framing is read by a scanner fed
// the same chunks (inferapi.GRPCScanner) instead of being re-framed. Why this
// design over a grpc-go server/client pair is measured in docs/architecture.md.
//
// One file, one job: handler.go serves a call, body.go taps the bodies,
// headers.go handles hop-by-hop headers and trailers, upgrade.go relays
// protocol switches (WebSocket) as byte tunnels, grpcstatus.go speaks
// gRPC status, transport.go dials upstreams, server.go runs listeners and
// drains them, tlsfiles.go reloads certificates, tcpinfo.go reads kernel
// RTTs, readiness.go probes upstreams, decode.go prices serialization.
package proxy
