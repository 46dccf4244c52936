package h1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/internal/testenv"
)

// serve starts s on a loopback listener and returns its address.
func serve(t *testing.T, s *Server) string {
	t.Helper()
	return serveWrapped(t, s, nil)
}

// opaqueConn hides the descriptor of the connection it wraps, as TLS does.
type opaqueConn struct{ net.Conn }

// serveWrapped is serve with each accepted connection passed through wrap
// (nil: as accepted).
func serveWrapped(t *testing.T, s *Server, wrap func(net.Conn) net.Conn) string {
	t.Helper()
	if s.Logger == nil {
		s.Logger = slog.New(slog.DiscardHandler)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			if wrap != nil {
				c = wrap(c)
			}
			go s.ServeConn(c)
		}
	}()
	t.Cleanup(func() {
		l.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	return l.Addr().String()
}

// exchange writes raw on a new connection, half-closes it when close is
// set, and returns everything the server sent until it closed or went
// quiet for a moment.
func exchange(t *testing.T, addr, raw string, closeWrite bool) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	if closeWrite {
		c.(*net.TCPConn).CloseWrite()
	}
	var out strings.Builder
	buf := make([]byte, 4096)
	for {
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		n, err := c.Read(buf)
		out.Write(buf[:n])
		if err != nil {
			return out.String()
		}
	}
}

// echo answers with what it read of the request: method, target, host,
// headers it was asked about, body, trailers.
func echo(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		w.WriteHeader(http.StatusTeapot)
		fmt.Fprintf(w, "body error: %v", err)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s %s host=%s proto=%s len=%d close=%v body=%q", r.Method, r.RequestURI, r.Host, r.Proto, r.ContentLength, r.Close, b)
	if v := r.Header.Get("X-Ask"); v != "" {
		fmt.Fprintf(&sb, " %s=%q", v, r.Header.Values(v))
	}
	if len(r.Trailer) > 0 {
		keys := slices.Sorted(func(yield func(string) bool) {
			for k := range r.Trailer {
				if !yield(k) {
					return
				}
			}
		})
		for _, k := range keys {
			fmt.Fprintf(&sb, " trailer %s=%q", k, r.Trailer[k])
		}
	}
	w.Header().Set("Content-Length", fmt.Sprint(sb.Len()))
	io.WriteString(w, sb.String())
}

func TestRequests(t *testing.T) {
	addr := serve(t, &Server{Handler: http.HandlerFunc(echo)})
	for _, tc := range []struct {
		name, raw string
		want      []string // substrings of the whole answer, in order
		not       []string
	}{
		{name: "plain GET",
			raw:  "GET /v2/health/ready?x=1 HTTP/1.1\r\nHost: m\r\n\r\n",
			want: []string{"HTTP/1.1 200 OK\r\n", "Content-Length: ", "Date: ", `GET /v2/health/ready?x=1 host=m proto=HTTP/1.1 len=0 close=false body=""`}},
		{name: "content-length body",
			raw:  "POST /infer HTTP/1.1\r\nHost: m\r\nContent-Length: 5\r\n\r\nhello",
			want: []string{"200 OK", `POST /infer host=m proto=HTTP/1.1 len=5 close=false body="hello"`}},
		{name: "chunked body with extensions and trailers",
			raw:  "POST /infer HTTP/1.1\r\nHost: m\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n3;ext=1\r\nhel\r\n2\r\nlo\r\n0\r\nX-Sum: 42\r\nX-Extra: 1\r\n\r\n",
			want: []string{"200 OK", `len=-1 close=false body="hello" trailer X-Extra=["1"] trailer X-Sum=["42"]`}},
		{name: "lower-case names canonicalised, repeats kept",
			raw:  "GET / HTTP/1.1\r\nhost: m\r\nx-ask: X-Multi\r\nx-multi: a\r\nX-MULTI: b\r\n\r\n",
			want: []string{`X-Multi=["a" "b"]`}},
		{name: "value whitespace trimmed",
			raw:  "GET / HTTP/1.1\r\nHost: m\r\nX-Ask: X-V\r\nX-V: \t spaced out \t\r\n\r\n",
			want: []string{`X-V=["spaced out"]`}},
		{name: "bare LF line endings",
			raw:  "GET /lf HTTP/1.1\nHost: m\n\n",
			want: []string{"200 OK", "GET /lf host=m"}},
		{name: "leading blank line ignored",
			raw:  "\r\nGET /x HTTP/1.1\r\nHost: m\r\n\r\n",
			want: []string{"200 OK", "GET /x"}},
		{name: "absolute form sets the host",
			raw:  "GET http://model:8000/v2 HTTP/1.1\r\nHost: other\r\n\r\n",
			want: []string{"200 OK", "GET http://model:8000/v2 host=model:8000"}},
		{name: "HTTP/1.0 without Host closes",
			raw:  "GET /old HTTP/1.0\r\n\r\n",
			want: []string{"HTTP/1.1 200 OK", "Connection: close", "proto=HTTP/1.0", "close=true"}},
		{name: "HTTP/1.0 keep-alive kept",
			raw:  "GET /old HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
			want: []string{"Connection: keep-alive", "close=false"}},
		{name: "Connection: close honoured",
			raw:  "GET / HTTP/1.1\r\nHost: m\r\nConnection: close\r\n\r\n",
			want: []string{"Connection: close", "close=true"}},
		{name: "identical Content-Length repeats collapse",
			raw:  "POST / HTTP/1.1\r\nHost: m\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok",
			want: []string{"200 OK", `body="ok"`}},
		{name: "pipelined requests answered in order",
			raw:  "GET /1 HTTP/1.1\r\nHost: m\r\n\r\nPOST /2 HTTP/1.1\r\nHost: m\r\nContent-Length: 1\r\n\r\nxGET /3 HTTP/1.1\r\nHost: m\r\nConnection: close\r\n\r\n",
			want: []string{"GET /1 ", "POST /2 ", `body="x"`, "GET /3 "}},

		{name: "both framings refused",
			raw:  "POST / HTTP/1.1\r\nHost: m\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
			want: []string{"HTTP/1.1 400 Bad Request", "Connection: close", "both Transfer-Encoding and Content-Length"}, not: []string{"200 OK"}},
		{name: "conflicting lengths refused",
			raw:  "POST / HTTP/1.1\r\nHost: m\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
			want: []string{"400 Bad Request", "conflicting Content-Length"}},
		{name: "signed length refused",
			raw:  "POST / HTTP/1.1\r\nHost: m\r\nContent-Length: +3\r\n\r\nabc",
			want: []string{"400 Bad Request", "invalid Content-Length"}},
		{name: "unknown transfer coding",
			raw:  "POST / HTTP/1.1\r\nHost: m\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
			want: []string{"501 Not Implemented"}},
		{name: "missing Host",
			raw:  "GET / HTTP/1.1\r\n\r\n",
			want: []string{"400 Bad Request", "missing Host"}},
		{name: "invalid Host",
			raw:  "GET / HTTP/1.1\r\nHost: a b\r\n\r\n",
			want: []string{"400 Bad Request", "malformed Host"}},
		{name: "invalid Host in HTTP/1.0",
			raw:  "GET / HTTP/1.0\r\nHost: a\\b\r\n\r\n",
			want: []string{"400 Bad Request", "malformed Host"}},
		{name: "two Hosts",
			raw:  "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
			want: []string{"400 Bad Request", "repeated Host"}},
		{name: "obsolete folding",
			raw:  "GET / HTTP/1.1\r\nHost: m\r\nX-A: 1\r\n  2\r\n\r\n",
			want: []string{"400 Bad Request", "folding"}},
		{name: "space before colon",
			raw:  "GET / HTTP/1.1\r\nHost: m\r\nX-A : 1\r\n\r\n",
			want: []string{"400 Bad Request", "invalid header field name"}},
		{name: "control character in value",
			raw:  "GET / HTTP/1.1\r\nHost: m\r\nX-A: a\x00b\r\n\r\n",
			want: []string{"400 Bad Request", "invalid header field value"}},
		{name: "HTTP/2.0 request line",
			raw:  "GET / HTTP/2.0\r\nHost: m\r\n\r\n",
			want: []string{"505 HTTP Version Not Supported"}},
		{name: "garbage request line",
			raw:  "HELLO\r\n\r\n",
			want: []string{"400 Bad Request"}},
		{name: "CONNECT not proxied",
			raw:  "CONNECT model:443 HTTP/1.1\r\nHost: model:443\r\n\r\n",
			want: []string{"405 Method Not Allowed"}},
		{name: "bad chunk size reaches the handler as a body error",
			raw:  "POST / HTTP/1.1\r\nHost: m\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
			want: []string{"418 I'm a teapot", "Connection: close", "malformed chunked body"}},
		{name: "unsupported expectation",
			raw:  "POST / HTTP/1.1\r\nHost: m\r\nExpect: 200-ok\r\nContent-Length: 1\r\n\r\nx",
			want: []string{"417 Expectation Failed"}},
		{name: "forbidden trailer name",
			raw:  "POST / HTTP/1.1\r\nHost: m\r\nTransfer-Encoding: chunked\r\nTrailer: Content-Length\r\n\r\n0\r\n\r\n",
			want: []string{"400 Bad Request", "forbidden trailer"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := exchange(t, addr, tc.raw, true)
			rest := got
			for _, w := range tc.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("answer lacks %q (in order); whole answer:\n%s", w, got)
				}
				rest = rest[i+len(w):]
			}
			for _, n := range tc.not {
				if strings.Contains(got, n) {
					t.Fatalf("answer has %q:\n%s", n, got)
				}
			}
		})
	}
}

func TestHeadTooLarge(t *testing.T) {
	addr := serve(t, &Server{Handler: http.HandlerFunc(echo), MaxHeaderBytes: 1024})
	raw := "GET / HTTP/1.1\r\nHost: m\r\nX-Big: " + strings.Repeat("a", 8000) + "\r\n\r\n"
	if got := exchange(t, addr, raw, true); !strings.HasPrefix(got, "HTTP/1.1 431 ") {
		t.Fatalf("got %.200q", got)
	}
	// A long line under the limit is fine even past the read buffer.
	addr = serve(t, &Server{Handler: http.HandlerFunc(echo)})
	raw = "GET / HTTP/1.1\r\nHost: m\r\nX-Ask: X-Big\r\nX-Big: " + strings.Repeat("b", 3*bufSize) + "\r\n\r\n"
	if got := exchange(t, addr, raw, true); !strings.Contains(got, "200 OK") || !strings.Contains(got, strings.Repeat("b", 3*bufSize)) {
		t.Fatalf("got %.300q", got)
	}
}

func TestResponseFraming(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/length":
			w.Header().Set("Content-Length", "5")
			io.WriteString(w, "hello")
		case "/unknown":
			w.Header()["Content-Length"] = nil // the proxy's "send none"
			io.WriteString(w, "abc")
			w.(http.Flusher).Flush()
			io.WriteString(w, "de")
		case "/trailers":
			w.Header().Set("Trailer", "Grpc-Status, X-Sum")
			io.WriteString(w, "body")
			w.Header().Set("Grpc-Status", "0")
			w.Header().Set("X-Sum", "7")
			w.Header().Set(http.TrailerPrefix+"X-Late", "yes")
		case "/empty":
		case "/nocontent":
			w.WriteHeader(http.StatusNoContent)
		case "/short":
			w.Header().Set("Content-Length", "10")
			io.WriteString(w, "short")
		case "/abort":
			w.Header().Set("Content-Length", "10")
			io.WriteString(w, "half")
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		case "/early-hints":
			w.Header().Set("Link", "</x>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Del("Link")
			io.WriteString(w, "ok")
		}
	})
	addr := serve(t, &Server{Handler: h})
	const ok = "HTTP/1.1 200 OK\r\n"
	for _, tc := range []struct {
		name, raw string
		want      string // the whole answer, less its Date field
		keepOpen  bool   // connection still open after it (next request answered)
	}{
		{"length", "GET /length HTTP/1.1\r\nHost: m\r\n\r\n", ok + "Content-Length: 5\r\n\r\nhello", true},
		{"unknown length is chunked", "GET /unknown HTTP/1.1\r\nHost: m\r\n\r\n", ok + "Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n", true},
		{"unknown length in HTTP/1.0 ends with the close", "GET /unknown HTTP/1.0\r\n\r\n", ok + "Connection: close\r\n\r\nabcde", false},
		{"trailers", "GET /trailers HTTP/1.1\r\nHost: m\r\n\r\n", ok + "Trailer: Grpc-Status, X-Sum\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nbody\r\n0\r\nGrpc-Status: 0\r\nX-Sum: 7\r\nX-Late: yes\r\n\r\n", true},
		{"empty gets a zero length", "GET /empty HTTP/1.1\r\nHost: m\r\n\r\n", ok + "Content-Length: 0\r\n\r\n", true},
		{"HEAD has no body", "HEAD /length HTTP/1.1\r\nHost: m\r\n\r\n", ok + "Content-Length: 5\r\n\r\n", true},
		{"204", "GET /nocontent HTTP/1.1\r\nHost: m\r\n\r\n", "HTTP/1.1 204 No Content\r\n\r\n", true},
		{"short body closes", "GET /short HTTP/1.1\r\nHost: m\r\n\r\n", ok + "Content-Length: 10\r\n\r\nshort", false},
		{"abort cuts off", "GET /abort HTTP/1.1\r\nHost: m\r\n\r\n", ok + "Content-Length: 10\r\n\r\nhalf", false},
		{"early hints", "GET /early-hints HTTP/1.1\r\nHost: m\r\n\r\n", "HTTP/1.1 103 Early Hints\r\nLink: </x>; rel=preload\r\n\r\n" + ok + "Transfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const next = "GET /length HTTP/1.1\r\nHost: m\r\nConnection: close\r\n\r\n"
			const nextAnswer = ok + "Connection: close\r\nContent-Length: 5\r\n\r\nhello"
			got := dateField.ReplaceAllString(exchange(t, addr, tc.raw+next, true), "")
			want := tc.want
			if tc.keepOpen {
				want += nextAnswer
			}
			if got != want {
				t.Fatalf("answer (Date removed):\n got %q\nwant %q", got, want)
			}
		})
	}
}

var dateField = regexp.MustCompile(`Date: [^\r]*\r\n`)

func TestExpectContinue(t *testing.T) {
	addr := serve(t, &Server{Handler: http.HandlerFunc(echo)})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "POST /e HTTP/1.1\r\nHost: m\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n")
	br := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := br.ReadString('\n')
	if err != nil || line != "HTTP/1.1 100 Continue\r\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	br.ReadString('\n') // the blank line
	io.WriteString(c, "body")
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	if !strings.Contains(string(b), `body="body"`) {
		t.Fatalf("got %q", b)
	}

	// A handler that answers without reading: no 100, and the connection
	// closes rather than wait for a body the client will not send.
	addr = serve(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusRequestEntityTooLarge)
	})})
	got := exchange(t, addr, "POST /e HTTP/1.1\r\nHost: m\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n", false)
	if strings.Contains(got, "100 Continue") || !strings.Contains(got, "413 ") || !strings.Contains(got, "Connection: close") {
		t.Fatalf("got %q", got)
	}
}

// TestUnreadBodyDrained: a body the handler did not read is drained when
// small, so the next request on the connection is read right; a large one
// closes the connection.
func TestUnreadBodyDrained(t *testing.T) {
	addr := serve(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.URL.Path)
	})})
	got := exchange(t, addr, "POST /a HTTP/1.1\r\nHost: m\r\nContent-Length: 10\r\n\r\n0123456789GET /b HTTP/1.1\r\nHost: m\r\nConnection: close\r\n\r\n", true)
	if !strings.Contains(got, "\r\n/b\r\n") || strings.Count(got, "200 OK") != 2 {
		t.Fatalf("got %q", got)
	}
	big := strings.Repeat("x", maxDrainBytes+4096)
	got = exchange(t, addr, fmt.Sprintf("POST /a HTTP/1.1\r\nHost: m\r\nContent-Length: %d\r\n\r\n%sGET /b HTTP/1.1\r\nHost: m\r\n\r\n", len(big), big), true)
	if strings.Count(got, "200 OK") != 1 {
		t.Fatalf("got %q", got)
	}
}

// TestClientGoneCancels: a call that outlives WatchAfter has its context
// cancelled with ErrClientGone when the client closes the connection; one
// whose client stays is not. Both watches: the hangup poller's (a TCP
// connection) and the one-byte read's (a connection without a descriptor).
func TestClientGoneCancels(t *testing.T) {
	for _, tc := range []struct {
		name   string
		wrap   func(net.Conn) net.Conn
		polled bool // on Linux
	}{
		{name: "tcp", polled: true},
		{name: "opaque", wrap: func(c net.Conn) net.Conn { return opaqueConn{c} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testClientGone(t, tc.wrap, tc.polled && runtime.GOOS == "linux")
		})
	}
}

func testClientGone(t *testing.T, wrap func(net.Conn) net.Conn, polled bool) {
	causes := make(chan error, 2)
	watchedBy := make(chan bool, 1) // polled: the call's watch was the poller's
	addr := serveWrapped(t, &Server{WatchAfter: 5 * time.Millisecond, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body) // the connection is watched once it is idle
		// The leaving client's call waits long enough for any machine to
		// notice; the staying ones, long enough to be watched.
		wait := 300 * time.Millisecond
		if r.URL.Path == "/slow" {
			wait = 10 * time.Second
			time.Sleep(50 * time.Millisecond)
			watchedBy <- hangupsWatching() > 0
		}
		select {
		case <-r.Context().Done():
			causes <- context.Cause(r.Context())
		case <-time.After(wait):
			causes <- nil
			io.WriteString(w, "done")
		}
	})}, wrap)
	// A client leaves mid-call (at once: before the call has run
	// WatchAfter); its call's context ends with ErrClientGone.
	leave := func(name string, atOnce bool) {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, "POST /slow HTTP/1.1\r\nHost: m\r\nContent-Length: 2\r\n\r\nhi")
		if atOnce {
			c.Close()
		}
		if got := <-watchedBy; got != polled {
			t.Errorf("%s: watched by the hangup poller: %v, want %v", name, got, polled)
		}
		c.Close()
		select {
		case err := <-causes:
			if !errors.Is(err, ErrClientGone) {
				t.Fatalf("%s: cause %v, want ErrClientGone", name, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: the handler never saw the client leave", name)
		}
	}
	leave("client leaving mid-call", false)
	leave("client leaving at once", true)
	got := exchange(t, addr, "GET /stay HTTP/1.1\r\nHost: m\r\nConnection: close\r\n\r\n", false)
	if err := <-causes; err != nil || !strings.Contains(got, "\r\ndone\r\n") {
		t.Fatalf("client that stayed: cause %v, answer %q", err, got)
	}
	// A pipelined request is not taken for a leaving client, and still
	// answered after the watched call.
	got = exchange(t, addr, "GET /1 HTTP/1.1\r\nHost: m\r\n\r\nGET /2 HTTP/1.1\r\nHost: m\r\nConnection: close\r\n\r\n", false)
	<-causes
	<-causes
	if strings.Count(got, "done") != 2 {
		t.Fatalf("pipelined: %q", got)
	}
	if n := hangupsWatching(); n != 0 {
		t.Errorf("%d connections still registered with the hangup poller after every call ended", n)
	}
}

// TestHalfClosedClientAnswered: a client that half-closes its connection
// after its request (it has nothing more to send) still gets the answer of
// a call shorter than WatchAfter, on both watches, though the FIN arrived
// while the call ran.
func TestHalfClosedClientAnswered(t *testing.T) {
	for _, wrap := range []func(net.Conn) net.Conn{nil, func(c net.Conn) net.Conn { return opaqueConn{c} }} {
		addr := serveWrapped(t, &Server{WatchAfter: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(50 * time.Millisecond) // the FIN is in by now
			if err := r.Context().Err(); err != nil {
				t.Errorf("context: %v", err)
			}
			io.WriteString(w, "answer")
		})}, wrap)
		got := exchange(t, addr, "GET /a HTTP/1.1\r\nHost: m\r\n\r\n", true)
		if !strings.Contains(got, "\r\nanswer\r\n") {
			t.Errorf("polled %v: got %q", wrap == nil, got)
		}
	}
}

// TestShutdown: idle connections close at once, an active call finishes
// with Connection: close, and Shutdown returns when it has.
func TestShutdown(t *testing.T) {
	started := make(chan struct{})
	release := make(chan struct{})
	s := &Server{Logger: slog.New(slog.DiscardHandler), Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(started)
			<-release
		}
		io.WriteString(w, "ok")
	})}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go s.ServeConn(c)
		}
	}()
	idle, _ := net.Dial("tcp", l.Addr().String())
	defer idle.Close()
	io.WriteString(idle, "GET /fast HTTP/1.1\r\nHost: m\r\n\r\n")
	br := bufio.NewReader(idle)
	if res, err := http.ReadResponse(br, nil); err != nil || res.StatusCode != 200 {
		t.Fatal(res, err)
	} else {
		io.ReadAll(res.Body)
	}
	busy, _ := net.Dial("tcp", l.Addr().String())
	defer busy.Close()
	io.WriteString(busy, "GET /slow HTTP/1.1\r\nHost: m\r\n\r\n")
	<-started
	done := make(chan error, 1)
	go func() { done <- s.Shutdown(context.Background()) }()
	idle.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("idle connection: %v, want EOF", err)
	}
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned %v with a call in flight", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	res, err := http.ReadResponse(bufio.NewReader(busy), nil)
	if err != nil || res.StatusCode != 200 || !res.Close {
		t.Fatalf("in-flight call: %v %v (close %v)", res, err, res != nil && res.Close)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestConcurrentClients runs keep-alive clients through net/http's client,
// checking each answer is its own request's.
func TestConcurrentClients(t *testing.T) {
	addr := serve(t, &Server{Handler: http.HandlerFunc(echo)})
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	defer c.CloseIdleConnections()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				body := strings.Repeat(fmt.Sprint(g), i*37)
				res, err := c.Post(fmt.Sprintf("http://%s/c/%d/%d", addr, g, i), "text/plain", strings.NewReader(body))
				if err != nil {
					errs <- err
					return
				}
				b, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if want := fmt.Sprintf("POST /c/%d/%d host=%s proto=HTTP/1.1 len=%d close=false body=%q", g, i, addr, len(body), body); string(b) != want {
					errs <- fmt.Errorf("got %q, want %q", b, want)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// vectorConn is a connection that writes pieces in one call, as the
// proxy's raw TCP connections do with writev; it counts those calls.
type vectorConn struct {
	net.Conn
	calls *atomic.Int32
}

func (c vectorConn) WriteBuffers(bufs ...[]byte) (int64, error) {
	c.calls.Add(1)
	n, err := c.Write(bytes.Join(bufs, nil))
	return int64(n), err
}

// TestLargeChunksVectored: a streamed body's chunks larger than the write
// buffer go out as one WriteBuffers each (size line, data, CRLF), framed
// exactly as the buffered path frames the small ones around them.
func TestLargeChunksVectored(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 3000) // 48000 bytes
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Length"] = nil
		io.WriteString(w, "head")
		w.(http.Flusher).Flush()
		w.Write(big)
		w.(http.Flusher).Flush()
		w.Write(big[:5000])
		w.(http.Flusher).Flush()
		io.WriteString(w, "tail")
	})
	var calls atomic.Int32
	addr := serveWrapped(t, &Server{Handler: h}, func(c net.Conn) net.Conn { return vectorConn{c, &calls} })
	got := dateField.ReplaceAllString(exchange(t, addr, "GET / HTTP/1.1\r\nHost: m\r\nConnection: close\r\n\r\n", true), "")
	want := "HTTP/1.1 200 OK\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n" +
		"4\r\nhead\r\n" + "bb80\r\n" + string(big) + "\r\n" + "1388\r\n" + string(big[:5000]) + "\r\n" + "4\r\ntail\r\n0\r\n\r\n"
	if got != want {
		t.Fatalf("answer of %d bytes, want %d (same: %v)", len(got), len(want), got == want)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("%d vectored writes, want one for each chunk past the buffer (2)", n)
	}
}

// TestEarlyAnswerDelivered: a handler answers without reading a body too
// large to drain, so the connection ends while the client is still
// sending. Closing a socket with unread bytes resets it and drops what the
// kernel had yet to send; the client, reading slowly, must still get the
// whole response.
func TestEarlyAnswerDelivered(t *testing.T) {
	const size = 4 << 20
	addr := serve(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(size))
		w.WriteHeader(http.StatusRequestEntityTooLarge)
		w.Write(bytes.Repeat([]byte{'r'}, size))
	})})
	c := testenv.DialReceiveBuffer(t, addr, 8<<10)
	go func() {
		fmt.Fprintf(c, "POST /x HTTP/1.1\r\nHost: m\r\nContent-Length: %d\r\n\r\n", 64<<20)
		chunk := make([]byte, 64<<10)
		for range 1024 {
			if _, err := c.Write(chunk); err != nil {
				return
			}
		}
	}()
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The client reads as fast as it can: the server's write returns with
	// most of the body still in its send queue (the client's buffer is 8
	// KiB), so a close without lingering resets it all the same, while the
	// linger is bounded (500 ms, as net/http's): a client that paused
	// between reads could need longer on a loaded machine and lose the tail.
	buf := make([]byte, 16<<10)
	n := 0
	for n < size {
		m, err := res.Body.Read(buf)
		n += m
		if err != nil {
			break
		}
	}
	if res.StatusCode != http.StatusRequestEntityTooLarge || n != size {
		t.Errorf("got %s and %d of %d body bytes", res.Status, n, size)
	}
}

// TestHijack: a handler that takes the connection over (an upgrade) gets
// every byte the client sent after the head, those a watching read took
// included; the server neither writes nor closes the connection again,
// and Shutdown does not wait for it.
func TestHijack(t *testing.T) {
	for _, tc := range []struct {
		name string
		wrap func(net.Conn) net.Conn
	}{
		{"polled", nil},
		{"watched by a read", func(c net.Conn) net.Conn { return opaqueConn{c} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			writeErr := make(chan error, 1)
			s := &Server{WatchAfter: 5 * time.Millisecond, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				time.Sleep(60 * time.Millisecond) // the watch has begun, and read
				nc, brw, err := http.NewResponseController(w).Hijack()
				if err != nil {
					t.Errorf("hijack: %v", err)
					return
				}
				_, err = w.Write([]byte("not on the wire"))
				writeErr <- err
				go func() { // outlives the handler, as an upgraded session does
					defer nc.Close()
					brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
					brw.Flush()
					for {
						line, err := brw.ReadString('\n')
						if err != nil {
							return
						}
						brw.WriteString("echo " + line)
						brw.Flush()
					}
				}()
			})}
			addr := serveWrapped(t, s, tc.wrap)
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
			time.Sleep(30 * time.Millisecond)
			io.WriteString(c, "early\n")
			br := bufio.NewReader(c)
			res, err := http.ReadResponse(br, nil)
			if err != nil || res.StatusCode != http.StatusSwitchingProtocols {
				t.Fatalf("answer %v, %v", res, err)
			}
			if err := <-writeErr; !errors.Is(err, http.ErrHijacked) {
				t.Errorf("write after the hijack: %v, want http.ErrHijacked", err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if err := s.Shutdown(ctx); err != nil {
				t.Errorf("Shutdown waited for a hijacked connection: %v", err)
			}
			io.WriteString(c, "late\n")
			for _, want := range []string{"echo early\n", "echo late\n"} {
				if line, err := br.ReadString('\n'); line != want {
					t.Fatalf("read %q, %v; want %q", line, err, want)
				}
			}
		})
	}
}
