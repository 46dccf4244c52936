package h2_test

import (
	"errors"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/inferwatch/inferwatch/proxy/h2"
)

// panicOnce is an Observer whose first Open panics, as a bug in the
// measurement behind it would.
type panicOnce struct{ n atomic.Int64 }

func (p *panicOnce) Open(at time.Time, f []hpack.HeaderField) (h2.Watcher, []hpack.HeaderField) {
	if p.n.Add(1) == 1 {
		panic("a bug in the measurement")
	}
	return nopObserver{}.Open(at, f)
}

// TestPanicClosesOnlyItsConnection: a panic while a frame is handled ends
// that connection with GOAWAY(INTERNAL_ERROR) and leaves the forwarder
// serving others. It used to hang the connection for good: the deferred
// teardown waited for the lock the panicking code held, so the panic
// neither closed the connection nor reached anyone.
func TestPanicClosesOnlyItsConnection(t *testing.T) {
	addr, _ := startForwarder(t, startUpstream(t, 0), &panicOnce{})
	c := dialRaw(t, addr)
	c.nc.SetReadDeadline(time.Now().Add(3 * time.Second))
	c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.block(), EndHeaders: true, EndStream: true})
	goaway := false
	for !goaway {
		f, err := c.fr.ReadFrame()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("no GOAWAY or close after the panic: %v", err)
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			if g.ErrCode != http2.ErrCodeInternal {
				t.Errorf("GOAWAY %v, want INTERNAL_ERROR", g.ErrCode)
			}
			goaway = true
		}
	}
	// Another connection is served.
	d := dialRaw(t, addr)
	d.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: d.block(), EndHeaders: true, EndStream: true})
	if got := d.response(1); got[":status"] != "200" {
		t.Fatalf("a second connection got %v", got)
	}
}

// panicOnResponse is an Observer whose first call's watcher panics on the
// response headers, read on the upstream connection's side.
type panicOnResponse struct{ n atomic.Int64 }

type panickyWatcher struct{ nopWatcher }

func (panickyWatcher) ResponseHeaders([]hpack.HeaderField, bool) {
	panic("a bug in the measurement")
}

func (p *panicOnResponse) Open(at time.Time, f []hpack.HeaderField) (h2.Watcher, []hpack.HeaderField) {
	if p.n.Add(1) == 1 {
		return panickyWatcher{}, f
	}
	return nopObserver{}.Open(at, f)
}

// TestPanicOnUpstreamSideLosesOnlyThatUpstream: a panic while an upstream
// frame is handled loses that upstream connection — its call failed (reset
// or 502, whichever its state allows) — not the process, and the next call
// on the same client connection is served.
func TestPanicOnUpstreamSideLosesOnlyThatUpstream(t *testing.T) {
	addr, _ := startForwarder(t, startUpstream(t, 0), &panicOnResponse{})
	c := dialRaw(t, addr)
	c.nc.SetReadDeadline(time.Now().Add(3 * time.Second))
	c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.block(), EndHeaders: true, EndStream: true})
	for failed := false; !failed; {
		f, err := c.fr.ReadFrame()
		if err != nil {
			t.Fatalf("no end to the call whose response panicked: %v", err)
		}
		switch f := f.(type) {
		case *http2.GoAwayFrame:
			t.Fatalf("GOAWAY %v: the client connection failed with the upstream one", f.ErrCode)
		case *http2.RSTStreamFrame:
			failed = f.StreamID == 1
		case *http2.MetaHeadersFrame:
			if f.StreamID == 1 {
				if st := f.PseudoValue("status"); st != "502" {
					t.Fatalf("the call whose response panicked got status %s, want a reset or 502", st)
				}
				failed = true
			}
		}
	}
	c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: c.block(), EndHeaders: true, EndStream: true})
	if got := c.response(3); got[":status"] != "200" {
		t.Fatalf("the next call got %v", got)
	}
}
