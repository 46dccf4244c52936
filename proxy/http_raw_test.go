package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/proxy/h1"
	"github.com/inferwatch/inferwatch/record"
)

// rawHTTPUpstream answers each request with the bytes resp holds for its
// path, on kept-alive connections: heads net/http's server would not send.
func rawHTTPUpstream(t *testing.T, resp map[string]string) string {
	t.Helper()
	l := listen(t)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					if _, err := io.WriteString(c, resp[req.URL.Path]); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { l.Close() })
	return l.Addr().String()
}

// TestHTTPNoContentTypeAdded: a response the upstream sent without a
// Content-Type reaches the client without one; the proxy does not guess.
func TestHTTPNoContentTypeAdded(t *testing.T) {
	up := rawHTTPUpstream(t, map[string]string{
		"/v2/models/m/infer": "HTTP/1.1 200 OK\r\nContent-Length: 13\r\n\r\n{\"outputs\":1}",
		"/bytes":             "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n\x00\x01\x02\x03",
		"/stream":            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
	})
	h := newHarness(t, up, false)
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	for _, client := range []struct {
		name string
		c    *http.Client
	}{
		{"http1", &http.Client{Transport: &http.Transport{DisableCompression: true}}},
		{"h2c", &http.Client{Transport: &http.Transport{Protocols: p, DisableCompression: true}}},
	} {
		for _, path := range []string{"/v2/models/m/infer", "/bytes", "/stream"} {
			res, err := client.c.Get("http://" + h.addr + path)
			if err != nil {
				t.Fatalf("%s GET %s: %v", client.name, path, err)
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if ct, ok := res.Header["Content-Type"]; ok {
				t.Errorf("%s GET %s: Content-Type %q added", client.name, path, ct)
			}
		}
	}
}

// TestHTTPUpstreamStatusOutOfRange: a status no HTTP server may send (099)
// is an upstream failure the client hears as a 502, and the call is
// recorded; relaying it panicked the handler, dropped the connection and
// lost the record.
func TestHTTPUpstreamStatusOutOfRange(t *testing.T) {
	up := rawHTTPUpstream(t, map[string]string{"/odd": "HTTP/1.1 099 Odd\r\nContent-Length: 1\r\n\r\nA"})
	h := newHarness(t, up, false)
	res, err := http.Get("http://" + h.addr + "/odd")
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusBadGateway {
		t.Errorf("status %d, want 502", res.StatusCode)
	}
	if r := h.waitRecords(1)[0]; r.Code != "502" || r.ErrorKind != record.ErrUpstreamUnavailable {
		t.Errorf("record %q %q, want 502 %q", r.Code, r.ErrorKind, record.ErrUpstreamUnavailable)
	}
}

// TestHTTPLeadingBlankLine: a request preceded by an empty line (RFC 9112
// §2.2: ignored) is answered; the frame plane's sniffing closed the
// connection unanswered.
func TestHTTPLeadingBlankLine(t *testing.T) {
	if testDataPlane() != "frame" {
		t.Skip("net/http's server skips blank lines only after a POST; it answers others 400")
	}
	up := rawHTTPUpstream(t, map[string]string{"/x": "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"})
	h := newHarness(t, up, false)
	for _, lead := range []string{"\r\n", "\n", "\r\n\r\n"} {
		c, err := net.Dial("tcp", h.addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second)) // a hang fails, not stalls, the test
		io.WriteString(c, lead+"GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%q before the request: no answer: %v", lead, err)
		}
		body, _ := io.ReadAll(res.Body)
		c.Close()
		if res.StatusCode != http.StatusOK || string(body) != "ok" {
			t.Errorf("%q before the request: %d %q, want 200 \"ok\"", lead, res.StatusCode, body)
		}
	}
}

// TestHTTPUpstreamHeadTooLarge: an upstream whose response head runs past
// maxResponseHeadBytes (header lines without end) fails the call as a bad
// upstream, 502, instead of the proxy reading it into memory whole, on the
// direct path and on net/http's transport (which took 10 MiB). Bytes after
// the first head (a 103's fields, say) count towards the bound too.
func TestHTTPUpstreamHeadTooLarge(t *testing.T) {
	pad := "X-Pad: " + strings.Repeat("a", 1000) + "\r\n"
	fields := strings.Repeat(pad, 2*maxResponseHeadBytes/len(pad))
	half := strings.Repeat(pad, maxResponseHeadBytes/2/len(pad)+1)
	up := rawHTTPUpstream(t, map[string]string{
		"/big":     "HTTP/1.1 200 OK\r\n" + fields + "Content-Length: 2\r\n\r\nok",
		"/chunked": "HTTP/1.1 200 OK\r\n" + fields + "Transfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
		"/1xx":     "HTTP/1.1 103 Early Hints\r\n" + half + "\r\nHTTP/1.1 200 OK\r\n" + half + "Content-Length: 2\r\n\r\nok",
		"/fine":    "HTTP/1.1 200 OK\r\n" + half + "Content-Length: 2\r\n\r\nok",
	})
	for _, path := range upstreamPaths {
		t.Run(path.name, func(t *testing.T) {
			h := newHarness(t, up, false, path.tweak(up))
			for i, tc := range []struct {
				path string
				want int
			}{
				{"/big", http.StatusBadGateway},
				{"/chunked", http.StatusBadGateway},
				{"/1xx", http.StatusBadGateway},
				{"/fine", http.StatusOK},
			} {
				res, err := http.Get("http://" + h.addr + tc.path)
				if err != nil {
					t.Fatalf("GET %s: no answer: %v", tc.path, err)
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != tc.want {
					t.Errorf("GET %s: status %d, want %d", tc.path, res.StatusCode, tc.want)
				}
				r := h.waitRecords(i + 1)[i]
				if tc.want == http.StatusBadGateway && (r.Code != "502" || r.ErrorKind != record.ErrUpstreamUnavailable) {
					t.Errorf("GET %s: record %q %q, want 502 %q", tc.path, r.Code, r.ErrorKind, record.ErrUpstreamUnavailable)
				}
			}
		})
	}
}

// upstreamPaths are the two ways an HTTP/1.1 request reaches a clear-text
// upstream: the direct keep-alive pool (h1.go), which in-memory bodies
// take, and net/http's transport, which streamed bodies and TLS upstreams
// take (here every request, the pool being off).
var upstreamPaths = []struct {
	name  string
	tweak func(upstream string) func(*Options)
}{
	{"direct", func(string) func(*Options) { return func(*Options) {} }},
	{"transport", func(string) func(*Options) {
		return func(o *Options) {
			tr := NewTransport(TransportOptions{Protocol: UpstreamHTTP1}) // no Addr: no direct path
			o.Transport, o.UpstreamRTT = tr, tr.RTT
		}
	}},
}

// TestHTTPConnectionNamedFields: fields the Connection header names are
// hop-by-hop (RFC 9110 §7.6.1) and go no further, either way. An upstream's
// "Connection: close, X-Foo" lost its Connection field while its head was
// read, and X-Foo reached the client.
func TestHTTPConnectionNamedFields(t *testing.T) {
	const body = "2\r\nok\r\n0\r\n\r\n"
	up := rawHTTPUpstream(t, map[string]string{
		"/close":         "HTTP/1.1 200 OK\r\nConnection: close, X-Foo\r\nX-Foo: 1\r\nX-Kept: 1\r\nContent-Length: 2\r\n\r\nok",
		"/close-chunked": "HTTP/1.1 200 OK\r\nConnection: X-Foo\r\nconnection: close\r\nX-Foo: 1\r\nX-Kept: 1\r\nTransfer-Encoding: chunked\r\n\r\n" + body,
		"/keep":          "HTTP/1.1 200 OK\r\nConnection: X-Foo\r\nX-Foo: 1\r\nX-Kept: 1\r\nContent-Length: 2\r\n\r\nok",
	})
	h := newHarness(t, up, false)
	for _, path := range []string{"/close", "/close-chunked", "/keep"} {
		res, err := http.Get("http://" + h.addr + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if string(b) != "ok" || res.Header.Get("X-Kept") != "1" {
			t.Errorf("GET %s: body %q, X-Kept %q", path, b, res.Header.Get("X-Kept"))
		}
		if v, ok := res.Header["X-Foo"]; ok {
			t.Errorf("GET %s: X-Foo %q reached the client though Connection named it", path, v)
		}
	}

	seen := make(chan http.Header, 1)
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Clone()
	}))
	defer echo.Close()
	h2 := newHarness(t, strings.TrimPrefix(echo.URL, "http://"), false)
	req, _ := http.NewRequest("GET", "http://"+h2.addr+"/", nil)
	req.Header.Set("Connection", "X-Bar")
	req.Header.Set("X-Bar", "1")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if got := <-seen; got["X-Bar"] != nil || got["Connection"] != nil {
		t.Errorf("upstream got Connection %q, X-Bar %q", got["Connection"], got["X-Bar"])
	}
}

// TestHTTPMalformedChunkedBody: a request body whose chunked framing is
// broken is the client's fault: it gets 400 and the call is recorded as
// bad_request, not as the upstream failing (502 upstream_unavailable).
func TestHTTPMalformedChunkedBody(t *testing.T) {
	up := rawHTTPUpstream(t, map[string]string{"/x": "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"})
	h := newHarness(t, up, false)
	for i, body := range []string{
		"zz\r\nhello\r\n0\r\n\r\n",          // not a hex size
		"5\r\nhelloXX3\r\nabc\r\n0\r\n\r\n", // no CRLF after the data
	} {
		c, err := net.Dial("tcp", h.addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second)) // a hang fails, not stalls, the test
		io.WriteString(c, "POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"+body)
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%q: no answer: %v", body, err)
		}
		res.Body.Close()
		c.Close()
		if res.StatusCode != http.StatusBadRequest {
			t.Errorf("%q: status %d, want 400", body, res.StatusCode)
		}
		if r := h.waitRecords(i + 1)[i]; r.Code != "400" || r.ErrorKind != record.ErrBadRequest {
			t.Errorf("%q: record %q %q, want 400 %q", body, r.Code, r.ErrorKind, record.ErrBadRequest)
		}
	}
}

// TestMalformedBody: only a body's own broken framing is the client's
// fault; a body closed under a transport's read or a connection cut short
// is not (taken for one, a gRPC call cut by a dying upstream was answered
// INTERNAL).
func TestMalformedBody(t *testing.T) {
	stdlib := func(body string) error {
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + body)))
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.ReadAll(req.Body)
		return err
	}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"h1 plane", fmt.Errorf("read: %w", h1.ErrMalformedBody), true},
		{"net/http bad size", stdlib("zz\r\n"), true},
		{"net/http no CRLF after data", stdlib("1\r\naXX0\r\n\r\n"), true},
		{"cut short", stdlib("5\r\nab"), false},
		{"none", nil, false},
		{"closed body", errors.New("http: invalid Read on closed Body"), false},
	} {
		if got := malformedBody(tc.err); got != tc.want {
			t.Errorf("%s (%v): %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

// TestHTTPUpstreamLengthRepeats: an upstream answer whose Content-Length
// repeats one value, as a list or as fields, is that answer (RFC 9110
// §8.6); values that differ make it a 502. A list was a 502 too. net/http's
// transport refuses a list: only the direct path, whose head reader is
// ours, takes it.
func TestHTTPUpstreamLengthRepeats(t *testing.T) {
	up := rawHTTPUpstream(t, map[string]string{
		"/list":          "HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\n\r\nok",
		"/fields":        "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok",
		"/differ":        "HTTP/1.1 200 OK\r\nContent-Length: 2, 3\r\n\r\nok",
		"/differ-fields": "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok",
	})
	for _, path := range upstreamPaths {
		t.Run(path.name, func(t *testing.T) {
			h := newHarness(t, up, false, path.tweak(up))
			list := http.StatusBadGateway
			if path.name == "direct" {
				list = http.StatusOK
			}
			for _, tc := range []struct {
				path string
				want int
			}{
				{"/list", list},
				{"/fields", http.StatusOK},
				{"/differ", http.StatusBadGateway},
				{"/differ-fields", http.StatusBadGateway},
			} {
				res, err := http.Get("http://" + h.addr + tc.path)
				if err != nil {
					t.Fatalf("GET %s: no answer: %v", tc.path, err)
				}
				b, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if res.StatusCode != tc.want || (tc.want == http.StatusOK && (string(b) != "ok" || res.ContentLength != 2)) {
					t.Errorf("GET %s: %d %q length %d, want %d", tc.path, res.StatusCode, b, res.ContentLength, tc.want)
				}
			}
		})
	}
}
