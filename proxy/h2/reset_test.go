package h2_test

import (
	"bytes"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// TestNoDataAfterUpstreamResetNoError: an upstream that answered in full
// before the request ended resets the stream with NO_ERROR (RFC 9113 §8.1:
// stop sending the request). While the response still waits for the
// client's window, request DATA the client sends meanwhile must not go to
// the upstream (§6.4: no frames after RST_STREAM), which, as net/http's
// server does, would answer STREAM_CLOSED, and the response must reach
// the client whole.
func TestNoDataAfterUpstreamResetNoError(t *testing.T) {
	late := make(chan uint32, 1)
	status := hpackBlock(":status", "200")
	reset := map[uint32]bool{}
	up := rawUpstream(t, func(fr *http2.Framer, f http2.Frame, flush func() error) {
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: f.StreamID, BlockFragment: status, EndHeaders: true})
			fr.WriteData(f.StreamID, true, bytes.Repeat([]byte{'r'}, 1000))
			fr.WriteRSTStream(f.StreamID, http2.ErrCodeNo)
			flush() // one write: the sidecar reads the RST_STREAM before it flushes the DATA
			reset[f.StreamID] = true
		case *http2.DataFrame:
			if reset[f.StreamID] {
				select {
				case late <- f.StreamID:
				default:
				}
				fr.WriteRSTStream(f.StreamID, http2.ErrCodeStreamClosed)
				flush()
			}
		}
	})
	addr, _ := startForwarder(t, up, nopObserver{})

	c := dialRaw(t, addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 10}) // the response waits
	fr := c.fr
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.block(), EndHeaders: true})

	var got int
	sent := false
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("after %d of 1000 response bytes: %v", got, err)
		}
		switch f := f.(type) {
		case *http2.DataFrame:
			got += len(f.Data())
			if f.StreamEnded() {
				if got != 1000 {
					t.Fatalf("END_STREAM after %d of 1000 response bytes", got)
				}
				select {
				case id := <-late:
					t.Fatalf("upstream got DATA on stream %d after resetting it", id)
				default:
				}
				return
			}
			if !sent {
				// The upstream's RST_STREAM is in by now: it came in the same
				// read as the response, whose DATA the sidecar flushes only
				// once it handled all that read brought.
				sent = true
				fr.WriteData(1, false, []byte("more request"))
				select {
				case id := <-late:
					t.Fatalf("upstream got DATA on stream %d after resetting it", id)
				case <-time.After(200 * time.Millisecond):
				}
				fr.WriteWindowUpdate(1, 1000)
			}
		case *http2.RSTStreamFrame:
			if f.ErrCode != http2.ErrCodeNo || got != 1000 {
				t.Fatalf("stream reset %v after %d of 1000 response bytes", f.ErrCode, got)
			}
		}
	}
}

// TestMalformedHeadersResetOnlyTheirStream: HEADERS the Framer refuses
// (here an upper-case field name, RFC 9113 §8.2.1) are a stream error: the
// stream is reset, and DATA the client had sent behind them must be
// ignored (§5.1, closed), not taken for DATA on an idle stream and answered
// with GOAWAY, which would fail every other call on the connection.
func TestMalformedHeadersResetOnlyTheirStream(t *testing.T) {
	addr, _ := startForwarder(t, startUpstream(t, 0), nopObserver{})
	c := dialRaw(t, addr)
	fr := c.fr
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.block("X-Bad", "1"), EndHeaders: true})
	fr.WriteData(1, true, []byte("body"))
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: c.block(), EndStream: true, EndHeaders: true})

	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("before stream 3's response: %v", err)
		}
		switch f := f.(type) {
		case *http2.GoAwayFrame:
			t.Fatalf("GOAWAY %v: the connection failed for one stream's malformed headers", f.ErrCode)
		case *http2.MetaHeadersFrame:
			if f.StreamID == 3 {
				return
			}
		}
	}
}

// TestCompleteResponseOutlivesUpstreamReset: an upstream that sent its
// whole response and then resets the stream with an error code (CANCEL:
// it wants no more of the request) must not cost a slow client the part
// of the response still waiting for its window: a client connected
// directly would have read it all before the RST_STREAM.
func TestCompleteResponseOutlivesUpstreamReset(t *testing.T) {
	status := hpackBlock(":status", "200")
	up := rawUpstream(t, func(fr *http2.Framer, f http2.Frame, flush func() error) {
		if f, ok := f.(*http2.MetaHeadersFrame); ok {
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: f.StreamID, BlockFragment: status, EndHeaders: true})
			fr.WriteData(f.StreamID, true, bytes.Repeat([]byte{'r'}, 1000))
			fr.WriteRSTStream(f.StreamID, http2.ErrCodeCancel)
			flush()
		}
	})
	addr, _ := startForwarder(t, up, nopObserver{})

	c := dialRaw(t, addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 10}) // the response waits
	fr := c.fr
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.block(), EndHeaders: true})

	var got int
	opened := false
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("after %d of 1000 response bytes: %v", got, err)
		}
		switch f := f.(type) {
		case *http2.DataFrame:
			got += len(f.Data())
			if f.StreamEnded() {
				if got != 1000 {
					t.Fatalf("END_STREAM after %d of 1000 response bytes", got)
				}
				return
			}
			if !opened {
				// The RST_STREAM came in the same read as the response,
				// which the sidecar flushes only once it handled all of it.
				opened = true
				fr.WriteWindowUpdate(1, 1000)
			}
		case *http2.RSTStreamFrame:
			t.Fatalf("stream reset %v after %d of 1000 response bytes", f.ErrCode, got)
		}
	}
}
