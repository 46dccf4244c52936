package h2_test

import (
	"net"
	"testing"

	"golang.org/x/net/http2"
)

// until reads frames up to the acknowledgement of a PING it sends now (the
// forwarder handles a connection's frames in order), failing on a GOAWAY;
// it returns the frames read before.
func (c *rawClient) until() []http2.Frame {
	c.t.Helper()
	c.fr.WritePing(false, [8]byte{'s', 'y', 'n', 'c'})
	var got []http2.Frame
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			c.t.Fatalf("before the PING's ack: %v", err)
		}
		switch f := f.(type) {
		case *http2.GoAwayFrame:
			c.t.Fatalf("GOAWAY %v: the connection failed, every other call on it with it", f.ErrCode)
		case *http2.PingFrame:
			if f.IsAck() && string(f.Data[:4]) == "sync" {
				return got
			}
		case *http2.RSTStreamFrame:
			got = append(got, &http2.RSTStreamFrame{FrameHeader: f.FrameHeader, ErrCode: f.ErrCode})
		default:
			got = append(got, f)
		}
	}
}

// resets counts the RST_STREAM frames on stream id among fs.
func resets(fs []http2.Frame, id uint32) int {
	n := 0
	for _, f := range fs {
		if r, ok := f.(*http2.RSTStreamFrame); ok && r.StreamID == id {
			n++
		}
	}
	return n
}

// TestSelfDependentHeadersResetOnlyTheirStream: HEADERS whose priority
// depends on their own stream are a stream error (RFC 9113 §5.3.1), which
// still opened the stream: DATA the client sent behind them is for a
// closed stream, not an idle one answered with GOAWAY.
func TestSelfDependentHeadersResetOnlyTheirStream(t *testing.T) {
	addr, _ := startForwarder(t, startUpstream(t, 0), nopObserver{})
	c := dialRaw(t, addr)
	c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.block(), EndHeaders: true,
		Priority: http2.PriorityParam{StreamDep: 1, Weight: 15}})
	c.fr.WriteData(1, true, []byte("body"))
	got := c.until()
	if resets(got, 1) == 0 {
		t.Fatalf("stream 1 was not reset: %v", got)
	}
}

// TestLateDataOnResetStreamIgnored: DATA the client sent before it read the
// sidecar's RST_STREAM must be ignored (RFC 9113 §5.1), not answered with
// one more RST_STREAM per frame.
func TestLateDataOnResetStreamIgnored(t *testing.T) {
	addr, _ := startForwarder(t, startUpstream(t, 0), nopObserver{})
	c := dialRaw(t, addr)
	c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.block("X-Bad", "1"), EndHeaders: true})
	for range 5 {
		c.fr.WriteData(1, false, []byte("body"))
	}
	c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: c.block("content-length", "1"), EndHeaders: true})
	for range 5 {
		c.fr.WriteData(3, false, []byte("too long"))
	}
	got := c.until()
	if n, m := resets(got, 1), resets(got, 3); n != 1 || m != 1 {
		t.Fatalf("%d RST_STREAM on stream 1 and %d on stream 3, want one each (frames after the reset ignored)", n, m)
	}
}

// TestLateTrailersOnResetStreamIgnored: trailers the client sent before it
// read the sidecar's RST_STREAM must be ignored (RFC 9113 §5.1), not
// answered with GOAWAY, which fails every other call on the connection.
func TestLateTrailersOnResetStreamIgnored(t *testing.T) {
	addr, _ := startForwarder(t, startUpstream(t, 0), nopObserver{})
	c := dialRaw(t, addr)
	c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.block("content-length", "1"), EndHeaders: true})
	c.fr.WriteData(1, false, []byte("too long"))
	c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.fields("x-trailer", "v"), EndStream: true, EndHeaders: true})
	c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: c.block(), EndStream: true, EndHeaders: true})
	for {
		for _, f := range c.until() {
			if h, ok := f.(*http2.MetaHeadersFrame); ok && h.StreamID == 3 {
				return
			}
		}
	}
}

// TestLateTrailersAfterManyResetsNotConnectionError: trailers the client
// sent before it read the RST_STREAM of the oldest of more streams than the
// sidecar remembers resetting (a burst of 300 malformed requests; the
// client may have 1000 open) are for a closed stream: at most a stream
// error (RFC 9113 §5.1), not GOAWAY failing every call on the connection.
func TestLateTrailersAfterManyResetsNotConnectionError(t *testing.T) {
	addr, _ := startForwarder(t, startUpstream(t, 0), nopObserver{})
	c := dialRaw(t, addr)
	const n = 300
	for i := uint32(0); i < n; i++ {
		c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1 + 2*i, BlockFragment: c.block("X-Bad", "1"), EndHeaders: true})
	}
	if got := c.until(); resets(got, 1) != 1 || resets(got, 2*n-1) != 1 {
		t.Fatalf("the malformed requests were not each reset: %d frames", len(got))
	}
	c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.fields("x-trailer", "v"), EndStream: true, EndHeaders: true})
	c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 2*n + 1, BlockFragment: c.block(), EndStream: true, EndHeaders: true})
	for {
		for _, f := range c.until() { // fails on GOAWAY
			if h, ok := f.(*http2.MetaHeadersFrame); ok && h.StreamID == 2*n+1 {
				return
			}
		}
	}
}

// TestHeadersPaddingTooLongFailsConnection: HEADERS whose padding is longer
// than their payload are a connection error (RFC 9113 §6.2). The Framer
// calls them a stream error and skips the block undecoded, so answering
// with RST_STREAM alone left HPACK out of step: the next request's fields
// could be decoded wrong and forwarded altered.
func TestHeadersPaddingTooLongFailsConnection(t *testing.T) {
	addr, _ := startForwarder(t, startUpstream(t, 0), nopObserver{})
	c := dialRaw(t, addr)
	block := c.block("x-indexed", "v") // enters the dynamic table
	c.fr.WriteRawFrame(http2.FrameHeaders, http2.FlagHeadersPadded|http2.FlagHeadersEndHeaders, 1, append([]byte{byte(len(block) + 1)}, block...))
	c.fr.WritePing(false, [8]byte{'s', 'y', 'n', 'c'})
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			t.Fatalf("before a GOAWAY: %v", err)
		}
		switch f := f.(type) {
		case *http2.GoAwayFrame:
			if f.ErrCode != http2.ErrCodeProtocol {
				t.Fatalf("GOAWAY %v, want PROTOCOL_ERROR", f.ErrCode)
			}
			return
		case *http2.PingFrame:
			if f.IsAck() {
				t.Fatal("the connection went on after HEADERS with padding past their payload")
			}
		}
	}
}

// TestUnreachableUpstreamAnswerEndsStream: a request that ended with its
// HEADERS and could not be forwarded (no upstream) is answered; once both
// sides ended, the stream is closed and no RST_STREAM may follow (RFC 9113
// §5.1): a client counting resets took the answered call for a failed one.
func TestUnreachableUpstreamAnswerEndsStream(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := l.Addr().String()
	l.Close()
	addr, _ := startForwarder(t, gone, nopObserver{})
	c := dialRaw(t, addr)
	c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.block("content-type", "application/grpc"), EndStream: true, EndHeaders: true})
	got := c.until()
	if resets(got, 1) != 0 {
		t.Fatalf("stream 1 reset after its answer: %v", got)
	}
}

// TestZeroWindowUpdateOnIdleStreamIsConnectionError: a WINDOW_UPDATE on a
// stream the client never opened is a connection error (RFC 9113 §5.1,
// idle), whatever its increment; the sidecar answered a zero increment
// with RST_STREAM on that idle stream, which §6.4 forbids it to send.
func TestZeroWindowUpdateOnIdleStreamIsConnectionError(t *testing.T) {
	addr, _ := startForwarder(t, startUpstream(t, 0), nopObserver{})
	c := dialRaw(t, addr)
	c.fr.WriteRawFrame(http2.FrameWindowUpdate, 0, 5, []byte{0, 0, 0, 0})
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			t.Fatalf("connection ended without GOAWAY: %v", err)
		}
		switch f := f.(type) {
		case *http2.RSTStreamFrame:
			t.Fatalf("RST_STREAM %v on idle stream %d", f.ErrCode, f.StreamID)
		case *http2.GoAwayFrame:
			if f.ErrCode != http2.ErrCodeProtocol {
				t.Fatalf("GOAWAY %v, want PROTOCOL_ERROR", f.ErrCode)
			}
			return
		}
	}
}
