package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestH1DirectPath(t *testing.T) {
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if d := r.URL.Query().Get("sleep"); d != "" {
			dur, _ := time.ParseDuration(d)
			select {
			case <-time.After(dur):
			case <-r.Context().Done():
				return
			}
		}
		w.Header().Set("Trailer", "X-Len")
		w.Write(bytes.ToUpper(b))
		w.Header().Set("X-Len", "n")
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	tr := NewTransport(TransportOptions{Protocol: UpstreamHTTP1, Addr: addr})
	if tr.h1 == nil {
		t.Fatal("a clear-text HTTP/1.1 transport has no direct path")
	}
	call := func(ctx context.Context, path, body string) (string, http.Header, error) {
		req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+addr+path, strings.NewReader(body))
		b := []byte(body)
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
		res, err := tr.RoundTrip(req)
		if err != nil {
			return "", nil, err
		}
		out, err := io.ReadAll(res.Body)
		res.Body.Close()
		return string(out), res.Trailer, err
	}

	for i := 0; i < 50; i++ {
		got, trailer, err := call(context.Background(), "/", "abc")
		if err != nil || got != "ABC" || trailer.Get("X-Len") != "n" {
			t.Fatalf("call %d: %q trailer %v, %v", i, got, trailer, err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("50 sequential calls used %d upstream connections, want 1 (keep-alive)", n)
	}

	// The upstream drops its idle connections: the next call is replayed on
	// a new one, not failed.
	srv.CloseClientConnections()
	time.Sleep(50 * time.Millisecond)
	if got, _, err := call(context.Background(), "/", "after"); err != nil || got != "AFTER" {
		t.Fatalf("after the upstream closed idle connections: %q, %v", got, err)
	}

	// A cancelled call returns at once with the context's error, and its
	// connection is not reused.
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	_, _, err := call(ctx, "/?sleep=5s", "slow")
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled call: %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("cancelled call returned after %v", d)
	}
	if got, _, err := call(context.Background(), "/", "next"); err != nil || got != "NEXT" {
		t.Fatalf("after a cancelled call: %q, %v", got, err)
	}

	// Concurrency grows the pool; the extra connections are kept while
	// recent load needed them.
	done := make(chan error, 8)
	for i := 0; i < 8; i++ {
		go func() {
			_, _, err := call(context.Background(), "/?sleep=100ms", "x")
			done <- err
		}()
	}
	for i := 0; i < 8; i++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	tr.h1.mu.Lock()
	idle := len(tr.h1.idle)
	tr.h1.mu.Unlock()
	if idle < 8 {
		t.Errorf("%d idle connections after 8 concurrent calls, want 8 kept for the next burst", idle)
	}
	tr.CloseIdleConnections()
}

// TestH1StaleIdleConnections: an upstream that closes idle keep-alive
// connections soon (uvicorn's default is 5 s) leaves every connection of
// the last burst dead in the pool; the next call goes through on a fresh
// one, whatever number of stale ones it meets first.
func TestH1StaleIdleConnections(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if d, err := time.ParseDuration(r.URL.Query().Get("sleep")); err == nil {
			time.Sleep(d)
		}
		w.Write(b)
	}))
	srv.Config.IdleTimeout = 50 * time.Millisecond
	srv.Start()
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	tr := NewTransport(TransportOptions{Protocol: UpstreamHTTP1, Addr: addr})
	defer tr.CloseIdleConnections()
	call := func(path, body string) (string, error) {
		req, _ := http.NewRequest("POST", "http://"+addr+path, strings.NewReader(body))
		b := []byte(body)
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
		res, err := tr.RoundTrip(req)
		if err != nil {
			return "", err
		}
		defer res.Body.Close()
		out, err := io.ReadAll(res.Body)
		return string(out), err
	}
	done := make(chan error, 4)
	for i := 0; i < 4; i++ {
		go func() {
			_, err := call("/?sleep=50ms", "x")
			done <- err
		}()
	}
	for i := 0; i < 4; i++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(200 * time.Millisecond) // the upstream closes them all
	if got, err := call("/", "after"); err != nil || got != "after" {
		t.Fatalf("after the upstream closed its idle connections: %q, %v", got, err)
	}
}

// TestH1NoReplayOfAPostTheUpstreamTook: a live keep-alive connection whose
// upstream reads a POST and dies without answering (a worker killed
// mid-inference) must not have the POST sent again on a new connection, as
// net/http would not: the upstream may have run it. Connections the
// upstream had closed while idle are told apart before anything is written.
func TestH1NoReplayOfAPostTheUpstreamTook(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var requests atomic.Int64
	go func() {
		for {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer nc.Close()
				br := bufio.NewReader(nc)
				for served := 0; ; served++ {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					if requests.Add(1) == 2 {
						return // the second request overall: taken, never answered
					}
					io.WriteString(nc, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				}
			}()
		}
	}()
	addr := l.Addr().String()
	tr := NewTransport(TransportOptions{Protocol: UpstreamHTTP1, Addr: addr})
	defer tr.CloseIdleConnections()
	call := func() error {
		b := []byte(`{"inputs":[]}`)
		req, _ := http.NewRequest("POST", "http://"+addr+"/v2/models/m/infer", bytes.NewReader(b))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
		res, err := tr.RoundTrip(req)
		if err != nil {
			return err
		}
		defer res.Body.Close()
		_, err = io.ReadAll(res.Body)
		return err
	}
	if err := call(); err != nil {
		t.Fatal(err)
	}
	if err := call(); err == nil {
		t.Error("the call the upstream died on succeeded: it was sent again")
	}
	if n := requests.Load(); n != 2 {
		t.Errorf("the upstream got %d requests, want 2: the POST it took was replayed", n)
	}
}

// TestH1PoolProbesOutsideTheLock: get probes idle connections (a system
// call each) without holding the pool's lock, which every call's get and
// put take; and it still skips those the probe finds closed.
func TestH1PoolProbesOutsideTheLock(t *testing.T) {
	p := newH1Pool(func(context.Context) (net.Conn, error) {
		return nil, errors.New("no dial expected")
	}, 4, time.Hour)
	var conns []*h1Conn
	for range 3 {
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		conns = append(conns, &h1Conn{nc: a})
	}
	p.peak = 3
	for _, c := range conns {
		p.inflight++
		p.put(c)
	}
	for _, c := range p.idle {
		c.used = time.Now().Add(-time.Second) // idle long enough to be probed
	}
	var probes int
	p.probe = func(nc net.Conn) (closed, ok bool) {
		probes++
		if !p.mu.TryLock() {
			t.Error("probe ran under the pool's lock")
		} else {
			p.mu.Unlock()
		}
		return nc == conns[2].nc, true // the most recently used one was closed
	}
	c, reused, err := p.get(context.Background())
	if err != nil || !reused || c != conns[1] || !c.live {
		t.Fatalf("get: %v reused %v, conn #%d live %v; want the second idle one, live", err, reused, slices.Index(conns, c), c != nil && c.live)
	}
	if probes != 2 {
		t.Errorf("%d probes, want 2", probes)
	}
	if len(p.idle) != 1 || p.inflight != 1 {
		t.Errorf("pool left with %d idle, %d in flight; want 1, 1", len(p.idle), p.inflight)
	}
}
