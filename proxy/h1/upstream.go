package h1

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// The upstream half of an HTTP/1.1 exchange: writing a request whose body
// is in memory and reading the head of its answer. Each has a fast path for
// the messages an inference call is made of (a request of known length; a
// final response framed by Content-Length) and hands everything else to
// net/http's Request.Write and http.ReadResponse, unchanged. The fast
// paths are there for cost: net/http's writer and reader allocate a string
// per header line and value and a handful of framing structures per call,
// about 25 allocations of the proxy's 67 a JSON call.

// WriteRequest writes req, whose body is nil or holds req.ContentLength
// bytes in memory, on bw without flushing. The request line, Host and the
// header fields go out as net/http writes them (no User-Agent is added when
// the field is absent or empty; Content-Length 0 is sent for an empty POST,
// PUT or PATCH), except that fields keep their map order.
func WriteRequest(bw *bufio.Writer, req *http.Request) error {
	host := req.Host
	if host == "" && req.URL != nil {
		host = req.URL.Host
	}
	if !plainRequest(req, host) {
		return req.Write(bw)
	}
	bw.WriteString(req.Method)
	bw.WriteByte(' ')
	bw.WriteString(req.URL.RequestURI())
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.WriteString(host)
	bw.WriteString("\r\n")
	for k, vv := range req.Header {
		switch k {
		case "Host", "Content-Length", "Transfer-Encoding", "Trailer":
			continue
		case "User-Agent":
			if len(vv) == 0 || vv[0] == "" {
				continue
			}
			vv = vv[:1] // net/http sends the first only
		}
		for _, v := range vv {
			bw.WriteString(k)
			bw.WriteString(": ")
			bw.WriteString(strings.Trim(v, " \t"))
			bw.WriteString("\r\n")
		}
	}
	switch {
	case req.Body != nil:
		bw.WriteString("Content-Length: ")
		bw.WriteString(strconv.FormatInt(req.ContentLength, 10))
		bw.WriteString("\r\n\r\n")
		n, err := io.Copy(bw, req.Body)
		if err == nil && n != req.ContentLength {
			err = errors.New("http: ContentLength=" + strconv.FormatInt(req.ContentLength, 10) + " with Body length " + strconv.FormatInt(n, 10))
		}
		if err != nil {
			return err
		}
	case req.Method == http.MethodPost || req.Method == http.MethodPut || req.Method == http.MethodPatch:
		bw.WriteString("Content-Length: 0\r\n\r\n")
	default:
		bw.WriteString("\r\n")
	}
	return nil
}

// plainRequest says req can take WriteRequest's fast path: HTTP/1.1
// framing by length only, a clean host, and fields net/http would write
// unchanged (valid names, no line breaks in values).
func plainRequest(req *http.Request, host string) bool {
	if req.URL == nil || req.Close || len(req.TransferEncoding) > 0 || len(req.Trailer) > 0 ||
		!validToken(req.Method) || req.Method == http.MethodConnect {
		return false
	}
	if (req.Body == nil) != (req.ContentLength == 0) || req.ContentLength < 0 {
		return false
	}
	if !plainHost(host) {
		return false
	}
	for k, vv := range req.Header {
		if !validToken(k) {
			return false
		}
		for _, v := range vv {
			if !validValue(v) { // also refuses line breaks
				return false
			}
		}
	}
	return true
}

// plainHost says net/http would send host as it is: printable ASCII with
// no path, space or zone to cut, nothing to punycode.
func plainHost(host string) bool {
	if host == "" {
		return false
	}
	for i := 0; i < len(host); i++ {
		if c := host[i]; c <= ' ' || c >= 0x7f || c == '/' || c == '%' {
			return false
		}
	}
	return true
}

// ReadResponse reads the head of the answer to req from br. A final
// HTTP/1.1 response framed by Content-Length (the answer to anything but
// HEAD) is parsed here, with one string allocation for the head; anything
// else — 1xx, 204, 304, chunked or close-delimited bodies, HTTP/1.0, a head
// larger than br's buffer, anything malformed — is left unread and handed
// to http.ReadResponse, whose answer and error are returned as they are.
// The fields are net/http's, except that the fast path does not turn a
// Pragma: no-cache into a Cache-Control the upstream never sent, that a
// Connection field saying close is kept (net/http drops it): the fields it
// names are hop-by-hop too, and a proxy must drop them (RFC 9110 §7.6.1),
// and that a Content-Length listing one value more than once ("5, 5") is
// taken as that value (RFC 9110 §8.6), where net/http refuses it; both only
// when the head fits br's buffer.
// net/http's reader takes a head of any size: the caller bounds it by what
// br's reader lets through (as net/http's transport does).
func ReadResponse(br *bufio.Reader, req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodHead {
		if res := fastResponse(br, req); res != nil {
			return res, nil
		}
	}
	conn := prepareHead(peekHead(br))
	res, err := http.ReadResponse(br, req)
	if err == nil && conn != nil && res.Header["Connection"] == nil {
		res.Header["Connection"] = conn
	}
	return res, err
}

// prepareHead readies a buffered head for net/http's reader: it returns
// the values of its Connection fields, nil when it has none, and blanks
// out, in place, the repeats of a Content-Length listing one value more
// than once, which net/http would refuse; differing values stay for it to
// refuse.
func prepareHead(head []byte) []string {
	var vals []string
	for len(head) > 0 {
		line := head
		if i := bytes.IndexByte(head, '\n'); i >= 0 {
			line, head = head[:i], head[i+1:]
		} else {
			head = nil
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		switch {
		case !ok:
		case bytes.EqualFold(name, []byte("Connection")):
			vals = append(vals, strings.Trim(string(value), " \t\r"))
		case bytes.EqualFold(name, []byte("Content-Length")):
			collapseList(value)
		}
	}
	return vals
}

// collapseList turns a field value listing one element more than once
// ("5, 5") into that element followed by spaces, which readers trim.
func collapseList(value []byte) {
	v := bytes.TrimRight(value, " \t\r")
	first, rest, list := bytes.Cut(v, []byte(","))
	if !list {
		return
	}
	first = bytes.Trim(first, " \t")
	for _, e := range bytes.Split(rest, []byte(",")) {
		if !bytes.Equal(bytes.Trim(e, " \t"), first) || len(first) == 0 {
			return
		}
	}
	for i := bytes.IndexByte(v, ','); i < len(v); i++ {
		v[i] = ' '
	}
}

// maxResponseFields bounds the fields of a head the fast path takes.
const maxResponseFields = 64

// fastResponse parses a buffered response head, or returns nil having
// consumed nothing.
func fastResponse(br *bufio.Reader, req *http.Request) *http.Response {
	head := peekHead(br)
	if head == nil || !bytes.HasPrefix(head, []byte("HTTP/1.1 ")) {
		return nil
	}
	// The status line first: an answer the fast path leaves to net/http
	// is known before anything is copied.
	statusEnd := bytes.IndexByte(head, '\n')
	next := statusEnd + 1
	if statusEnd > 0 && head[statusEnd-1] == '\r' {
		statusEnd--
	}
	i := len("HTTP/1.1 ")
	for i < statusEnd && head[i] == ' ' {
		i++
	}
	status := head[i:statusEnd]
	if len(status) < 3 || (len(status) > 3 && status[3] != ' ') {
		return nil
	}
	code := 0
	for _, d := range status[:3] {
		if d < '0' || d > '9' {
			return nil
		}
		code = code*10 + int(d-'0')
	}
	if code < 200 || code == http.StatusNoContent || code == http.StatusNotModified {
		return nil
	}
	// Names are canonicalised in br's buffer, which is discarded on
	// success and, on a fallback, holds what net/http canonicalises anyway.
	var fieldsArr [16]field
	fields := fieldsArr[:0]
	for pos := next; ; {
		end := pos + bytes.IndexByte(head[pos:], '\n')
		after := end + 1
		if end > pos && head[end-1] == '\r' {
			end--
		}
		if end == pos {
			break
		}
		colon, problem := checkField(head[pos:end])
		if problem != "" || len(fields) == maxResponseFields {
			return nil
		}
		fields = append(fields, field{pos, pos + colon, end})
		pos = after
	}
	all := string(head) // the one string allocation of the head
	hdr := header(all, fields)
	cls := hdr["Content-Length"]
	if len(cls) == 0 || hdr["Transfer-Encoding"] != nil {
		return nil
	}
	n, err := contentLength(cls)
	if err != nil {
		return nil
	}
	if len(cls) > 1 {
		hdr["Content-Length"] = cls[:1]
	}
	res := &http.Response{
		Status:        all[i:statusEnd],
		StatusCode:    code,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        hdr,
		ContentLength: n,
		Request:       req,
	}
	res.Close = hasToken(hdr["Connection"], "close")
	br.Discard(len(head))
	if n == 0 {
		res.Body = http.NoBody
	} else {
		res.Body = &lengthBody{br: br, remain: n}
	}
	return res
}

// peekHead returns the buffered bytes of a whole response head, through
// its empty line, reading more as needed; nil when the head does not fit
// br's buffer or the connection ends first. Each look resumes at the line
// the last one could not finish, so a head that trickles in is scanned
// once.
func peekHead(br *bufio.Reader) []byte {
	line := 0
	for n := max(br.Buffered(), 1); ; {
		b, err := br.Peek(n)
		if err == nil && br.Buffered() > len(b) {
			// The read behind a Peek(1) on an empty buffer may have brought
			// the whole head; asking for a byte past it would wait for the
			// next answer, which the upstream sends only after our next
			// request.
			b, _ = br.Peek(br.Buffered())
		}
		end, next := headEnd(b, line)
		if end > 0 {
			return b[:end]
		}
		line = next
		if err != nil || n >= br.Size() {
			return nil
		}
		n = br.Buffered() + 1
		if n <= len(b) {
			n = len(b) + 1
		}
	}
}

// headEnd looks for the blank line (CRLF or a bare LF, as net/http accepts)
// that ends a head, from the line starting at from. It returns the head's
// length through that line, or 0 and the start of the first line it could
// not finish.
func headEnd(b []byte, from int) (end, next int) {
	for i := from; ; {
		switch {
		case i < len(b) && b[i] == '\n':
			return i + 1, 0
		case i+1 < len(b) && b[i] == '\r' && b[i+1] == '\n':
			return i + 2, 0
		}
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			return 0, i
		}
		i += j + 1
	}
}

// lengthBody reads a response body of a known length from the
// connection's reader, ending with io.EOF on its last byte.
type lengthBody struct {
	br     *bufio.Reader
	remain int64
}

func (b *lengthBody) Read(p []byte) (int, error) {
	if b.remain <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.remain {
		p = p[:b.remain]
	}
	n, err := b.br.Read(p)
	b.remain -= int64(n)
	switch {
	case b.remain == 0:
		return n, io.EOF
	case err == io.EOF:
		return n, io.ErrUnexpectedEOF
	}
	return n, err
}

// Close leaves any unread rest on the connection; the caller closes a
// connection whose body was not read to its end.
func (b *lengthBody) Close() error { return nil }
