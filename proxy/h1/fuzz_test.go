package h1

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"maps"
	"net/http"
	"slices"
	"testing"
)

// FuzzReadRequest holds the request parser to net/http's: whatever head
// this one accepts, http.ReadRequest accepts too, with the same method,
// target, host, version, fields and length, and the bodies both read whole
// are the same bytes. Stricter is allowed (a request net/http would take
// may be refused here), looser is not. The input is one connection's
// bytes: after a request whose body both read whole, and which does not
// close the connection, the next one is read from where each parser
// stopped (up to maxPipelined), so a body framed a byte differently —
// where a smuggled request would hide — shows as the next head differing.
func FuzzReadRequest(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: m\r\n\r\n",
		"POST /v2/models/m/infer HTTP/1.1\r\nHost: m\r\nContent-Length: 5\r\n\r\nhello",
		"POST /x HTTP/1.1\r\nHost: m\r\nTransfer-Encoding: chunked\r\nTrailer: X-A\r\n\r\n3;e=1\r\nabc\r\n0\r\nX-A: 1\r\n\r\n",
		"GET http://h:1/p?q HTTP/1.0\r\nConnection: keep-alive\r\nx-a:  b \r\nX-A: c\r\n\r\n",
		"\r\nOPTIONS * HTTP/1.1\r\nHost: m\r\nExpect: 100-continue\r\nContent-Length: 0\r\n\r\n",
		"GET / HTTP/1.1\nHost: m\nContent-Length: 2\nContent-Length: 2\n\nok",
		"POST /a HTTP/1.1\r\nHost: m\r\nContent-Length: 3\r\n\r\nabcGET /b HTTP/1.1\r\nHost: m\r\n\r\n",
		"POST /a HTTP/1.1\r\nHost: m\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n\r\nPOST /b HTTP/1.1\r\nHost: m\r\nContent-Length: 1\r\n\r\nz",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		c := &conn{srv: &Server{MaxHeaderBytes: 4096}, remote: "192.0.2.1:1"}
		c.br = bufio.NewReaderSize(bytes.NewReader(raw), bufSize)
		refBr := bufio.NewReader(bytes.NewReader(raw))
		for n := 0; n < maxPipelined; n++ {
			if !sameRequest(t, c, refBr, raw, n) {
				return
			}
		}
	})
}

// maxPipelined is how many requests of one input FuzzReadRequest compares.
const maxPipelined = 4

// sameRequest reads the next request from c and from refBr with
// http.ReadRequest, fails t where they disagree, and says whether both
// read it whole and the connection goes on.
func sameRequest(t *testing.T, c *conn, refBr *bufio.Reader, raw []byte, n int) bool {
	req, err := c.readRequest()
	if err != nil {
		return false
	}
	ours, oursErr := io.ReadAll(req.Body)

	// Blank lines before the request line are skipped here (RFC 9112
	// §2.2), not by http.ReadRequest.
	for range MaxLeadingBlankLines {
		if p, _ := refBr.Peek(2); bytes.Equal(p, []byte("\r\n")) {
			refBr.Discard(2)
		} else if len(p) > 0 && p[0] == '\n' {
			refBr.Discard(1)
		}
	}
	ref, err := http.ReadRequest(refBr)
	if err != nil {
		t.Fatalf("request %d accepted here, refused by net/http (%v): %q", n, err, raw)
	}
	if req.Method != ref.Method || req.RequestURI != ref.RequestURI || req.Host != ref.Host ||
		req.ProtoMinor != ref.ProtoMinor || req.URL.String() != ref.URL.String() {
		t.Fatalf("request %d head differs: %s %s %s 1.%d | net/http %s %s %s 1.%d", n,
			req.Method, req.RequestURI, req.Host, req.ProtoMinor, ref.Method, ref.RequestURI, ref.Host, ref.ProtoMinor)
	}
	if !req.Close && ref.Close {
		t.Fatalf("request %d keeps the connection net/http would close: %q", n, raw)
	}
	// net/http keeps Transfer-Encoding's parsed form only.
	ourHdr := maps.Clone(req.Header)
	refHdr := maps.Clone(ref.Header)
	delete(refHdr, "Transfer-Encoding")
	if !maps.EqualFunc(ourHdr, refHdr, slices.Equal) {
		t.Fatalf("request %d fields differ:\n here    %q\n net/http %q", n, ourHdr, refHdr)
	}
	if req.ContentLength != ref.ContentLength {
		t.Fatalf("request %d length %d, net/http %d", n, req.ContentLength, ref.ContentLength)
	}
	theirs, theirErr := io.ReadAll(ref.Body)
	if oursErr == nil && theirErr == nil && !bytes.Equal(ours, theirs) {
		t.Fatalf("request %d bodies differ: %q | %q", n, ours, theirs)
	}
	if oursErr == nil && theirErr != nil && !errors.Is(theirErr, io.ErrUnexpectedEOF) {
		t.Fatalf("request %d body read whole here, net/http: %v", n, theirErr)
	}
	if oursErr == nil && theirErr == nil && len(req.Trailer) > 0 {
		for k, v := range req.Trailer {
			if !slices.Equal(v, ref.Trailer[k]) {
				t.Fatalf("request %d trailer %s: %q, net/http %q", n, k, v, ref.Trailer[k])
			}
		}
	}
	return oursErr == nil && theirErr == nil && !req.Close
}
