package h1

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// response is the http.ResponseWriter of one request. Its head and body go
// through the connection's buffered writer: a small response is one write,
// a streamed one is flushed when the handler flushes.
type response struct {
	c     *conn
	req   *http.Request
	hdr   http.Header
	body  *body
	watch *watcher // the call's watch of its client (watch.go)

	mu          sync.Mutex // the head against a concurrent 100 Continue
	expect      bool       // the client waits for 100 Continue to send its body
	continued   bool       // and got it
	status      int
	wroteHeader bool // WriteHeader called with a final status
	headSent    bool // the head is in the buffered writer
	chunked     bool
	noBody      bool  // HEAD, 1xx, 204, 304: no body bytes go out
	length      int64 // declared Content-Length, -1 if none
	written     int64
	closeAfter  bool
	err         error
}

func newResponse(c *conn, req *http.Request) *response {
	return &response{c: c, req: req, hdr: make(http.Header, 8), length: -1}
}

func (w *response) Header() http.Header { return w.hdr }

func (w *response) WriteHeader(code int) {
	if code < 100 || code > 999 {
		panic("h1: invalid WriteHeader code " + strconv.Itoa(code))
	}
	if w.wroteHeader {
		return
	}
	if code < 200 && code != http.StatusSwitchingProtocols {
		w.informational(code)
		return
	}
	w.wroteHeader = true
	w.status = code
}

// informational sends a 1xx head (103 Early Hints, say) at once.
func (w *response) informational(code int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.headSent {
		return
	}
	bw := w.c.bw
	bw.WriteString(statusLine(code))
	writeFields(bw, w.hdr)
	bw.WriteString("\r\n")
	if err := bw.Flush(); err != nil {
		w.err = err
	}
}

// sendContinue writes "100 Continue" unless the response has begun; it
// reports whether the client has been asked for its body.
func (w *response) sendContinue() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.headSent || w.wroteHeader {
		return false
	}
	w.c.bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
	if err := w.c.bw.Flush(); err != nil {
		w.err = err
		return false
	}
	w.continued = true
	return true
}

// sendHead frames the response and buffers its head. done says the
// handler has returned, so a response with no body and no length gets
// Content-Length: 0.
func (w *response) sendHead(done bool) {
	// Before w.mu: a body read holds the body's lock while it asks for 100
	// Continue, which takes w.mu.
	bodyBroken := w.body != nil && w.body.broken()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.headSent {
		return
	}
	w.headSent = true
	if !w.wroteHeader {
		w.wroteHeader, w.status = true, http.StatusOK
	}
	h := w.hdr
	code := w.status
	w.noBody = w.req.Method == http.MethodHead || code == http.StatusNoContent || code == http.StatusNotModified
	http11 := w.req.ProtoMinor == 1

	cl, hasCL := h["Content-Length"]
	if hasCL && len(cl) > 0 && cl[0] != "" {
		if n, err := strconv.ParseInt(strings.TrimSpace(cl[0]), 10, 64); err == nil && n >= 0 {
			w.length = n
		} else {
			delete(h, "Content-Length") // never forward a length we cannot honour
			hasCL = false
		}
	} else if hasCL {
		delete(h, "Content-Length") // present but empty: "send none", as net/http reads it
	}
	delete(h, "Transfer-Encoding")
	trailers := h["Trailer"]
	switch {
	case code == http.StatusSwitchingProtocols:
		w.closeAfter = true
	case w.noBody:
	case len(trailers) > 0 && http11:
		// Trailers need chunked framing; a declared length gives way.
		delete(h, "Content-Length")
		w.length = -1
		w.chunked = true
	case w.length >= 0:
	case !hasCL && done:
		w.length = 0
		h["Content-Length"] = []string{"0"}
	case http11:
		w.chunked = true
	default:
		w.closeAfter = true // HTTP/1.0: the close ends the body
	}
	// A client still waiting for 100 Continue sends its body only if asked:
	// the connection cannot carry another request.
	if w.req.Close || bodyBroken || (w.expect && !w.continued) || w.c.srv.closing.Load() || hasToken(h["Connection"], "close") {
		w.closeAfter = true
	}
	switch {
	case w.closeAfter:
		h["Connection"] = []string{"close"}
	case !http11:
		h["Connection"] = []string{"keep-alive"}
	}
	if _, ok := h["Date"]; !ok {
		h["Date"] = []string{httpDate()}
	}
	bw := w.c.bw
	bw.WriteString(statusLine(code))
	writeFields(bw, h)
	if w.chunked {
		bw.WriteString("Transfer-Encoding: chunked\r\n")
	}
	bw.WriteString("\r\n")
}

// buffersWriter is a connection that writes several pieces in one system
// call (the proxy's raw TCP connections, with writev).
type buffersWriter interface {
	WriteBuffers(bufs ...[]byte) (int64, error)
}

var crlf = []byte("\r\n")

func (w *response) Write(p []byte) (int, error) {
	if !w.headSent {
		w.sendHead(false)
	}
	if w.err != nil {
		return 0, w.err
	}
	if w.noBody {
		if w.req.Method == http.MethodHead {
			return len(p), nil
		}
		return 0, http.ErrBodyNotAllowed
	}
	if w.length >= 0 && w.written+int64(len(p)) > w.length {
		return 0, http.ErrContentLength
	}
	if len(p) == 0 {
		return 0, nil
	}
	bw := w.c.bw
	if w.chunked && len(p) > bw.Available() && bw.Buffered() == 0 {
		if vw, ok := w.c.nc.(buffersWriter); ok {
			// A chunk larger than the buffer: its size line, data and CRLF in
			// one system call, not three (the buffer's worth, the rest, the
			// CRLF at the next flush).
			var size [20]byte
			line := append(strconv.AppendInt(size[:0], int64(len(p)), 16), '\r', '\n')
			m, err := vw.WriteBuffers(line, p, crlf)
			n := int(min(max(m-int64(len(line)), 0), int64(len(p))))
			w.written += int64(n)
			if err != nil {
				w.err = err
			}
			return n, err
		}
	}
	if w.chunked {
		var size [16]byte
		bw.Write(strconv.AppendInt(size[:0], int64(len(p)), 16))
		bw.WriteString("\r\n")
	}
	n, err := bw.Write(p)
	if err == nil && w.chunked {
		_, err = bw.WriteString("\r\n")
	}
	w.written += int64(n)
	if err == nil && w.written == w.length {
		// The whole body is here: the client gets it now, not after the
		// handler's bookkeeping (the record, the pool hand-back).
		err = bw.Flush()
	}
	if err != nil {
		w.err = err
	}
	return n, err
}

// Flush sends what is buffered, the head first if need be.
func (w *response) Flush() { w.FlushError() }

// FlushError is Flush with its error, for http.ResponseController.
func (w *response) FlushError() error {
	if !w.headSent {
		w.sendHead(false)
	}
	if w.err != nil {
		return w.err
	}
	if err := w.c.bw.Flush(); err != nil {
		w.err = err
	}
	return w.err
}

// finish ends the response after the handler returned: the head if none
// went out, the last chunk and trailers, the flush. It reports whether the
// connection's framing is intact for another request.
func (w *response) finish() bool {
	if !w.headSent {
		w.sendHead(true)
	}
	bw := w.c.bw
	if w.chunked && w.err == nil {
		bw.WriteString("0\r\n")
		writeTrailers(bw, w.hdr)
		bw.WriteString("\r\n")
	}
	if err := bw.Flush(); err != nil && w.err == nil {
		w.err = err
	}
	if w.err != nil {
		return false
	}
	if w.length >= 0 && !w.noBody && w.written < w.length {
		return false // the client waits for bytes that will not come
	}
	return true
}

// writeTrailers writes the trailer fields: values of the keys the head
// declared in Trailer, and keys set with http.TrailerPrefix.
func writeTrailers(bw interface{ WriteString(string) (int, error) }, h http.Header) {
	for _, v := range h["Trailer"] {
		for k := range strings.SplitSeq(v, ",") {
			k = http.CanonicalHeaderKey(strings.TrimSpace(k))
			for _, x := range h[k] {
				writeField(bw, k, x)
			}
		}
	}
	for k, vv := range h {
		if name, ok := strings.CutPrefix(k, http.TrailerPrefix); ok {
			for _, x := range vv {
				writeField(bw, name, x)
			}
		}
	}
}

// writeFields writes h's fields in key order (as net/http does, so heads
// are stable), less trailer-prefixed keys.
func writeFields(bw interface{ WriteString(string) (int, error) }, h http.Header) {
	var keysArr [24]string
	keys := keysArr[:0]
	for k := range h {
		if !strings.HasPrefix(k, http.TrailerPrefix) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		for _, v := range h[k] {
			writeField(bw, k, v)
		}
	}
}

// writeField writes one field; CR and LF in a value become spaces, so a
// value cannot end the head early (net/http does the same).
func writeField(bw interface{ WriteString(string) (int, error) }, k, v string) {
	if strings.ContainsAny(v, "\r\n") {
		v = strings.NewReplacer("\r", " ", "\n", " ").Replace(v)
	}
	bw.WriteString(k)
	bw.WriteString(": ")
	bw.WriteString(v)
	bw.WriteString("\r\n")
}

func hasToken(vv []string, token string) bool {
	for _, v := range vv {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// statusLines caches the status lines of the codes a proxy sees most.
var statusLines = func() map[int]string {
	m := make(map[int]string)
	for _, c := range []int{100, 101, 103, 200, 201, 202, 204, 206, 301, 302, 304, 307, 308,
		400, 401, 403, 404, 405, 408, 409, 413, 422, 429, 499, 500, 501, 502, 503, 504} {
		m[c] = formatStatusLine(c)
	}
	return m
}()

func statusLine(code int) string {
	if s, ok := statusLines[code]; ok {
		return s
	}
	return formatStatusLine(code)
}

func formatStatusLine(code int) string {
	text := http.StatusText(code)
	if text == "" {
		text = "status code " + strconv.Itoa(code)
	}
	return "HTTP/1.1 " + strconv.Itoa(code) + " " + text + "\r\n"
}

type dateEntry struct {
	sec int64
	val string
}

var dateCache atomic.Pointer[dateEntry]

// httpDate is the Date field value, formatted once a second.
func httpDate() string {
	now := time.Now()
	if e := dateCache.Load(); e != nil && e.sec == now.Unix() {
		return e.val
	}
	e := &dateEntry{sec: now.Unix(), val: now.UTC().Format(http.TimeFormat)}
	dateCache.Store(e)
	return e.val
}
