package h2_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/inferwatch/inferwatch/internal/testenv"
	"github.com/inferwatch/inferwatch/proxy/h2"
)

// TestShutdownDeliversWholeResponses drains a connection whose client reads
// its responses slowly and keeps sending frames (PINGs, as a client sends
// WINDOW_UPDATEs while it reads). The last stream's end closes the drained
// connection; closing a socket with unread bytes makes the kernel send RST
// and drop what it still had to send, so the tail of the responses must not
// be sitting in the send queue then: the client must read every byte,
// END_STREAM and a clean EOF.
func TestShutdownDeliversWholeResponses(t *testing.T) {
	const body = 4 << 20
	chunk := bytes.Repeat([]byte{'w'}, 64<<10)
	arrived := make(chan struct{}, 1)
	up := startHandlerUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		arrived <- struct{}{}
		time.Sleep(100 * time.Millisecond) // the GOAWAY goes out first
		for sent := 0; sent < body; sent += len(chunk) {
			w.Write(chunk)
		}
	}))
	addr, srv := startForwarder(t, up, nopObserver{})

	// A small receive buffer keeps most of the response in the forwarder's
	// send queue while the client reads.
	nc := testenv.DialReceiveBuffer(t, addr, 8<<10)
	c := rawOver(t, nc, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1})
	fr := c.fr
	fr.WriteWindowUpdate(0, 1<<31-1-65535)
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.fields(":method", "GET", ":scheme", "http", ":authority", "x", ":path", "/big"), EndStream: true, EndHeaders: true})

	select {
	case <-arrived:
	case <-time.After(5 * time.Second):
		t.Fatal("the request never reached the upstream")
	}
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		shut <- srv.Shutdown(ctx)
	}()

	nc.SetReadDeadline(time.Now().Add(20 * time.Second))
	var got int
	var goAway, ended bool
	for frames := 0; ; frames++ {
		f, err := fr.ReadFrame()
		if err != nil {
			if !errors.Is(err, io.EOF) || !ended {
				t.Fatalf("after %d of %d body bytes (GOAWAY %v, END_STREAM %v): %v", got, body, goAway, ended, err)
			}
			break
		}
		switch f := f.(type) {
		case *http2.GoAwayFrame:
			goAway = true
		case *http2.DataFrame:
			got += len(f.Data())
			ended = f.StreamEnded()
			if frames%8 == 0 {
				time.Sleep(time.Millisecond)
			}
			fr.WritePing(false, [8]byte{byte(frames)})
		case *http2.MetaHeadersFrame:
			ended = f.StreamEnded()
		}
	}
	if got != body || !goAway {
		t.Errorf("got %d of %d body bytes, GOAWAY %v", got, body, goAway)
	}
	nc.Close()
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

// TestProtocolErrorGoAwayDelivered: a client's connection error (here a
// PUSH_PROMISE, which clients may not send) is answered with GOAWAY
// PROTOCOL_ERROR while the client still has frames on the way. The GOAWAY
// and what preceded it must reach the client, which reads slowly, rather
// than be dropped by the reset that closing over unread bytes causes.
func TestProtocolErrorGoAwayDelivered(t *testing.T) {
	addr, _ := startForwarder(t, startUpstream(t, 0), nopObserver{})
	nc := testenv.DialReceiveBuffer(t, addr, 8<<10)
	var out bytes.Buffer
	w := http2.NewFramer(&out, nil)
	w.AllowIllegalWrites = true
	io.WriteString(&out, http2.ClientPreface)
	w.WriteSettings()
	for i := range 2000 {
		w.WritePing(false, [8]byte{byte(i >> 8), byte(i)})
	}
	w.WritePushPromise(http2.PushPromiseParam{StreamID: 1, PromiseID: 2, EndHeaders: true})
	before := out.Len()
	for range 20000 {
		w.WritePing(false, [8]byte{})
	}
	t.Logf("%d bytes before the error, %d after", before, out.Len()-before)
	go nc.Write(out.Bytes()) // fails once the forwarder is gone

	time.Sleep(200 * time.Millisecond) // the answer waits in the forwarder's send queue
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	fr := http2.NewFramer(nil, bufio.NewReader(nc))
	acks := 0
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("after %d PING acks, no GOAWAY: %v", acks, err)
		}
		if p, ok := f.(*http2.PingFrame); ok && p.IsAck() {
			acks++
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			if g.ErrCode != http2.ErrCodeProtocol {
				t.Errorf("GOAWAY %v, want PROTOCOL_ERROR", g.ErrCode)
			}
			break
		}
	}
	if acks != 2000 {
		t.Errorf("%d PING acks before the GOAWAY, want 2000", acks)
	}
}

// TestIdleCloseLingers: a connection without streams for IdleTimeout gets
// GOAWAY and a clean end (FIN, so io.EOF) while its client is still
// sending frames, and its serve loop ends once the client hangs up.
func TestIdleCloseLingers(t *testing.T) {
	addr, srv := startForwarder(t, startUpstream(t, 0), nopObserver{}, func(o *h2.Options) {
		o.IdleTimeout = 300 * time.Millisecond
	})
	nc := testenv.DialReceiveBuffer(t, addr, 8<<10)
	io.WriteString(nc, http2.ClientPreface)
	fr := http2.NewFramer(nc, bufio.NewReader(nc))
	fr.WriteSettings()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "x"}, {":path", "/"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	// The idle clock starts when the stream ends, which can be before this
	// goroutine runs again once the request is out: time from before it.
	start := time.Now()
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true})

	stop := make(chan struct{})
	pinged := make(chan struct{})
	go func() { // a chatty client: PINGs, ten a millisecond, until it hangs up
		defer close(pinged)
		w := http2.NewFramer(nc, nil)
		for i := 0; ; i++ {
			if i%10 == 0 {
				select {
				case <-stop:
					return
				case <-time.After(time.Millisecond):
				}
			}
			if w.WritePing(false, [8]byte{byte(i)}) != nil {
				return
			}
		}
	}()

	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	var ended, goAway bool
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatalf("want a clean EOF after GOAWAY (GOAWAY %v, stream ended %v): %v", goAway, ended, err)
			}
			break
		}
		switch f := f.(type) {
		case *http2.GoAwayFrame:
			if f.ErrCode != http2.ErrCodeNo || f.LastStreamID != 1 {
				t.Errorf("GOAWAY %v, last stream %d; want NO_ERROR, 1", f.ErrCode, f.LastStreamID)
			}
			goAway = true
		case *http2.DataFrame:
			ended = ended || f.StreamEnded()
		case *http2.HeadersFrame:
			ended = ended || f.StreamEnded()
		}
	}
	if !goAway || !ended {
		t.Fatalf("GOAWAY %v, stream ended %v", goAway, ended)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("closed after %v, before the idle timeout", d)
	}
	close(stop)
	<-pinged
	nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil { // waits for every serve loop
		t.Errorf("the lingering connection did not end after its client closed: %v", err)
	}
}

// TestShutdownDeadlineWithStuckClient: a client that stopped reading (its
// process frozen, its node gone) leaves the forwarder blocked writing to
// it. Shutdown must still return by its context's deadline, closing what
// is left, rather than wait on that connection for as long as TCP takes to
// give up, with every connection after it never told to drain.
func TestShutdownDeadlineWithStuckClient(t *testing.T) {
	chunk := bytes.Repeat([]byte{'w'}, 64<<10)
	arrived := make(chan struct{}, 1)
	up := startHandlerUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		for sent := 0; sent < 64<<20; sent += len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	addr, srv := startForwarder(t, up, nopObserver{})

	c := rawOver(t, testenv.DialReceiveBuffer(t, addr, 8<<10), http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1})
	c.fr.WriteWindowUpdate(0, 1<<31-1-65535)
	c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.fields(":method", "GET", ":scheme", "http", ":authority", "x", ":path", "/big"), EndStream: true, EndHeaders: true})
	select {
	case <-arrived:
	case <-time.After(5 * time.Second):
		t.Fatal("the request never reached the upstream")
	}
	time.Sleep(300 * time.Millisecond) // the client's socket fills; the forwarder's write blocks

	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		shut <- srv.Shutdown(ctx)
	}()
	select {
	case err := <-shut:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Shutdown: %v, want the deadline's error", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Shutdown still waiting 5s after its 200ms deadline")
	}
}

// TestShutdownDeadlineWithStuckUpstream: an upstream that stopped reading
// (frozen, out of memory) leaves the forwarder blocked writing a client's
// request to it. Shutdown must still return by its context's deadline.
func TestShutdownDeadlineWithStuckUpstream(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	accepted := make(chan net.Conn, 1)
	go func() {
		nc, err := l.Accept()
		if err != nil {
			return
		}
		nc.(*net.TCPConn).SetReadBuffer(4 << 10)
		fr := http2.NewFramer(nc, nil)
		fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1})
		fr.WriteWindowUpdate(0, 1<<31-1-65535)
		accepted <- nc // and never read
	}()
	t.Cleanup(func() {
		select {
		case nc := <-accepted:
			nc.Close()
		default:
		}
	})
	const body = 32 << 20
	addr, srv := startForwarder(t, l.Addr().String(), nopObserver{}, func(o *h2.Options) {
		o.StreamWindow, o.ConnWindow = body, body
	})

	c := dialRaw(t, addr)
	fr := c.fr
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.fields(":method", "POST", ":scheme", "http", ":authority", "x", ":path", "/up"), EndHeaders: true})
	go func() {
		chunk := make([]byte, 16<<10)
		for sent := 0; sent < body; sent += len(chunk) {
			if fr.WriteData(1, false, chunk) != nil {
				return
			}
		}
	}()
	time.Sleep(500 * time.Millisecond) // the upstream's socket fills; the forwarder's write blocks

	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		shut <- srv.Shutdown(ctx)
	}()
	select {
	case err := <-shut:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Shutdown: %v, want the deadline's error", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Shutdown still waiting 5s after its 200ms deadline")
	}
}
