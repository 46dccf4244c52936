package h1

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
)

// maxDrainBytes is how much of a body the handler left unread is read and
// dropped to keep the connection; beyond it the connection closes
// (net/http's maxPostHandlerReadBytes).
const maxDrainBytes = 256 << 10

// ErrMalformedBody is a request body read's error when the client broke
// its chunked framing: the client's fault, unlike a connection that failed.
var ErrMalformedBody = errors.New("h1: malformed chunked body")

var (
	errBodyAfterClose = errors.New("h1: read of a closed request body")
	errChunk          = ErrMalformedBody
)

// body is a request body read from the connection: Content-Length bytes,
// or chunks up to the last one and the trailer fields after it. It may be
// read from another goroutine than the handler's (a transport's writer).
type body struct {
	c       *conn
	resp    *response     // whose head decides whether 100 Continue is still due
	trailer http.Header   // Request.Trailer as declared
	req     *http.Request // the handler's request, whose Trailer is filled at the end
	watch   *watcher      // told when the body ends

	mu       sync.Mutex
	chunked  bool
	expect   bool  // client waits for 100 Continue before sending
	remain   int64 // bytes left: of the body, or of the current chunk
	inChunk  bool  // a chunk's data is being read; its CRLF follows it
	done     bool  // read to the end
	closed   bool
	err      error // sticky: a framing or connection error
	consumed bool  // some byte was asked for (so 100 Continue went out)
	refused  bool  // the body was never asked for: its error is ours, not the client's
}

func (b *body) Read(p []byte) (int, error) {
	b.mu.Lock()
	n, err := b.read(p)
	ended := b.done && err == io.EOF
	// The connection failed under the body: its client left. net/http
	// cancels the request's context then too, which is how the handler
	// tells a client that broke off its upload from a failed upstream.
	left := err != nil && err != io.EOF && err != errChunk && err != errBodyAfterClose && !b.refused
	w := b.watch
	b.mu.Unlock()
	if ended && w != nil {
		w.bodyEnded()
	}
	if left && w != nil {
		w.cancel(ErrClientGone)
	}
	return n, err
}

func (b *body) read(p []byte) (int, error) {
	switch {
	case b.closed:
		return 0, errBodyAfterClose
	case b.done:
		return 0, io.EOF
	case b.err != nil:
		return 0, b.err
	case len(p) == 0:
		return 0, nil
	}
	if !b.consumed {
		b.consumed = true
		if b.expect && b.resp != nil && !b.resp.sendContinue() {
			// The response began without it: the client will not send.
			b.refused = true
			b.err = io.ErrUnexpectedEOF
			return 0, b.err
		}
	}
	var n int
	var err error
	if b.chunked {
		n, err = b.readChunked(p)
	} else {
		n, err = b.readN(p)
		if err == nil && b.remain == 0 {
			b.done = true
			err = io.EOF
		}
	}
	if err != nil && err != io.EOF {
		b.err = err
	}
	return n, err
}

// readN reads data of the body or of the current chunk.
func (b *body) readN(p []byte) (int, error) {
	if int64(len(p)) > b.remain {
		p = p[:b.remain]
	}
	n, err := b.c.br.Read(p)
	b.remain -= int64(n)
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

func (b *body) readChunked(p []byte) (int, error) {
	for b.remain == 0 {
		if b.inChunk {
			if err := b.crlf(); err != nil {
				return 0, err
			}
			b.inChunk = false
		}
		size, err := b.chunkSize()
		if err != nil {
			return 0, err
		}
		if size == 0 {
			if err := b.readTrailer(); err != nil {
				return 0, err
			}
			b.done = true
			return 0, io.EOF
		}
		b.remain, b.inChunk = size, true
	}
	return b.readN(p)
}

func (b *body) crlf() error {
	line, err := b.c.br.ReadSlice('\n')
	if err != nil {
		return chunkErr(err)
	}
	if string(line) != "\r\n" { // a bare LF here is a smuggling vector: refused, as net/http does
		return errChunk
	}
	return nil
}

// chunkSize reads a chunk-size line: hex digits, then optional extensions,
// which are ignored (RFC 9112 §7.1.1).
func (b *body) chunkSize() (int64, error) {
	line, err := b.c.br.ReadSlice('\n')
	if err != nil {
		return 0, chunkErr(err)
	}
	if len(line) < 2 || line[len(line)-2] != '\r' {
		return 0, errChunk
	}
	line = line[:len(line)-2]
	if i := bytes.IndexByte(line, ';'); i >= 0 {
		line = line[:i]
	}
	line = bytes.TrimRight(line, " \t")
	if len(line) == 0 || len(line) > 15 {
		return 0, errChunk
	}
	var n int64
	for _, c := range line {
		var d byte
		switch {
		case '0' <= c && c <= '9':
			d = c - '0'
		case 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, errChunk
		}
		n = n<<4 | int64(d)
	}
	return n, nil
}

// readTrailer reads the trailer section after the last chunk into
// b.trailer, every field received as net/http merges them.
func (b *body) readTrailer() error {
	budget := b.c.srv.maxHeaderBytes()
	for {
		line, err := b.c.br.ReadSlice('\n')
		if err != nil {
			return chunkErr(err)
		}
		if budget -= len(line); budget < 0 || len(line) < 2 || line[len(line)-2] != '\r' {
			return errChunk // CRLF only, as in the chunk lines
		}
		line = line[:len(line)-2]
		if len(line) == 0 {
			return nil
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 || !validToken(line[:colon]) || !validValue(line[colon+1:]) {
			return errChunk
		}
		k := http.CanonicalHeaderKey(string(line[:colon]))
		if framingField(k) {
			continue // framing fields have no place in a trailer
		}
		if b.trailer == nil {
			// Undeclared trailers are kept too, as net/http keeps them.
			b.trailer = make(http.Header)
			if b.req != nil {
				b.req.Trailer = b.trailer
			}
		}
		b.trailer[k] = append(b.trailer[k], strings.Trim(string(line[colon+1:]), " \t"))
	}
}

// chunkErr is the body's error for a failed chunk-framing line read: a
// line longer than the read buffer is malformed, the end of input is early.
func chunkErr(err error) error {
	switch {
	case errors.Is(err, bufio.ErrBufferFull):
		return errChunk
	case err == io.EOF:
		return io.ErrUnexpectedEOF
	}
	return err
}

// broken says the body's framing failed: the connection cannot go on.
func (b *body) broken() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err != nil
}

// Close marks the body closed; whatever is left is drained after the
// handler returns, or the connection ends.
func (b *body) Close() error {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	return nil
}

// drain reads what the handler left of the body, up to maxDrainBytes, so
// the connection can carry the next request. It reports whether it can.
func (b *body) drain() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		b.closed = true
		return true
	}
	if b.err != nil || (b.expect && !b.consumed) {
		// Broken framing; or a client still waiting for 100 Continue
		// that will send its body only if asked.
		return false
	}
	b.consumed = true
	b.closed = false
	// Closed whatever happens: a late Read (a transport's writer still
	// copying the body) must not take bytes of the next request.
	defer func() { b.closed = true }()
	buf := make([]byte, 4096)
	total := 0
	for total <= maxDrainBytes {
		n, err := b.read(buf)
		total += n
		if err == io.EOF {
			return true
		}
		if err != nil {
			return false
		}
	}
	return false
}
