package proxy

import (
	"bytes"
	"io"
	"math/bits"
	"sync"
	"sync/atomic"
)

// bodyBuf holds a small request body read whole before forwarding. It is
// shared by the readers the upstream transport writes from and by the
// capture that the record's deferred decode reads, and goes back to its pool
// only when every one of them is through: a transport may close the body
// on its own goroutine after RoundTrip returns, and the decode runs on the
// pipeline's. A holder that never lets go only costs the pool a buffer.
type bodyBuf struct {
	b    []byte
	refs atomic.Int32
}

// Pools of body buffers by power-of-two size, 1 KiB to smallBodyBytes for
// the bodies read whole, on to 16 MiB for the captures of large ones (a
// capture grows by doubling; larger buffers are made to size, not pooled).
const (
	minBodyBufShift = 10
	maxBodyBufShift = 16
	maxPooledShift  = 24
	// Both constants below are negative, so do not compile, unless
	// smallBodyBytes is 1<<maxBodyBufShift.
	_ = uint(smallBodyBytes - 1<<maxBodyBufShift)
	_ = uint(1<<maxBodyBufShift - smallBodyBytes)
)

var bodyBufPools [maxPooledShift - minBodyBufShift + 1]sync.Pool

// bodyBufsOut counts buffers taken and not yet back: the tests hold the
// proxy to returning every one.
var bodyBufsOut atomic.Int64

func bodyBufClass(n int) int {
	if n <= 1<<minBodyBufShift {
		return 0
	}
	return bits.Len(uint(n-1)) - minBodyBufShift
}

// getBodyBuf returns a buffer of n bytes held once.
func getBodyBuf(n int) *bodyBuf {
	var bb *bodyBuf
	if c := bodyBufClass(n); c < len(bodyBufPools) {
		bb, _ = bodyBufPools[c].Get().(*bodyBuf)
		if bb == nil {
			bb = &bodyBuf{b: make([]byte, 1<<(c+minBodyBufShift))}
		}
	} else {
		bb = &bodyBuf{b: make([]byte, n)}
	}
	bb.b = bb.b[:n]
	bb.refs.Store(1)
	bodyBufsOut.Add(1)
	return bb
}

func (bb *bodyBuf) hold() { bb.refs.Add(1) }

// unref lets go of one hold; the last returns the buffer to its pool.
func (bb *bodyBuf) unref() {
	switch n := bb.refs.Add(-1); {
	case n == 0:
		bodyBufsOut.Add(-1)
		if c := bodyBufClass(cap(bb.b)); c < len(bodyBufPools) { // else made to size
			bodyBufPools[c].Put(bb)
		}
	case n < 0:
		panic("proxy: body buffer released more often than held")
	}
}

// reader returns a reader of the body that holds the buffer until it is
// closed and no read is running: a transport may close a request body on
// one goroutine while its writer still reads it on another, and the buffer
// must not go back to the pool under that read.
func (bb *bodyBuf) reader() io.ReadCloser {
	bb.hold()
	r := &bodyBufReader{bb: bb}
	r.r.Reset(bb.b)
	return r
}

type bodyBufReader struct {
	bb *bodyBuf
	r  bytes.Reader

	mu      sync.Mutex
	reading bool // a Read or WriteTo is under way (one at a time)
	closed  bool
}

// begin marks a read under way, or reports the reader closed.
func (r *bodyBufReader) begin() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.reading = true
	return true
}

// end marks the read over and lets go of the buffer if Close came meanwhile.
func (r *bodyBufReader) end() {
	r.mu.Lock()
	r.reading = false
	release := r.closed
	r.mu.Unlock()
	if release {
		r.bb.unref()
	}
}

func (r *bodyBufReader) Read(p []byte) (int, error) {
	if !r.begin() {
		return 0, io.ErrClosedPipe
	}
	defer r.end()
	return r.r.Read(p)
}

// WriteTo keeps io.Copy's one write of the whole body.
func (r *bodyBufReader) WriteTo(w io.Writer) (int64, error) {
	if !r.begin() {
		return 0, io.ErrClosedPipe
	}
	defer r.end()
	return r.r.WriteTo(w)
}

// Close lets go of the buffer now, or when the read under way ends.
func (r *bodyBufReader) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	reading := r.reading
	r.mu.Unlock()
	if !reading {
		r.bb.unref()
	}
	return nil
}
