package h2_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/inferwatch/inferwatch/proxy/h2"
)

// countingListener counts the connections it accepted, and those of them
// the server closed (once their client, the forwarder, closed them).
type countingListener struct {
	net.Listener
	n, closed atomic.Int32
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.n.Add(1)
	return &countedConn{Conn: c, l: l}, nil
}

type countedConn struct {
	net.Conn
	l    *countingListener
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.l.closed.Add(1) })
	return c.Conn.Close()
}

// heldUpstream is an h2c server allowing maxStreams streams per connection
// whose handlers each answer "resp <path>" once release is closed; arrived
// gets a value per request that reached a handler.
func heldUpstream(t *testing.T, maxStreams int) (addr string, l *countingListener, arrived chan struct{}, release func()) {
	t.Helper()
	nl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l = &countingListener{Listener: nl}
	arrived = make(chan struct{}, 64)
	held := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(held) }) }
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Protocols: p, HTTP2: &http.HTTP2Config{MaxConcurrentStreams: maxStreams},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			arrived <- struct{}{}
			select {
			case <-held:
			case <-r.Context().Done():
				return
			}
			io.WriteString(w, "resp "+r.URL.Path)
		})}
	go srv.Serve(l)
	t.Cleanup(func() { release(); srv.Close() })
	return l.Addr().String(), l, arrived, release
}

// waitArrived waits for n requests to reach the upstream's handlers.
func waitArrived(t *testing.T, arrived chan struct{}, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		select {
		case <-arrived:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d requests reached the upstream in 10s", i, n)
		}
	}
}

// readResponses reads frames until every stream in want ended, returning
// each one's body; a stream reset is recorded as its code in resets.
func (c *rawClient) readResponses(want map[uint32]bool) (bodies map[uint32]string, resets map[uint32]http2.ErrCode) {
	c.t.Helper()
	bodies, resets = map[uint32]string{}, map[uint32]http2.ErrCode{}
	for open := len(want); open > 0; {
		f, err := c.fr.ReadFrame()
		if err != nil {
			c.t.Fatalf("reading responses (%d still open): %v", open, err)
		}
		switch f := f.(type) {
		case *http2.GoAwayFrame:
			c.t.Fatalf("GOAWAY %v", f.ErrCode)
		case *http2.RSTStreamFrame:
			if want[f.StreamID] {
				resets[f.StreamID] = f.ErrCode
				want[f.StreamID] = false
				open--
			}
		case *http2.DataFrame:
			bodies[f.StreamID] += string(f.Data())
			if f.StreamEnded() && want[f.StreamID] {
				want[f.StreamID] = false
				open--
			}
		case *http2.MetaHeadersFrame:
			if f.StreamEnded() && want[f.StreamID] {
				want[f.StreamID] = false
				open--
			}
		}
	}
	return bodies, resets
}

// TestStreamsOverUpstreamLimitUseMoreConnections: an upstream allowing 2
// streams per connection, and a client multiplexing 5 on its one
// connection to the sidecar (which advertises 1000). Each must reach the
// upstream, on a connection with room, and be answered, as they would be
// by a client pooling connections to it; the sidecar must not refuse 3 of
// them with REFUSED_STREAM for a limit of its own upstream connection.
func TestStreamsOverUpstreamLimitUseMoreConnections(t *testing.T) {
	upAddr, l, arrived, release := heldUpstream(t, 2)
	addr, _ := startForwarder(t, upAddr, nopObserver{})
	c := dialRaw(t, addr)
	want := map[uint32]bool{}
	for i := uint32(0); i < 5; i++ {
		id := 1 + 2*i
		want[id] = true
		c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.fields(":method", "GET", ":scheme", "http", ":authority", "x", ":path", fmt.Sprintf("/s%d", id)), EndStream: true, EndHeaders: true})
	}
	// All 5 held in their handlers at once: 3 upstream connections at least.
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer release()
		for i := 0; i < 5; i++ {
			select {
			case <-arrived:
			case <-time.After(10 * time.Second):
				return // the client's reads tell what went wrong
			}
		}
	}()
	c.nc.SetReadDeadline(time.Now().Add(20 * time.Second)) // past the release
	bodies, resets := c.readResponses(want)
	<-done
	for id := uint32(1); id <= 9; id += 2 {
		if code, ok := resets[id]; ok {
			t.Errorf("stream %d reset %v", id, code)
		} else if got, want := bodies[id], fmt.Sprintf("resp /s%d", id); got != want {
			t.Errorf("stream %d body %q, want %q", id, got, want)
		}
	}
	if n := l.n.Load(); n != 3 {
		t.Errorf("%d upstream connections for 5 streams at 2 a connection, want 3", n)
	}
	// The client leaving closes every one of them.
	c.nc.Close()
	for deadline := time.Now().Add(5 * time.Second); l.closed.Load() < l.n.Load(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d upstream connections still open 5s after the client left", l.n.Load()-l.closed.Load(), l.n.Load())
		}
	}
}

// TestUpstreamConnectionsBounded: a client opening more streams than
// MaxUpstreamConns connections of the upstream take gets the rest refused
// (REFUSED_STREAM, retryable), not a connection dialled per 2 streams
// without end; the streams it got through complete.
func TestUpstreamConnectionsBounded(t *testing.T) {
	upAddr, l, arrived, release := heldUpstream(t, 2)
	addr, _ := startForwarder(t, upAddr, nopObserver{})
	c := dialRaw(t, addr)
	fit := 2 * h2.MaxUpstreamConns
	want := map[uint32]bool{}
	for i := 0; i < fit; i++ {
		id := uint32(1 + 2*i)
		want[id] = true
		c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.fields(":method", "GET", ":scheme", "http", ":authority", "x", ":path", "/"), EndStream: true, EndHeaders: true})
	}
	waitArrived(t, arrived, fit)
	extra := uint32(1 + 2*fit)
	c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: extra, BlockFragment: c.fields(":method", "GET", ":scheme", "http", ":authority", "x", ":path", "/"), EndStream: true, EndHeaders: true})
	_, resets := c.readResponses(map[uint32]bool{extra: true})
	if code, ok := resets[extra]; !ok || code != http2.ErrCodeRefusedStream {
		t.Errorf("stream %d over every connection's limit: reset %v (%v), want REFUSED_STREAM", extra, code, ok)
	}
	release()
	_, resets = c.readResponses(want)
	if len(resets) > 0 {
		t.Errorf("streams within the limits reset: %v", resets)
	}
	if n := l.n.Load(); n != int32(h2.MaxUpstreamConns) {
		t.Errorf("%d upstream connections, want %d", n, h2.MaxUpstreamConns)
	}
}

// TestUpstreamGoAwayRetiresConnection: an upstream connection that sent
// GOAWAY takes no new stream and is closed once its last stream is done;
// the next stream goes to a new connection and is answered.
func TestUpstreamGoAwayRetiresConnection(t *testing.T) {
	up, closed := rawUpstreams(t, func(int) []http2.Setting {
		return []http2.Setting{{ID: http2.SettingMaxConcurrentStreams, Val: 1}}
	}, func(i int, fr *http2.Framer, f http2.Frame, flush func() error) {
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.MetaHeadersFrame:
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: f.StreamID, BlockFragment: hpackBlock(":status", "200"), EndHeaders: true})
			fr.WriteData(f.StreamID, true, []byte(fmt.Sprintf("conn %d", i)))
			if i == 0 {
				fr.WriteGoAway(f.StreamID, http2.ErrCodeNo, nil)
			}
		}
		flush()
	})
	addr, _ := startForwarder(t, up, nopObserver{})
	c := dialRaw(t, addr)
	get := func(id uint32) string {
		c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.fields(":method", "GET", ":scheme", "http", ":authority", "x", ":path", "/"), EndStream: true, EndHeaders: true})
		bodies, resets := c.readResponses(map[uint32]bool{id: true})
		if code, ok := resets[id]; ok {
			t.Fatalf("stream %d reset %v", id, code)
		}
		return bodies[id]
	}
	if got := get(1); got != "conn 0" {
		t.Fatalf("stream 1 answered %q, want by connection 0", got)
	}
	select {
	case i := <-closed:
		if i != 0 {
			t.Fatalf("upstream connection %d closed, want 0 (the one that sent GOAWAY)", i)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream connection that sent GOAWAY was not closed once its stream was done")
	}
	if got := get(3); got != "conn 1" {
		t.Fatalf("stream 3 answered %q, want by a new connection", got)
	}
}

// TestUpstreamStreamLimitZero: an upstream's SETTINGS_MAX_CONCURRENT_STREAMS
// of 0 lets no new stream open (RFC 9113 §6.5.2), whether in its first
// SETTINGS or a later one; the sidecar took 0 for unlimited and sent
// streams the upstream had to refuse. A stream goes to a connection with
// room, or is refused (REFUSED_STREAM) when none takes it, the one it
// dialed included; the next stream dials another.
func TestUpstreamStreamLimitZero(t *testing.T) {
	zero := []http2.Setting{{ID: http2.SettingMaxConcurrentStreams, Val: 0}}
	for _, tc := range []struct {
		name         string
		settings     func(i int) []http2.Setting // upstream connection i's first SETTINGS
		lower        bool                        // connection 0 sends a limit of 0 with its first answer
		want1, want3 string                      // "conn i" for the connection that answered, or the reset
	}{
		{"first connection's SETTINGS", func(i int) []http2.Setting {
			if i == 0 {
				return zero
			}
			return nil
		}, false, "REFUSED_STREAM", "conn 1"}, // one dial per stream: the retry gets the next
		{"every connection's SETTINGS", func(int) []http2.Setting { return zero }, false, "REFUSED_STREAM", "REFUSED_STREAM"},
		{"a later SETTINGS", func(int) []http2.Setting { return nil }, true, "conn 0", "conn 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			over := make(chan string, 8)
			var mu sync.Mutex
			limit := map[int]uint32{}
			addr, _ := rawUpstreams(t, func(i int) []http2.Setting {
				mu.Lock()
				defer mu.Unlock()
				limit[i] = 1000
				for _, s := range tc.settings(i) {
					limit[i] = s.Val
				}
				return tc.settings(i)
			}, func(i int, fr *http2.Framer, f http2.Frame, flush func() error) {
				switch f := f.(type) {
				case *http2.SettingsFrame:
					if !f.IsAck() {
						fr.WriteSettingsAck()
					}
				case *http2.MetaHeadersFrame:
					mu.Lock()
					l := limit[i]
					if tc.lower && i == 0 {
						limit[i] = 0
					}
					mu.Unlock()
					if l == 0 {
						over <- fmt.Sprintf("connection %d got stream %d over its limit of 0", i, f.StreamID)
						fr.WriteRSTStream(f.StreamID, http2.ErrCodeRefusedStream)
						break
					}
					if tc.lower && i == 0 {
						fr.WriteSettings(zero...)
					}
					fr.WriteHeaders(http2.HeadersFrameParam{StreamID: f.StreamID, BlockFragment: hpackBlock(":status", "200"), EndHeaders: true})
					fr.WriteData(f.StreamID, true, []byte(fmt.Sprintf("conn %d", i)))
				}
				flush()
			})
			fwd, _ := startForwarder(t, addr, nopObserver{})
			c := dialRaw(t, fwd)
			get := func(id uint32) string {
				c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.fields(":method", "GET", ":scheme", "http", ":authority", "x", ":path", "/"), EndStream: true, EndHeaders: true})
				bodies, resets := c.readResponses(map[uint32]bool{id: true})
				if code, ok := resets[id]; ok {
					return code.String()
				}
				return bodies[id]
			}
			if got := get(1); got != tc.want1 {
				t.Errorf("stream 1: %q, want %q", got, tc.want1)
			}
			if got := get(3); got != tc.want3 {
				t.Errorf("stream 3: %q, want %q", got, tc.want3)
			}
			close(over)
			for msg := range over {
				t.Error(msg)
			}
		})
	}
}

// TestIdleExtraUpstreamClosed: the extra upstream connection a burst over
// the upstream's stream limit opened is closed, with GOAWAY(NO_ERROR), once
// it carried no stream for a while; it stayed open until the client left.
// The oldest connection stays, and takes the next stream.
func TestIdleExtraUpstreamClosed(t *testing.T) {
	const idle = 100 * time.Millisecond
	goAways := make(chan string, 4)
	addr, ended := rawUpstreams(t, func(int) []http2.Setting {
		return []http2.Setting{{ID: http2.SettingMaxConcurrentStreams, Val: 1}}
	}, func(i int, fr *http2.Framer, f http2.Frame, flush func() error) {
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.MetaHeadersFrame: // answered at once, ended when the request ends
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: f.StreamID, BlockFragment: hpackBlock(":status", "200"), EndStream: false, EndHeaders: true})
			if f.StreamEnded() {
				fr.WriteData(f.StreamID, true, []byte(fmt.Sprintf("conn %d", i)))
			}
		case *http2.DataFrame:
			if f.StreamEnded() {
				fr.WriteData(f.StreamID, true, []byte(fmt.Sprintf("conn %d", i)))
			}
		case *http2.GoAwayFrame:
			goAways <- fmt.Sprintf("conn %d %v", i, f.ErrCode)
		}
		flush()
	})
	fwd, _ := startForwarder(t, addr, nopObserver{}, h2.UpstreamIdle(idle))
	c := dialRaw(t, fwd)
	c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	get := func(id uint32) string {
		c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.fields(":method", "GET", ":scheme", "http", ":authority", "x", ":path", "/"), EndStream: true, EndHeaders: true})
		bodies, resets := c.readResponses(map[uint32]bool{id: true})
		if code, ok := resets[id]; ok {
			return code.String()
		}
		return bodies[id]
	}

	// Two streams open at once, one a connection: the burst.
	for _, id := range []uint32{1, 3} {
		c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.fields(":method", "POST", ":scheme", "http", ":authority", "x", ":path", "/"), EndHeaders: true})
		if resp := c.response(id); resp[":status"] != "200" {
			t.Fatalf("stream %d: %v", id, resp)
		}
	}
	c.fr.WriteData(1, true, nil)
	c.fr.WriteData(3, true, nil)
	bodies, resets := c.readResponses(map[uint32]bool{1: true, 3: true})
	if len(resets) > 0 || bodies[1] != "conn 0" || bodies[3] != "conn 1" {
		t.Fatalf("burst answered %v, resets %v; want streams 1 and 3 on connections 0 and 1", bodies, resets)
	}

	select {
	case i := <-ended:
		if i != 1 {
			t.Fatalf("upstream connection %d closed, want 1 (the extra one)", i)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the extra upstream connection was not closed 5s after its last stream")
	}
	select {
	case g := <-goAways:
		if g != "conn 1 NO_ERROR" {
			t.Errorf("upstream got GOAWAY %s, want conn 1 NO_ERROR", g)
		}
	default:
		t.Error("the extra upstream connection was closed without GOAWAY")
	}
	time.Sleep(3 * idle)
	select {
	case i := <-ended:
		t.Fatalf("upstream connection %d closed too", i)
	default:
	}
	if got := get(5); got != "conn 0" {
		t.Errorf("stream 5 answered by %q, want conn 0 (the one kept)", got)
	}
}
