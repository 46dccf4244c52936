package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/record"
	"golang.org/x/net/websocket"
)

// wsUpstream is a real WebSocket server (RFC 6455, x/net/websocket) that
// echoes every message, behind net/http as a model server's would be.
func wsUpstream(t *testing.T) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/v1/realtime", websocket.Handler(func(ws *websocket.Conn) {
		ws.MaxPayloadBytes = 8 << 20
		for {
			var msg []byte
			if err := websocket.Message.Receive(ws, &msg); err != nil {
				return
			}
			if err := websocket.Message.Send(ws, msg); err != nil {
				return
			}
		}
	}))
	mux.HandleFunc("/plain", func(w http.ResponseWriter, r *http.Request) {
		// What reached the upstream of an upgrade it was not offered.
		w.Header().Set("X-Upgrade-Seen", r.Header.Get("Upgrade"))
		io.WriteString(w, "plain")
	})
	mux.HandleFunc("/refuse", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUpgradeRequired)
		io.WriteString(w, "not here")
	})
	l := listen(t)
	srv := &http.Server{Handler: mux}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return l.Addr().String()
}

// TestUpgradeWebSocket: a WebSocket session through the sidecar carries
// every message both ways byte for byte, and its record is the handshake's
// (101, ended when the 101 went out, before the client had it) with the
// session's bytes counted.
func TestUpgradeWebSocket(t *testing.T) {
	h := newHarness(t, wsUpstream(t), false)
	cfg, err := websocket.NewConfig("ws://"+h.addr+"/v1/realtime", "http://localhost/")
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	ws, err := websocket.DialConfig(cfg)
	if err != nil {
		t.Fatalf("dial through the sidecar: %v", err)
	}
	dialled := time.Now()
	ws.MaxPayloadBytes = 8 << 20
	var sent int64
	for i, size := range []int{1, 125, 126, 65535, 65536, 1 << 20, 7} {
		msg := bytes.Repeat([]byte{byte('a' + i)}, size)
		if err := websocket.Message.Send(ws, msg); err != nil {
			t.Fatalf("send %d bytes: %v", size, err)
		}
		var got []byte
		if err := websocket.Message.Receive(ws, &got); err != nil {
			t.Fatalf("receive the echo of %d bytes: %v", size, err)
		}
		if !bytes.Equal(got, msg) {
			t.Fatalf("echo of %d bytes came back as %d bytes, altered", size, len(got))
		}
		sent += int64(size)
	}
	time.Sleep(100 * time.Millisecond) // the session outlives its handshake
	ws.Close()

	c := h.waitRecords(1)[0]
	if c.Code != "101" || c.ErrorKind != record.ErrNone || !c.Stream {
		t.Errorf("record code %q, error %q, stream %v; want 101, none, a stream", c.Code, c.ErrorKind, c.Stream)
	}
	if end := c.Start.Add(c.End); c.Start.Before(before) || end.After(dialled) {
		t.Errorf("record %v + %v: want the handshake, within the dial (%v to %v)", c.Start, c.End, before, dialled)
	}
	// Messages are framed: the bytes each way exceed the payloads.
	if c.RequestBytes < sent || c.ResponseBytes < sent {
		t.Errorf("bytes %d up, %d down; want at least the %d payload bytes each way", c.RequestBytes, c.ResponseBytes, sent)
	}
	if c.API == "" || c.Method == "" {
		t.Errorf("record API %q method %q", c.API, c.Method)
	}
}

// rawUpgrade sends an upgrade request (and early bytes right behind it)
// on a new connection and returns it with its reader after the response
// head, and the response.
func rawUpgrade(t *testing.T, addr, path, upgrade, early string) (net.Conn, *bufio.Reader, *http.Response) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	req := "GET " + path + " HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: " + upgrade + "\r\n\r\n" + early
	if _, err := io.WriteString(nc, req); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(nc)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("upgrade response: %v", err)
	}
	return nc, br, res
}

// rawSwitcher is an upstream that answers every request with a 101 to
// protocol, then runs session on the connection.
func rawSwitcher(t *testing.T, protocol string, session func(net.Conn, *bufio.Reader)) string {
	t.Helper()
	l := listen(t)
	go func() {
		for {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer nc.Close()
				br := bufio.NewReader(nc)
				if _, err := http.ReadRequest(br); err != nil {
					return
				}
				io.WriteString(nc, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: "+protocol+"\r\n\r\n")
				session(nc, br)
			}()
		}
	}()
	t.Cleanup(func() { l.Close() })
	return l.Addr().String()
}

// TestUpgradeHalfClose: bytes the client sends right behind its request
// head reach the upstream; the client's end of stream reaches the upstream
// as a FIN, after which the upstream's last answer still reaches the
// client, then the upstream's own end.
func TestUpgradeHalfClose(t *testing.T) {
	up := rawSwitcher(t, "tcp-echo", func(nc net.Conn, br *bufio.Reader) {
		all, err := io.ReadAll(br) // until the client's FIN
		if err != nil {
			return
		}
		io.WriteString(nc, "got "+string(all))
	})
	h := newHarness(t, up, false)
	nc, br, res := rawUpgrade(t, h.addr, "/tunnel", "tcp-echo", "early,")
	if res.StatusCode != http.StatusSwitchingProtocols || res.Header.Get("Upgrade") != "tcp-echo" {
		t.Fatalf("answer %d, Upgrade %q", res.StatusCode, res.Header.Get("Upgrade"))
	}
	io.WriteString(nc, "late")
	if err := nc.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(br)
	if err != nil {
		t.Fatalf("after the half-close: %v (read %q)", err, got)
	}
	if string(got) != "got early,late" {
		t.Errorf("upstream answered %q, want %q", got, "got early,late")
	}
	c := h.waitRecords(1)[0]
	if c.Code != "101" || c.RequestBytes != int64(len("early,late")) || c.ResponseBytes != int64(len("got early,late")) {
		t.Errorf("record code %q, %d bytes up, %d down", c.Code, c.RequestBytes, c.ResponseBytes)
	}
}

// TestUpgradeNotRelayed: what is not a relayable switch gets an ordinary
// answer, recorded as such.
func TestUpgradeNotRelayed(t *testing.T) {
	ws := wsUpstream(t)
	tests := []struct {
		name, upstream, path, upgrade string
		code                          int
		seen                          string // X-Upgrade-Seen
		kind                          record.ErrorKind
	}{
		// h2c is HTTP/2, which the listener speaks itself; the upstream is
		// not asked, and the client goes on in HTTP/1.1.
		{name: "h2c not forwarded", upstream: ws, path: "/plain", upgrade: "h2c", code: 200},
		{name: "h2c dropped, websocket kept", upstream: ws, path: "/plain", upgrade: "h2c, websocket", code: 200, seen: "websocket"},
		{name: "upstream declines", upstream: ws, path: "/refuse", upgrade: "websocket", code: http.StatusUpgradeRequired},
		{name: "switch to a protocol not offered", upstream: rawSwitcher(t, "other", func(net.Conn, *bufio.Reader) {}),
			path: "/x", upgrade: "websocket", code: http.StatusBadGateway, kind: record.ErrUpstreamUnavailable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.upstream, false)
			_, _, res := rawUpgrade(t, h.addr, tc.path, tc.upgrade, "")
			body, _ := io.ReadAll(io.LimitReader(res.Body, 1<<10))
			if res.StatusCode != tc.code || res.Header.Get("X-Upgrade-Seen") != tc.seen {
				t.Errorf("answer %d (X-Upgrade-Seen %q) %q, want %d (%q)", res.StatusCode, res.Header.Get("X-Upgrade-Seen"), body, tc.code, tc.seen)
			}
			c := h.waitRecords(1)[0]
			if c.Code != strconv.Itoa(tc.code) || c.ErrorKind != tc.kind {
				t.Errorf("record code %q, error %q; want %d, %q", c.Code, c.ErrorKind, tc.code, tc.kind)
			}
		})
	}
}

// TestUpgradeDrain: a drain waits for open upgraded connections, which go
// on working meanwhile, and cuts off those still open when its time is up.
func TestUpgradeDrain(t *testing.T) {
	for _, cut := range []bool{false, true} {
		name := map[bool]string{false: "session ends in time", true: "session cut off"}[cut]
		t.Run(name, func(t *testing.T) {
			up := rawSwitcher(t, "tcp-echo", func(nc net.Conn, br *bufio.Reader) { io.Copy(nc, br) })
			h := newHarness(t, up, false)
			nc, br, res := rawUpgrade(t, h.addr, "/tunnel", "tcp-echo", "")
			if res.StatusCode != http.StatusSwitchingProtocols {
				t.Fatalf("answer %d", res.StatusCode)
			}
			// The drain's time is up when the test says so, once the session
			// has been seen working during it: a deadline on the clock could
			// pass on a loaded machine before the ping came back.
			ctx, timeUp := newManualDeadline(10 * time.Second)
			defer timeUp()
			drained := make(chan error, 1)
			go func() { drained <- h.server.Shutdown(ctx) }()
			time.Sleep(100 * time.Millisecond) // the drain has begun
			io.WriteString(nc, "ping")
			buf := make([]byte, 4)
			if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "ping" {
				t.Fatalf("during the drain: %q, %v", buf, err)
			}
			if cut {
				timeUp()
			} else {
				nc.Close()
				if err := <-drained; err != nil {
					t.Errorf("drain after the session ended: %v", err)
				}
				return
			}
			err := <-drained
			if err == nil || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "upgraded") {
				t.Errorf("drain with a session open: %v, want its deadline named", err)
			}
			if n, err := br.Read(buf); err == nil {
				t.Errorf("read %d bytes after the drain cut the session off", n)
			}
		})
	}
}

// manualDeadline is a context whose deadline passes when its func is called
// (or, at the latest, after max): Done closes and Err is
// context.DeadlineExceeded, as for a deadline on the clock.
type manualDeadline struct {
	context.Context
	done chan struct{}
	once sync.Once
}

func newManualDeadline(max time.Duration) (context.Context, func()) {
	d := &manualDeadline{Context: context.Background(), done: make(chan struct{})}
	t := time.AfterFunc(max, d.expire)
	return d, func() { t.Stop(); d.expire() }
}

func (d *manualDeadline) expire()               { d.once.Do(func() { close(d.done) }) }
func (d *manualDeadline) Done() <-chan struct{} { return d.done }
func (d *manualDeadline) Err() error {
	select {
	case <-d.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}
