package proxy

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inferwatch/inferwatch/inferapi"
)

// requestBody taps the client's request body as the upstream transport reads
// it: it counts bytes, feeds the gRPC scanner or the bounded HTTP capture with
// the very chunks being forwarded, and stamps when the last byte was read from
// the client and when the transport came back for more after it (the request
// fully handed over). The transport reads it on its own goroutine, so state
// the handler reads later is guarded by mu.
type requestBody struct {
	src   io.ReadCloser
	start time.Time

	mu       sync.Mutex
	bytes    int64
	lastRead time.Duration // offset of the read that returned the last data
	sent     time.Duration // offset at which EOF was handed to the transport
	eof      bool
	err      error // a limit the scanner enforced (ErrTooLarge)
	srcErr   error // the first failed read of the client's body (malformedBody tells whose fault)
	closed   bool

	scan    *inferapi.GRPCScanner // gRPC: fed every chunk
	capture *capture              // HTTP: bounded prefix for a decode
	buf     *bodyBuf              // a small body read whole, held until the call's finish
}

func (b *requestBody) Read(p []byte) (int, error) {
	n, err := b.src.Read(p)
	now := time.Since(b.start)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, io.ErrClosedPipe
	}
	if n > 0 {
		b.bytes += int64(n)
		b.lastRead = now
		if b.scan != nil {
			if serr := b.scan.Feed(p[:n]); serr != nil {
				b.err = serr
				return 0, serr
			}
		}
		if b.capture != nil {
			b.capture.write(p[:n])
		}
	}
	if err != nil && err != io.EOF && b.srcErr == nil {
		b.srcErr = err
	}
	if err == io.EOF {
		b.eof = true
		b.sent = now
		if b.lastRead == 0 {
			b.lastRead = now
		}
	}
	return n, err
}

// readSmall reads a whole body of n bytes (n ≤ smallBodyBytes) into a
// pooled buffer, tapped like Read. The body holds the buffer until
// release, so GetBody can still make a reader of it during the round trip.
func (b *requestBody) readSmall(n int64) (*bodyBuf, error) {
	bb := getBodyBuf(int(n))
	_, err := io.ReadFull(b.src, bb.b)
	now := time.Since(b.start)
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil {
		bb.unref()
		return nil, fmt.Errorf("read request body: %w", err)
	}
	b.bytes, b.lastRead, b.eof = n, now, true
	b.buf = bb
	if b.capture != nil {
		b.capture.adopt(bb)
	}
	return bb, nil
}

// release lets go of the body's hold on its buffer: the round trip is over.
func (b *requestBody) release() {
	if b.buf != nil {
		b.buf.unref()
		b.buf = nil
	}
}

// markEmpty stamps a request that has no body as read and handed over now.
func (b *requestBody) markEmpty() {
	now := time.Since(b.start)
	b.mu.Lock()
	b.eof, b.lastRead, b.sent = true, now, now
	b.mu.Unlock()
}

func (b *requestBody) Close() error {
	return b.src.Close()
}

// finish stops further reads from reaching the scanner, so the handler may
// read the tap's state while a transport goroutine is still winding down.
func (b *requestBody) finish() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
}

// capture keeps the first max bytes of a body for a bounded decode. The
// bytes come out of budget, shared by every call of a Handler, so records
// queued for their decode cannot hold more than the budget between them.
// They lie in a pooled buffer, doubled as the body comes: a megabyte
// capture grown by append cost a 1 MiB JSON call about 2 ms of allocation,
// zeroing and GC in the sidecar.
type capture struct {
	buf       []byte
	owned     *bodyBuf // the pooled buffer buf lies in, held until release
	max       int
	truncated bool
	budget    *atomic.Int64 // bytes left for all captures; nil: unbounded
}

func (c *capture) write(p []byte) {
	room := c.max - len(c.buf)
	if room <= 0 {
		if len(p) > 0 {
			c.truncated = true
		}
		return
	}
	if len(p) > room {
		p = p[:room]
		c.truncated = true
	}
	if c.budget != nil && c.budget.Add(-int64(len(p))) < 0 {
		c.budget.Add(int64(len(p)))
		c.truncated = true // the decode sees what it got
		c.max = len(c.buf) // and takes nothing more
		return
	}
	if n := len(c.buf) + len(p); n > cap(c.buf) {
		// An adopted buffer is shared and full: it is left, not grown.
		bb := getBodyBuf(min(max(n, 2*cap(c.buf), 4<<10), c.max))
		c.buf = bb.b[:copy(bb.b, c.buf)]
		if c.owned != nil {
			c.owned.unref()
		}
		c.owned = bb
	}
	c.buf = append(c.buf, p...)
}

// adopt captures bb's bytes, a whole body that nothing will write to
// again, without copying them: the small HTTP bodies read whole before
// forwarding are captured in the buffer they were read into, which the
// capture then holds until release.
func (c *capture) adopt(bb *bodyBuf) {
	p := bb.b
	if len(c.buf) != 0 {
		c.write(p)
		return
	}
	n := min(len(p), c.max)
	if c.budget != nil && c.budget.Add(-int64(n)) < 0 {
		c.budget.Add(int64(n))
		c.truncated = len(p) > 0
		c.max = 0
		return
	}
	c.buf, c.truncated = p[:n:n], n < len(p)
	bb.hold()
	c.owned = bb
}

// release gives the captured bytes back to the budget.
func (c *capture) release() {
	if c == nil {
		return
	}
	if c.budget != nil {
		c.budget.Add(int64(len(c.buf)))
	}
	c.buf = nil
	if c.owned != nil {
		c.owned.unref()
		c.owned = nil
	}
}

// timedWriter measures how long writes and flushes to the client block: the
// egress phase.
type timedWriter struct {
	w       io.Writer
	flusher interface{ Flush() }
	blocked time.Duration
	wrote   bool
}

func (t *timedWriter) Write(p []byte) (int, error) {
	s := time.Now()
	n, err := t.w.Write(p)
	t.blocked += time.Since(s)
	t.wrote = true
	return n, err
}

func (t *timedWriter) Flush() {
	if t.flusher == nil {
		return
	}
	s := time.Now()
	t.flusher.Flush()
	t.blocked += time.Since(s)
}

// reservation is the capture budget a sampled gRPC message holds from the
// moment its length prefix is read until its decode ran or was dropped.
type reservation struct {
	budget *atomic.Int64
	held   int64
}

// take reserves n bytes, or reports that the budget has not got them.
func (r *reservation) take(n int64) bool {
	if r.budget.Add(-n) < 0 {
		r.budget.Add(n)
		return false
	}
	r.held += n
	return true
}

// release gives the reserved bytes back; a second call gives nothing.
func (r *reservation) release() {
	if r == nil || r.held == 0 {
		return
	}
	r.budget.Add(r.held)
	r.held = 0
}
