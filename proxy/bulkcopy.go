package proxy

import (
	"io"
	"sync"
)

// Bulk transfers — megabyte tensors in HTTP bodies — move in pieces of
// bulkCopyBytes rather than io.Copy's 32 KiB: each piece is a read and a
// write system call on loopback, and the kernel's per-call cost, not the
// bytes, is what a 32 KiB piece adds up (a 1 MiB KServe v2 JSON echo, 2.8
// MB each way, took ~90 reads and ~90 writes a direction).
const bulkCopyBytes = 256 << 10

var bulkBufs = sync.Pool{New: func() any { b := make([]byte, bulkCopyBytes); return &b }}

// ReadFrom copies r into the upstream connection in bulk pieces: it is what
// net/http's transport calls (through io.Copy) to stream a request body
// it cannot hold whole.
func (c *closeNotifyConn) ReadFrom(r io.Reader) (int64, error) {
	bp := bulkBufs.Get().(*[]byte)
	defer bulkBufs.Put(bp)
	return io.CopyBuffer(writerOnly{c.Conn}, r, *bp)
}

// writerOnly hides a writer's ReadFrom, so io.CopyBuffer uses the buffer
// it is given.
type writerOnly struct{ io.Writer }
