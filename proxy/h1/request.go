package h1

import (
	"bufio"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// httpError is a request the server answers itself, with status, before
// closing the connection.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return strconv.Itoa(e.status) + " " + e.msg }

func badRequest(msg string) error { return &httpError{status: http.StatusBadRequest, msg: msg} }

// MaxLeadingBlankLines is how many empty lines may precede a request line
// (RFC 9112 §2.2: a server should ignore at least one); the listener's
// protocol sniffing reads past as many.
const MaxLeadingBlankLines = 4

// readRequest reads one request head from c and sets up its body. All
// strings of the head (method, target, names, values) are cut from one
// conversion of its bytes.
func (c *conn) readRequest() (*http.Request, error) {
	budget := c.srv.maxHeaderBytes() + 4096 // net/http's slack for the request line
	c.head = c.head[:0]
	var lineStart, lineEnd int
	var err error
	for blank := 0; ; blank++ {
		if lineStart, lineEnd, err = c.readLine(&budget); err != nil {
			return nil, err
		}
		if lineEnd > lineStart {
			break
		}
		if blank >= MaxLeadingBlankLines {
			return nil, badRequest("empty request line")
		}
	}
	reqLine := [2]int{lineStart, lineEnd}
	var fieldsArr [32]field
	fields := fieldsArr[:0]
	for {
		s, e, err := c.readLine(&budget)
		if err != nil {
			return nil, err
		}
		if e == s {
			break
		}
		colon, problem := checkField(c.head[s:e])
		if problem != "" {
			return nil, badRequest(problem)
		}
		fields = append(fields, field{s, s + colon, e})
	}

	all := string(c.head) // the one string allocation of the head
	line := all[reqLine[0]:reqLine[1]]
	sp1 := strings.IndexByte(line, ' ')
	sp2 := strings.LastIndexByte(line, ' ')
	if sp1 <= 0 || sp2 == sp1 {
		return nil, badRequest("malformed request line")
	}
	method, target, proto := line[:sp1], line[sp1+1:sp2], line[sp2+1:]
	if !validToken(method) {
		return nil, badRequest("invalid method")
	}
	if target == "" || strings.ContainsAny(target, " \t") {
		return nil, badRequest("malformed request target")
	}
	var minor int
	switch proto {
	case "HTTP/1.1":
		minor = 1
	case "HTTP/1.0":
	default:
		if strings.HasPrefix(proto, "HTTP/") {
			return nil, &httpError{status: http.StatusHTTPVersionNotSupported, msg: "unsupported protocol version"}
		}
		return nil, badRequest("malformed request line")
	}
	if method == http.MethodConnect {
		return nil, &httpError{status: http.StatusMethodNotAllowed, msg: "CONNECT is not proxied"}
	}
	u, err := url.ParseRequestURI(target)
	if err != nil {
		return nil, badRequest("malformed request target")
	}

	hdr := header(all, fields)
	req := &http.Request{
		Method:     method,
		URL:        u,
		Proto:      proto,
		ProtoMajor: 1,
		ProtoMinor: minor,
		Header:     hdr,
		RequestURI: target,
		RemoteAddr: c.remote,
		TLS:        c.tls,
	}
	hosts := hdr["Host"]
	switch {
	case len(hosts) > 1:
		return nil, badRequest("repeated Host header")
	case len(hosts) == 0 && minor == 1:
		return nil, badRequest("missing Host header")
	case len(hosts) == 1:
		// RFC 9112 §3.2 asks a 400 for an invalid Host; forwarded, net/http's
		// transport would send the upstream an empty Host in its place.
		if !httpguts.ValidHostHeader(hosts[0]) {
			return nil, badRequest("malformed Host header")
		}
		req.Host = hosts[0]
	}
	delete(hdr, "Host")
	if u.Host != "" { // absolute form: its authority wins (RFC 9112 §3.2.2)
		req.Host = u.Host
	}
	req.Close = wantsClose(hdr["Connection"], minor)
	if err := c.framing(req); err != nil {
		return nil, err
	}
	return req, nil
}

// framing sets the request's body from its Content-Length or chunked
// Transfer-Encoding (RFC 9112 §6.3); a request with both, or with lengths
// that disagree, is refused: a smuggled second request hides there.
func (c *conn) framing(req *http.Request) error {
	hdr := req.Header
	te, hasTE := hdr["Transfer-Encoding"]
	cls, hasCL := hdr["Content-Length"]
	var b *body
	switch {
	case hasTE && hasCL:
		return badRequest("both Transfer-Encoding and Content-Length")
	case hasTE:
		if len(te) != 1 || !strings.EqualFold(te[0], "chunked") {
			return &httpError{status: http.StatusNotImplemented, msg: "unsupported transfer encoding"}
		}
		if req.ProtoMinor == 0 {
			return badRequest("chunked request in HTTP/1.0")
		}
		delete(hdr, "Transfer-Encoding")
		req.TransferEncoding = []string{"chunked"}
		req.ContentLength = -1
		b = &body{c: c, chunked: true}
		if tr, err := declaredTrailers(hdr["Trailer"]); err != nil {
			return err
		} else if tr != nil {
			req.Trailer = tr
			b.trailer = tr
		}
		delete(hdr, "Trailer") // as net/http: its keys are in Request.Trailer
	case hasCL:
		n, err := contentLength(cls)
		if err != nil {
			return err
		}
		req.ContentLength = n
		if len(cls) > 1 {
			hdr["Content-Length"] = cls[:1] // identical repeats: one, as net/http keeps it
		}
		if n > 0 {
			b = &body{c: c, remain: n}
		}
	}
	if exp, ok := hdr["Expect"]; ok {
		if len(exp) != 1 || !strings.EqualFold(exp[0], "100-continue") {
			return &httpError{status: http.StatusExpectationFailed, msg: "unsupported expectation"}
		}
		if b != nil && req.ProtoMinor == 1 {
			b.expect = true
		}
	}
	if b == nil {
		req.Body = http.NoBody
		return nil
	}
	req.Body = b
	return nil
}

// readLine appends the next line to c.head and returns its span, less the
// line ending (CRLF or a bare LF, as net/http accepts).
func (c *conn) readLine(budget *int) (start, end int, err error) {
	start = len(c.head)
	for {
		frag, err := c.br.ReadSlice('\n')
		if len(frag) > *budget {
			return 0, 0, &httpError{status: http.StatusRequestHeaderFieldsTooLarge, msg: "request head too large"}
		}
		*budget -= len(frag)
		c.head = append(c.head, frag...)
		if err == nil {
			break
		}
		if err != bufio.ErrBufferFull {
			if len(c.head) > 0 && isEOF(err) {
				return 0, 0, badRequest("truncated request head")
			}
			return 0, 0, err
		}
	}
	end = len(c.head) - 1
	if end > start && c.head[end-1] == '\r' {
		end--
	}
	return start, end, nil
}

func isEOF(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// contentLength parses Content-Length values: identical repeats collapse,
// anything but decimal digits is refused.
func contentLength(vv []string) (int64, error) {
	first := strings.TrimSpace(vv[0])
	for _, v := range vv[1:] {
		if strings.TrimSpace(v) != first {
			return 0, badRequest("conflicting Content-Length")
		}
	}
	if first == "" || len(first) > 18 {
		return 0, badRequest("invalid Content-Length")
	}
	var n int64
	for i := 0; i < len(first); i++ {
		d := first[i]
		if d < '0' || d > '9' {
			return 0, badRequest("invalid Content-Length")
		}
		n = n*10 + int64(d-'0')
	}
	return n, nil
}

// declaredTrailers turns the Trailer header's names into the keys of
// Request.Trailer, as net/http does; framing fields may not be trailers.
func declaredTrailers(vv []string) (http.Header, error) {
	var tr http.Header
	for _, v := range vv {
		for name := range strings.SplitSeq(v, ",") {
			name = strings.TrimSpace(name)
			if name == "" {
				continue
			}
			if !validToken(name) {
				return nil, badRequest("invalid trailer name")
			}
			k := http.CanonicalHeaderKey(name)
			if framingField(k) {
				return nil, badRequest("forbidden trailer " + k)
			}
			if tr == nil {
				tr = make(http.Header)
			}
			tr[k] = nil
		}
	}
	return tr, nil
}

// wantsClose says the client asked the connection to end after this
// request: "Connection: close", or HTTP/1.0 without keep-alive.
func wantsClose(conn []string, minor int) bool {
	return hasToken(conn, "close") || (minor == 0 && !hasToken(conn, "keep-alive"))
}

// framingField says a field may not be a trailer: it frames or routes the
// message (RFC 9110 §6.5.1).
func framingField(k string) bool {
	switch k {
	case "Transfer-Encoding", "Trailer", "Content-Length", "Host":
		return true
	}
	return false
}

// tokenChars are the bytes of an RFC 9110 token (tchar).
var tokenChars = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

// validToken and validValue take strings as well as bytes: converting a
// string of over 32 bytes to check it would allocate.
func validToken[T string | []byte](b T) bool {
	if len(b) == 0 {
		return false
	}
	for i := 0; i < len(b); i++ {
		if !tokenChars[b[i]] {
			return false
		}
	}
	return true
}

// validValue refuses control characters other than HTAB, and DEL, as
// net/http's httpguts.ValidHeaderFieldValue does.
func validValue[T string | []byte](b T) bool {
	for i := 0; i < len(b); i++ {
		if c := b[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// canonicalize rewrites a valid token in place into its canonical header
// form ("content-type" → "Content-Type"), as textproto does.
func canonicalize(b []byte) {
	upper := true
	for i, c := range b {
		if upper && 'a' <= c && c <= 'z' {
			b[i] = c - ('a' - 'A')
		} else if !upper && 'A' <= c && c <= 'Z' {
			b[i] = c + ('a' - 'A')
		}
		upper = c == '-'
	}
}
