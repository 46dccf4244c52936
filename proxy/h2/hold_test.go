package h2

import (
	"bufio"
	"bytes"
	"io"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// testEndpoint is an endpoint whose frames go to w.
func testEndpoint(w io.Writer) *endpoint {
	e := &endpoint{}
	e.init(16 << 20)
	e.wbuf = bufio.NewWriter(w)
	e.fr = http2.NewFramer(e.wbuf, nil)
	e.enc = newEncoder()
	return e
}

// Small DATA frames held for a shut window (a streaming call's small
// messages, a slow reader) must cost about the bytes they carry, not a
// frame-sized buffer each: a connection window of 1-byte frames would
// otherwise pin 16 KiB per byte.
func TestHeldSmallFramesShareBuffers(t *testing.T) {
	var out bytes.Buffer
	src, dst := testEndpoint(io.Discard), testEndpoint(&out)
	dst.sendWin = 0 // the next hop's connection window is shut
	st := &stream{start: time.Now()}
	st.req = half{src: src, dst: dst, srcID: 1, dstID: 3, stream: st, recvWin: 4 << 20, window: 4 << 20, sendWin: 4 << 20}
	h := &st.req

	const frames = 1000
	var want []byte
	for i := range frames {
		p := []byte{byte(i % 251)}
		want = append(want, p...)
		h.forward(p, i == frames-1)
	}
	var pinned int
	for _, it := range h.pending {
		if it.buf != nil {
			pinned += cap(*it.buf)
		}
	}
	if pinned > 2*maxReadFrame {
		t.Fatalf("%d bytes held in %d items pin %d bytes of buffers", frames, len(h.pending), pinned)
	}

	// Opening the window sends the same bytes, in order, END_STREAM last.
	dst.sendWin = 1 << 20
	dst.unblock()
	if !h.closed || len(h.pending) != 0 {
		t.Fatalf("after the window opened: closed %v, %d items still held", h.closed, len(h.pending))
	}
	dst.wbuf.Flush()
	fr := http2.NewFramer(nil, &out)
	var got []byte
	ended := false
	for {
		f, err := fr.ReadFrame()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		d, ok := f.(*http2.DataFrame)
		if !ok || d.StreamID != 3 || ended {
			t.Fatalf("unexpected frame %v (after END_STREAM: %v)", f, ended)
		}
		got = append(got, d.Data()...)
		ended = d.StreamEnded()
	}
	if !bytes.Equal(got, want) || !ended {
		t.Fatalf("forwarded %d bytes (END_STREAM %v), want the %d sent, in order", len(got), ended, len(want))
	}
}

// Empty DATA frames cost no window, so only sharing the held buffer keeps
// a peer that sends them while a stream waits from growing its queue
// without bound.
func TestHeldEmptyFramesPinNothing(t *testing.T) {
	src, dst := testEndpoint(io.Discard), testEndpoint(io.Discard)
	dst.sendWin = 0
	st := &stream{start: time.Now()}
	st.req = half{src: src, dst: dst, srcID: 1, dstID: 3, stream: st, recvWin: 4 << 20, window: 4 << 20, sendWin: 4 << 20}
	h := &st.req
	h.forward([]byte{1}, false)
	for range 10000 {
		h.forward(nil, false)
	}
	if len(h.pending) != 1 {
		t.Fatalf("1 byte and 10000 empty frames held in %d frame-sized buffers", len(h.pending))
	}
}
