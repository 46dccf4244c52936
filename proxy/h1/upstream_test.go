package h1

import (
	"bufio"
	"bytes"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

// compareResponses fails t when ours differs from net/http's reading of
// the same bytes, bodies included; ours may keep a Pragma net/http would
// have turned into a Cache-Control, and a Connection saying close that
// net/http drops; where ours takes a Content-Length list of one value
// net/http refuses, ours is net/http's reading of the bytes with the list
// made that value.
func compareResponses(t *testing.T, raw []byte, method string) {
	t.Helper()
	req := &http.Request{Method: method}
	br := bufio.NewReaderSize(bytes.NewReader(bytes.Clone(raw)), 4096)
	ours, oursErr := ReadResponse(br, req)
	ref, refErr := http.ReadResponse(bufio.NewReaderSize(bytes.NewReader(raw), 4096), req)
	if oursErr == nil && refErr != nil {
		ref, refErr = http.ReadResponse(bufio.NewReaderSize(bytes.NewReader(oneLength(raw)), 4096), req)
	}
	if (oursErr == nil) != (refErr == nil) {
		t.Fatalf("%q: error %v, net/http's %v", raw, oursErr, refErr)
	}
	if oursErr != nil {
		return
	}
	refHdr := ref.Header.Clone()
	if _, ok := ours.Header["Cache-Control"]; !ok && ours.Header["Pragma"] != nil {
		delete(refHdr, "Cache-Control")
	}
	if _, ok := ref.Header["Connection"]; !ok && ref.Close && ours.Header["Connection"] != nil {
		refHdr["Connection"] = ours.Header["Connection"] // net/http drops one saying close
	}
	if ours.Status != ref.Status || ours.StatusCode != ref.StatusCode || ours.Proto != ref.Proto ||
		ours.ContentLength != ref.ContentLength || ours.Close != ref.Close ||
		!maps.EqualFunc(ours.Header, refHdr, slices.Equal) || !maps.EqualFunc(ours.Trailer, ref.Trailer, slices.Equal) {
		t.Fatalf("%q:\nours %q %d %s len %d close %v %v trailer %v\nref  %q %d %s len %d close %v %v trailer %v", raw,
			ours.Status, ours.StatusCode, ours.Proto, ours.ContentLength, ours.Close, ours.Header, ours.Trailer,
			ref.Status, ref.StatusCode, ref.Proto, ref.ContentLength, ref.Close, refHdr, ref.Trailer)
	}
	ob, oErr := io.ReadAll(ours.Body)
	rb, rErr := io.ReadAll(ref.Body)
	if !bytes.Equal(ob, rb) || (oErr == nil) != (rErr == nil) {
		t.Fatalf("%q: body %q (%v), net/http's %q (%v)", raw, ob, oErr, rb, rErr)
	}
}

// lengthList is a Content-Length field listing values.
var lengthList = regexp.MustCompile(`(?im)^(content-length:[ \t]*)([^,\r\n]*?)[ \t]*((?:,[^,\r\n]*)+?)[ \t]*(\r?)$`)

// oneLength returns raw with each Content-Length list whose elements are
// all the same made that one element.
func oneLength(raw []byte) []byte {
	return lengthList.ReplaceAllFunc(raw, func(m []byte) []byte {
		g := lengthList.FindSubmatch(m)
		for _, e := range bytes.Split(g[3][1:], []byte(",")) {
			if string(bytes.Trim(e, " \t")) != string(g[2]) || len(g[2]) == 0 {
				return m
			}
		}
		return slices.Concat(g[1], g[2], g[4])
	})
}

func TestReadResponse(t *testing.T) {
	tests := []struct {
		name   string
		raw    string
		method string
		fast   bool // taken by the fast path
	}{
		{"length", "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}", "POST", true},
		{"bare LF, odd case, repeats", "HTTP/1.1 201 Created\ncontent-length: 3\nX-a:  1 \nx-A: 2\n\nabcEXTRA", "POST", true},
		{"identical lengths", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx", "GET", true},
		{"empty body", "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n", "GET", true},
		{"close", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\nx", "GET", true},
		{"no reason", "HTTP/1.1 200\r\nContent-Length: 1\r\n\r\nx", "GET", true},
		{"pragma kept", "HTTP/1.1 200 OK\r\nPragma: no-cache\r\nContent-Length: 1\r\n\r\nx", "GET", true},
		{"truncated body", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", "GET", true},
		{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n3\r\nabc\r\n0\r\nX-T: 1\r\n\r\n", "POST", false},
		{"close-delimited", "HTTP/1.1 200 OK\r\n\r\nabc", "GET", false},
		{"HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", "HEAD", false},
		{"204", "HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n", "GET", false},
		{"304", "HTTP/1.1 304 Not Modified\r\n\r\n", "GET", false},
		{"HTTP/1.0", "HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx", "GET", false},
		{"conflicting lengths", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxx", "GET", false},
		{"length list", "HTTP/1.1 200 OK\r\nContent-Length: 1, 1\r\n\r\nx", "GET", false},
		{"length list, repeated", "HTTP/1.1 200 OK\r\nContent-Length: 1,1 ,\t1\r\nContent-Length: 1\r\n\r\nx", "GET", false},
		{"length list, HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\n", "HEAD", false},
		{"length list, 1xx first", "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1, 1\r\n\r\nx", "GET", false},
		{"conflicting length list", "HTTP/1.1 200 OK\r\nContent-Length: 1, 2\r\n\r\nxx", "GET", false},
		{"length list, empty element", "HTTP/1.1 200 OK\r\nContent-Length: 1, , 1\r\n\r\nx", "GET", false},
		{"bad length", "HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\nx", "GET", false},
		{"bad code", "HTTP/1.1 2000 OK\r\nContent-Length: 1\r\n\r\nx", "GET", false},
		{"folded", "HTTP/1.1 200 OK\r\nX: a\r\n b\r\nContent-Length: 1\r\n\r\nx", "GET", false},
		{"bad name", "HTTP/1.1 200 OK\r\nX Y: a\r\nContent-Length: 1\r\n\r\nx", "GET", false},
		{"no head end", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n", "GET", false},
		{"head over the buffer", "HTTP/1.1 200 OK\r\nX: " + strings.Repeat("a", 5000) + "\r\nContent-Length: 1\r\n\r\nx", "GET", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			compareResponses(t, []byte(tt.raw), tt.method)
			br := bufio.NewReaderSize(strings.NewReader(tt.raw), 4096)
			fast := tt.method != http.MethodHead && fastResponse(br, &http.Request{Method: tt.method}) != nil
			if fast != tt.fast {
				t.Errorf("fast path %v, want %v", fast, tt.fast)
			}
		})
	}
}

// TestReadResponseLengthList: a Content-Length listing one value more than
// once is that value (RFC 9110 §8.6), whichever reader takes the head;
// values that differ are refused. net/http refuses any list.
func TestReadResponseLengthList(t *testing.T) {
	for _, tc := range []struct {
		raw, method string
		ok          bool
	}{
		{"HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\n\r\nok", "GET", true},
		{"HTTP/1.1 200 OK\r\nContent-Length: 2,2\r\nContent-Length: 2 , 2\r\n\r\nok", "POST", true},
		{"HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\n\r\n", "HEAD", true},
		{"HTTP/1.0 200 OK\r\nContent-Length: 2, 2\r\n\r\nok", "GET", true},
		{"HTTP/1.1 200 OK\r\nContent-Length: 2, 3\r\n\r\nok", "GET", false},
		{"HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\nContent-Length: 3\r\n\r\nok", "GET", false},
		{"HTTP/1.1 200 OK\r\nContent-Length: 2,\r\n\r\nok", "GET", false},
	} {
		res, err := ReadResponse(bufio.NewReader(strings.NewReader(tc.raw)), &http.Request{Method: tc.method})
		if !tc.ok {
			if err == nil {
				t.Errorf("%q: accepted, length %d", tc.raw, res.ContentLength)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q %s: %v", tc.raw, tc.method, err)
			continue
		}
		b, err := io.ReadAll(res.Body)
		wantBody := "ok"
		if tc.method == "HEAD" {
			wantBody = ""
		}
		if err != nil || res.ContentLength != 2 || !slices.Equal(res.Header["Content-Length"], []string{"2"}) || string(b) != wantBody {
			t.Errorf("%q %s: length %d, Content-Length %q, body %q %v", tc.raw, tc.method, res.ContentLength, res.Header["Content-Length"], b, err)
		}
	}
}

// Two answers back to back on one connection: each fast read leaves the
// next one's bytes in the buffer, read or not.
func TestReadResponseKeepAlive(t *testing.T) {
	raw := "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirstHTTP/1.1 404 Not Found\r\nContent-Length: 6\r\n\r\nsecond"
	br := bufio.NewReaderSize(strings.NewReader(raw), 4096)
	for _, want := range []struct {
		code int
		body string
	}{{200, "first"}, {404, "second"}} {
		res, err := ReadResponse(br, &http.Request{Method: "GET"})
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(res.Body)
		if err != nil || res.StatusCode != want.code || string(b) != want.body {
			t.Fatalf("%d %q %v, want %d %q", res.StatusCode, b, err, want.code, want.body)
		}
	}
}

// A head that arrives a byte a read is found as whole as one that arrives
// in one.
func TestReadResponseTrickle(t *testing.T) {
	raw := "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-A: 1\r\nContent-Length: 2\r\n\r\n{}"
	br := bufio.NewReaderSize(iotest.OneByteReader(strings.NewReader(raw)), 4096)
	res, err := ReadResponse(br, &http.Request{Method: "POST"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(res.Body)
	if err != nil || string(b) != "{}" || res.Header.Get("X-A") != "1" || res.ContentLength != 2 {
		t.Fatalf("%d %v len %d body %q %v", res.StatusCode, res.Header, res.ContentLength, b, err)
	}
	if _, ok := res.Body.(*lengthBody); !ok {
		t.Errorf("body %T: the trickled head did not take the fast path", res.Body)
	}
}

// FuzzReadResponse holds the response reader to net/http's on any bytes:
// the same answer or the same failure, the same body.
func FuzzReadResponse(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
		"HTTP/1.1 201 Created\ncontent-length: 3\nX-a:  1 \nx-A: 2\n\nabc",
		"HTTP/1.1 200 OK\r\nConnection: keep-alive, close\r\nContent-Length: 1\r\n\r\nx",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
	} {
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, raw []byte, head bool) {
		method := http.MethodGet
		if head {
			method = http.MethodHead
		}
		compareResponses(t, raw, method)
	})
}

// WriteRequest's bytes read back, by http.ReadRequest, as the request
// net/http's own Request.Write sends.
func TestWriteRequest(t *testing.T) {
	u, _ := url.Parse("http://up:8000/v2/models/m/infer?x=1&y=%2F")
	tests := []struct {
		name   string
		method string
		host   string
		hdr    http.Header
		body   string
		fast   bool
	}{
		{"json", "POST", "m.example:80", http.Header{"Content-Type": {"application/json"}, "User-Agent": {""}, "X-A": {"1", " 2 "}}, `{"inputs":[]}`, true},
		{"client agent", "POST", "m", http.Header{"User-Agent": {"curl/8", "second"}}, "x", true},
		{"empty POST", "POST", "m", http.Header{"User-Agent": {""}}, "", true},
		{"GET", "GET", "m", http.Header{"User-Agent": {""}, "Accept": {"*/*"}}, "", true},
		{"DELETE", "DELETE", "m", http.Header{"User-Agent": {""}}, "", true},
		{"framing fields dropped", "PUT", "m", http.Header{"User-Agent": {""}, "Content-Length": {"99"}, "Trailer": {"X"}, "Host": {"other"}}, "abc", true},
		{"line break in a value", "POST", "m", http.Header{"User-Agent": {""}, "X": {"a\r\nEvil: 1"}}, "x", false},
		{"non-ASCII host", "GET", "mödel", http.Header{"User-Agent": {""}}, "", false},
		{"bad field name", "GET", "m", http.Header{"User-Agent": {""}, "X Y": {"1"}}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mk := func() *http.Request {
				r := &http.Request{Method: tt.method, URL: u, Host: tt.host, Header: tt.hdr.Clone(), ProtoMajor: 1, ProtoMinor: 1}
				if tt.body != "" {
					r.Body = io.NopCloser(strings.NewReader(tt.body))
					r.ContentLength = int64(len(tt.body))
				}
				return r
			}
			if got := plainRequest(mk(), tt.host); got != tt.fast {
				t.Errorf("fast path %v, want %v", got, tt.fast)
			}
			var ours, ref bytes.Buffer
			bw := bufio.NewWriter(&ours)
			if err := WriteRequest(bw, mk()); err != nil {
				t.Fatal(err)
			}
			bw.Flush()
			if err := mk().Write(&ref); err != nil {
				t.Fatal(err)
			}
			o, err := http.ReadRequest(bufio.NewReader(&ours))
			if err != nil {
				t.Fatalf("%q: %v", ours.String(), err)
			}
			r, err := http.ReadRequest(bufio.NewReader(&ref))
			if err != nil {
				t.Fatal(err)
			}
			ob, _ := io.ReadAll(o.Body)
			rb, _ := io.ReadAll(r.Body)
			if o.Method != r.Method || o.RequestURI != r.RequestURI || o.Host != r.Host || o.ContentLength != r.ContentLength ||
				!maps.EqualFunc(o.Header, r.Header, slices.Equal) || !bytes.Equal(ob, rb) {
				t.Errorf("ours %s %s host %q len %d %v %q\nref  %s %s host %q len %d %v %q",
					o.Method, o.RequestURI, o.Host, o.ContentLength, o.Header, ob,
					r.Method, r.RequestURI, r.Host, r.ContentLength, r.Header, rb)
			}
		})
	}
}

// A body shorter than its declared length is an error, as in net/http.
func TestWriteRequestShortBody(t *testing.T) {
	u, _ := url.Parse("http://up/")
	r := &http.Request{Method: "POST", URL: u, Host: "m", Header: http.Header{}, Body: io.NopCloser(strings.NewReader("ab")), ContentLength: 3}
	if err := WriteRequest(bufio.NewWriter(io.Discard), r); err == nil {
		t.Fatal("no error for a 2-byte body declared as 3")
	}
}

// A head that arrives whole in one read, on an empty buffer, is read
// without waiting for a byte beyond it: after an interim 100 Continue the
// final answer comes that way, and nothing follows it until the next
// request.
func TestReadResponseWholeHeadNoMore(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	defer server.Close()
	go io.WriteString(server, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	br := bufio.NewReaderSize(client, 4096)
	// The deadline stands in for the upstream's next request, which never
	// comes while this one waits.
	start := time.Now()
	client.SetReadDeadline(start.Add(2 * time.Second))
	res, err := ReadResponse(br, &http.Request{Method: "POST"})
	if d := time.Since(start); err != nil || d > time.Second {
		t.Fatalf("read a whole head in %v (%v): it waited for a byte after it", d, err)
	}
	if b, err := io.ReadAll(res.Body); err != nil || string(b) != "ok" {
		t.Fatalf("body %q, %v", b, err)
	}
}

// TestReadResponseKeepsConnection: a Connection field saying close stays in
// the header on either path, so the proxy can drop the fields it names.
func TestReadResponseKeepsConnection(t *testing.T) {
	for _, tc := range []struct{ raw, method string }{
		{"HTTP/1.1 200 OK\r\nConnection: close, X-Foo\r\nX-Foo: 1\r\nContent-Length: 1\r\n\r\nx", "GET"},
		{"HTTP/1.1 200 OK\r\nConnection: close, X-Foo\r\nX-Foo: 1\r\nContent-Length: 1\r\n\r\nx", "HEAD"},
		{"HTTP/1.1 200 OK\r\nconnection: X-Foo\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n", "GET"},
		{"HTTP/1.0 200 OK\r\nConnection: close, X-Foo\r\n\r\nx", "GET"},
	} {
		res, err := ReadResponse(bufio.NewReader(strings.NewReader(tc.raw)), &http.Request{Method: tc.method})
		if err != nil {
			t.Fatalf("%q: %v", tc.raw, err)
		}
		if !res.Close || !hasToken(res.Header["Connection"], "close") || !hasToken(res.Header["Connection"], "x-foo") {
			t.Errorf("%q %s: close %v, Connection %q", tc.raw, tc.method, res.Close, res.Header["Connection"])
		}
	}
}
