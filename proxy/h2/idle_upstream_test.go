package h2_test

import (
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// TestUpstreamFrameOnIdleStream: a frame from the upstream on a stream the
// sidecar never opened there (an odd ID past the last it opened, or an even
// one: push is off) is a connection error PROTOCOL_ERROR (RFC 9113 §5.1,
// §5.1.1, §6.4), told with GOAWAY, not ignored; the call in flight on that
// connection fails as for any lost upstream.
func TestUpstreamFrameOnIdleStream(t *testing.T) {
	status := hpackBlock(":status", "200")
	for _, tc := range []struct {
		name  string
		write func(fr *http2.Framer, id uint32)
	}{
		{"HEADERS past the last opened", func(fr *http2.Framer, id uint32) {
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id + 2, BlockFragment: status, EndHeaders: true})
		}},
		{"HEADERS on an even stream", func(fr *http2.Framer, _ uint32) {
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 2, BlockFragment: status, EndHeaders: true})
		}},
		{"RST_STREAM past the last opened", func(fr *http2.Framer, id uint32) { fr.WriteRSTStream(id+2, http2.ErrCodeCancel) }},
		{"WINDOW_UPDATE past the last opened", func(fr *http2.Framer, id uint32) { fr.WriteWindowUpdate(id+2, 1000) }},
		{"DATA on an even stream", func(fr *http2.Framer, _ uint32) { fr.WriteData(2, false, []byte("x")) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := make(chan http2.ErrCode, 1)
			up := rawUpstream(t, func(fr *http2.Framer, f http2.Frame, flush func() error) {
				switch f := f.(type) {
				case *http2.MetaHeadersFrame:
					tc.write(fr, f.StreamID)
					flush()
				case *http2.GoAwayFrame:
					got <- f.ErrCode
				}
			})
			addr, _ := startForwarder(t, up, nopObserver{})
			c := dialRaw(t, addr)
			c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.block("content-type", "application/grpc"), EndStream: true, EndHeaders: true})
			if resp := c.response(1); resp["grpc-status"] != "14" {
				t.Errorf("client got %v, want grpc-status 14", resp)
			}
			select {
			case code := <-got:
				if code != http2.ErrCodeProtocol {
					t.Fatalf("upstream got GOAWAY %v, want PROTOCOL_ERROR", code)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the upstream got no GOAWAY")
			}
		})
	}
}
