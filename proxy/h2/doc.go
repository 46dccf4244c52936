// Package h2 is the frame-level HTTP/2 data plane: it forwards a client's
// HTTP/2 (h2c or TLS) connection to an upstream HTTP/2 connection frame by
// frame, with stream IDs mapped, header blocks decoded once and re-encoded,
// DATA payloads written straight from the read buffer of one connection to
// the write buffer of the other, and writes coalesced: each side's buffered
// writer is flushed only when the reader that filled it has nothing more
// pending. Flow control is honoured per hop and passed back end to end: a
// client gets its window back only once its bytes were written upstream, so
// the sidecar never holds more of a message than the windows it advertised.
//
// The package knows HTTP/2 (RFC 9113) and just enough gRPC to answer a
// stream the upstream cannot (UNAVAILABLE, RESOURCE_EXHAUSTED); what a call
// means is the Observer's business (package proxy measures calls with it).
//
// One file, one job: server.go accepts and drains connections, conn.go reads
// the client side, upstream.go dials and reads the upstream side, stream.go
// holds a stream's state and moves its DATA under flow control, fields.go
// checks and encodes header blocks, observer.go is the measuring hook.
package h2
