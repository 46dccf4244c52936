package h2

import (
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Observer is told of every stream a Server forwards. Its methods run on the
// forwarding goroutines with the connection's lock held, so they must be
// quick, must not block and must not keep the slices they are given.
type Observer interface {
	// Open is called when a client opens a stream, with its request header
	// fields (pseudo-header fields first). It returns the stream's Watcher
	// and the fields to send upstream: fields itself when nothing changes.
	Open(start time.Time, fields []hpack.HeaderField) (Watcher, []hpack.HeaderField)
}

// Watcher follows one stream. Offsets are from the start Open was given.
type Watcher interface {
	// RequestData sees each DATA payload from the client, in order, before
	// it is forwarded. An error refuses the rest of the stream: the upstream
	// stream is reset and the client gets RESOURCE_EXHAUSTED (gRPC) or 413.
	RequestData(p []byte) error
	// ResponseHeaders sees the upstream's response header fields, or its
	// trailers (trailers true), as they arrive.
	ResponseHeaders(fields []hpack.HeaderField, trailers bool)
	// ResponseData sees each DATA payload from the upstream, in order.
	ResponseData(p []byte)
	// Done is called once, when the stream ended on the client's side.
	Done(e *Events)
}

// Who reset a stream.
const (
	ResetNone = iota
	ResetByClient
	ResetByUpstream
)

// Events are a stream's frame events, as offsets from its start.
type Events struct {
	RequestEnd    time.Duration // client's END_STREAM read
	UpstreamStart time.Duration // request HEADERS written upstream
	UpstreamSent  time.Duration // END_STREAM written upstream
	FirstByte     time.Duration // upstream's response HEADERS read
	ResponseEnd   time.Duration // upstream's END_STREAM read
	End           time.Duration // the stream's last frame handed to the client's connection (buffered; the flush follows once the frames read with it are handled)
	Egress        time.Duration // time response frames were held waiting for the client's windows

	RequestBytes  int64 // DATA payload bytes from the client (padding excluded)
	ResponseBytes int64 // DATA payload bytes from the upstream

	Reset     int           // ResetNone, ResetByClient or ResetByUpstream
	ResetCode http2.ErrCode // the RST_STREAM code when reset

	// Unavailable is set when the sidecar answered for an upstream it could
	// not reach or lost; Refused when RequestData refused the stream.
	Unavailable error
	Refused     error
	// Status is the :status sent to the client (0: none).
	Status int
	// ClientRTT is the client connection's kernel RTT (Options.ConnRTT).
	ClientRTT time.Duration
}
