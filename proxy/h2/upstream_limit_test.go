package h2_test

import (
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/inferwatch/inferwatch/proxy/h2"
)

// TestUpstreamLimitCountsOpenStreams: an upstream allowing one stream at a
// time answers stream 1 in full; its response still waits for the client's
// window, but the upstream has closed the stream. A second stream must go
// upstream, not be refused by the sidecar for a limit it is not at.
func TestUpstreamLimitCountsOpenStreams(t *testing.T) {
	upHeaders := make(chan uint32, 4)
	status := hpackBlock(":status", "200")
	up := rawUpstream(t, func(fr *http2.Framer, f http2.Frame, flush func() error) {
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
				flush()
			}
		case *http2.MetaHeadersFrame:
			upHeaders <- f.StreamID
			if f.StreamID == 1 {
				fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: status, EndHeaders: true})
				flush()
				fr.WriteData(1, true, make([]byte, 1000))
				flush()
			}
		}
	}, http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 1})
	addr, _ := startForwarder(t, up, nopObserver{})

	c := dialRaw(t, addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 10}) // stream 1's response waits
	fr := c.fr
	block := c.fields(":method", "GET", ":scheme", "http", ":authority", "x", ":path", "/")
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block, EndStream: true, EndHeaders: true})

	firstData := make(chan struct{})
	resets := make(chan *http2.RSTStreamFrame, 4)
	go func() {
		seen := false
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			switch f := f.(type) {
			case *http2.DataFrame:
				if f.StreamID == 1 && !seen {
					seen = true
					close(firstData)
				}
			case *http2.RSTStreamFrame:
				resets <- f
			}
		}
	}()
	select {
	case <-firstData:
	case <-time.After(5 * time.Second):
		t.Fatal("no response DATA on stream 1")
	}
	if id := <-upHeaders; id != 1 {
		t.Fatalf("upstream saw stream %d first", id)
	}
	// The upstream sent stream 1's END_STREAM before that DATA reached the
	// client: the sidecar forwards its frames in order.
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: block, EndStream: true, EndHeaders: true})
	select {
	case <-upHeaders:
	case f := <-resets:
		t.Fatalf("stream %d reset %v; the upstream had no stream open", f.StreamID, f.ErrCode)
	case <-time.After(5 * time.Second):
		t.Fatal("stream 3 never reached the upstream")
	}
}

// TestOversizedResponseHeadersNotTruncated: a response header block over
// the header list size the sidecar advertised upstream cannot be forwarded
// whole; it must not be forwarded with its tail (here grpc-status) cut off
// as if that were the response, but answered as an upstream failure.
func TestOversizedResponseHeadersNotTruncated(t *testing.T) {
	big := strings.Repeat("b", 2000)
	up := rawUpstream(t, func(fr *http2.Framer, f http2.Frame, flush func() error) {
		if f, ok := f.(*http2.MetaHeadersFrame); ok {
			block := hpackBlock(":status", "200", "content-type", "application/grpc", "x-big", big, "x-big", big, "x-big", big, "grpc-status", "0")
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: f.StreamID, BlockFragment: block, EndStream: true, EndHeaders: true})
			flush()
		}
	})
	addr, _ := startForwarder(t, up, nopObserver{}, func(o *h2.Options) { o.MaxHeaderListSize = 4096 })

	c := dialRaw(t, addr)
	fr := c.fr
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.fields(":method", "POST", ":scheme", "http", ":authority", "x", ":path", "/s/M", "content-type", "application/grpc"), EndStream: true, EndHeaders: true})
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading from the sidecar: %v", err)
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			status := ""
			for _, hf := range f.Fields {
				if hf.Name == "grpc-status" {
					status = hf.Value
				}
			}
			if status != "14" {
				t.Fatalf("client got grpc-status %q (fields %d), want 14 (UNAVAILABLE)", status, len(f.Fields))
			}
			return
		case *http2.RSTStreamFrame:
			t.Fatalf("stream reset %v before any status", f.ErrCode)
		}
	}
}

// TestUpstreamDataBeforeHeadersProtocolError: response DATA before the
// response's HEADERS is a malformed response (RFC 9113 §8.1), a stream
// error of type PROTOCOL_ERROR; the sidecar told the upstream
// FLOW_CONTROL_ERROR, a window it had not overrun, misleading its logs.
func TestUpstreamDataBeforeHeadersProtocolError(t *testing.T) {
	codes := make(chan http2.ErrCode, 1)
	up := rawUpstream(t, func(fr *http2.Framer, f http2.Frame, flush func() error) {
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			fr.WriteData(f.StreamID, false, []byte("early"))
			flush()
		case *http2.RSTStreamFrame:
			codes <- f.ErrCode
		}
	})
	addr, _ := startForwarder(t, up, nopObserver{})
	c := dialRaw(t, addr)
	c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.block("content-type", "application/grpc"), EndStream: true, EndHeaders: true})
	if got := c.response(1); got["grpc-status"] != "14" {
		t.Fatalf("client got %v, want grpc-status 14 (UNAVAILABLE)", got)
	}
	select {
	case code := <-codes:
		if code != http2.ErrCodeProtocol {
			t.Fatalf("upstream stream reset %v, want PROTOCOL_ERROR", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream's stream was not reset")
	}
}

// TestUpstreamZeroWindowUpdateOnIdleStream: a zero WINDOW_UPDATE from the
// upstream on a stream the sidecar never opened is a connection error
// (RFC 9113 §5.1), told with GOAWAY, not RST_STREAM on the idle stream
// (§6.4 forbids it).
func TestUpstreamZeroWindowUpdateOnIdleStream(t *testing.T) {
	got := make(chan http2.Frame, 1)
	up := rawUpstream(t, func(fr *http2.Framer, f http2.Frame, flush func() error) {
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			fr.WriteRawFrame(http2.FrameWindowUpdate, 0, 9, []byte{0, 0, 0, 0})
			flush()
		case *http2.RSTStreamFrame:
			if f.StreamID == 9 {
				got <- f
			}
		case *http2.GoAwayFrame:
			got <- f
		}
	})
	addr, _ := startForwarder(t, up, nopObserver{})
	c := dialRaw(t, addr)
	c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.block(), EndHeaders: true})
	select {
	case f := <-got:
		if g, ok := f.(*http2.GoAwayFrame); !ok || g.ErrCode != http2.ErrCodeProtocol {
			t.Fatalf("upstream got %v, want GOAWAY PROTOCOL_ERROR", f)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream was told nothing")
	}
}

// TestUpstreamOversizedFrame: a frame from the upstream over the frame size
// the sidecar advertised is a connection error FRAME_SIZE_ERROR (RFC 9113
// §4.2), told to the upstream with GOAWAY before the connection closes; the
// sidecar closed it without a word. The client's stream fails as with any
// lost upstream: gRPC UNAVAILABLE, HTTP 502.
func TestUpstreamOversizedFrame(t *testing.T) {
	for _, tc := range []struct {
		name        string
		extra       []string // the request's fields past block's
		field, want string   // in the client's response
	}{
		{"gRPC", []string{"content-type", "application/grpc"}, "grpc-status", "14"},
		{"HTTP", nil, ":status", "502"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := make(chan http2.Frame, 1)
			up := rawUpstream(t, func(fr *http2.Framer, f http2.Frame, flush func() error) {
				switch f := f.(type) {
				case *http2.MetaHeadersFrame:
					fr.WriteRawFrame(http2.FrameData, 0, f.StreamID, make([]byte, 16384+1))
					flush()
				case *http2.GoAwayFrame:
					got <- f
				}
			})
			addr, _ := startForwarder(t, up, nopObserver{})
			c := dialRaw(t, addr)
			c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.block(tc.extra...), EndStream: true, EndHeaders: true})
			if resp := c.response(1); resp[tc.field] != tc.want {
				t.Errorf("client got %v, want %s %s", resp, tc.field, tc.want)
			}
			select {
			case f := <-got:
				if g := f.(*http2.GoAwayFrame); g.ErrCode != http2.ErrCodeFrameSize {
					t.Fatalf("upstream got GOAWAY %v, want FRAME_SIZE_ERROR", g.ErrCode)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the upstream got no GOAWAY")
			}
		})
	}
}
