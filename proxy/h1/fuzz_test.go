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
// may be refused here), looser is not.
func FuzzReadRequest(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: m\r\n\r\n",
		"POST /v2/models/m/infer HTTP/1.1\r\nHost: m\r\nContent-Length: 5\r\n\r\nhello",
		"POST /x HTTP/1.1\r\nHost: m\r\nTransfer-Encoding: chunked\r\nTrailer: X-A\r\n\r\n3;e=1\r\nabc\r\n0\r\nX-A: 1\r\n\r\n",
		"GET http://h:1/p?q HTTP/1.0\r\nConnection: keep-alive\r\nx-a:  b \r\nX-A: c\r\n\r\n",
		"\r\nOPTIONS * HTTP/1.1\r\nHost: m\r\nExpect: 100-continue\r\nContent-Length: 0\r\n\r\n",
		"GET / HTTP/1.1\nHost: m\nContent-Length: 2\nContent-Length: 2\n\nok",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		c := &conn{srv: &Server{MaxHeaderBytes: 4096}, remote: "192.0.2.1:1"}
		c.br = bufio.NewReaderSize(bytes.NewReader(raw), bufSize)
		req, err := c.readRequest()
		if err != nil {
			return
		}
		ours, oursErr := io.ReadAll(req.Body)

		// Blank lines before the request line are skipped here (RFC 9112
		// §2.2), not by http.ReadRequest.
		rest := raw
		for range maxLeadingBlankLines {
			if r, ok := bytes.CutPrefix(rest, []byte("\r\n")); ok {
				rest = r
			} else if r, ok := bytes.CutPrefix(rest, []byte("\n")); ok {
				rest = r
			}
		}
		ref, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(rest)))
		if err != nil {
			t.Fatalf("accepted here, refused by net/http (%v): %q", err, raw)
		}
		if req.Method != ref.Method || req.RequestURI != ref.RequestURI || req.Host != ref.Host ||
			req.ProtoMinor != ref.ProtoMinor || req.URL.String() != ref.URL.String() {
			t.Fatalf("head differs: %s %s %s 1.%d | net/http %s %s %s 1.%d",
				req.Method, req.RequestURI, req.Host, req.ProtoMinor, ref.Method, ref.RequestURI, ref.Host, ref.ProtoMinor)
		}
		if !req.Close && ref.Close {
			t.Fatalf("keeps the connection net/http would close: %q", raw)
		}
		// net/http keeps Transfer-Encoding's parsed form only.
		ourHdr := maps.Clone(req.Header)
		refHdr := maps.Clone(ref.Header)
		delete(refHdr, "Transfer-Encoding")
		if !maps.EqualFunc(ourHdr, refHdr, slices.Equal) {
			t.Fatalf("fields differ:\n here    %q\n net/http %q", ourHdr, refHdr)
		}
		if req.ContentLength != ref.ContentLength {
			t.Fatalf("length %d, net/http %d", req.ContentLength, ref.ContentLength)
		}
		theirs, theirErr := io.ReadAll(ref.Body)
		if oursErr == nil && theirErr == nil && !bytes.Equal(ours, theirs) {
			t.Fatalf("bodies differ: %q | %q", ours, theirs)
		}
		if oursErr == nil && theirErr != nil && !errors.Is(theirErr, io.ErrUnexpectedEOF) {
			t.Fatalf("body read whole here, net/http: %v", theirErr)
		}
		if oursErr == nil && theirErr == nil && len(req.Trailer) > 0 {
			for k, v := range req.Trailer {
				if !slices.Equal(v, ref.Trailer[k]) {
					t.Fatalf("trailer %s: %q, net/http %q", k, v, ref.Trailer[k])
				}
			}
		}
	})
}
