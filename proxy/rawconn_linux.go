package proxy

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"unsafe"
)

// rawConn reads and writes a clear-text TCP connection with raw system
// calls, waiting for readiness on Go's netpoller as net.Conn does.
//
// Why: every ordinary socket read or write enters the scheduler's syscall
// state, and the first one after the process was idle wakes Go's sysmon
// thread from its deep sleep, after which sysmon polls every 20 µs while
// calls are in flight. At 1000 HTTP JSON calls/s (perf stat on the frame
// plane, docs/perf.md) that was 2.9 futex calls, 2.7 nanosleeps and 7
// context switches a call; raw: 1.2, 0.3 and 3.4, and CPU a call 250 ->
// 220 µs (gRPC 8 B: 9 -> 4 context switches, 285 -> 205 µs). A socket in
// non-blocking mode never blocks in read or write, the condition for a raw
// call (the runtime's own netpoller makes them so).
type rawConn struct {
	*net.TCPConn
	rc syscall.RawConn

	rmu    sync.Mutex
	rp     []byte
	rn     int
	rerr   error
	readFn func(uintptr) bool

	wmu      sync.Mutex
	wiov     [4]syscall.Iovec // the pieces still to go (Write's one, or WriteBuffers')
	wiovs    []syscall.Iovec
	wn       int
	werr     error
	writevFn func(uintptr) bool
}

// newRawConn wraps c when it is a TCP connection; anything else (TLS, a
// test's pipe) is returned as it is.
func newRawConn(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	r := &rawConn{TCPConn: tc, rc: rc}
	r.readFn, r.writevFn = r.readFd, r.writevFd
	return r
}

func (c *rawConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	c.rp, c.rn, c.rerr = p, 0, nil
	err := c.rc.Read(c.readFn)
	c.rp = nil
	if err != nil { // closed, or a deadline passed: net's own error
		return 0, err
	}
	if c.rerr != nil {
		return c.rn, c.opError("read", c.rerr)
	}
	return c.rn, nil
}

func (c *rawConn) readFd(fd uintptr) bool {
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&c.rp[0])), uintptr(len(c.rp)))
		switch e {
		case 0:
			c.rn = int(n)
			if n == 0 {
				c.rerr = io.EOF
			}
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		c.rerr = e
		return true
	}
}

func (c *rawConn) Write(p []byte) (int, error) {
	n, err := c.WriteBuffers(p)
	return int(n), err
}

// WriteBuffers writes the pieces in order with writev, one system call
// where the socket takes them all: the HTTP/1.1 loop's chunk of a streamed
// body is its size line, the data and a CRLF, three writes otherwise.
// Write is WriteBuffers of one piece. More pieces than the iovecs kept go
// in groups, under the one lock, so concurrent writers never interleave.
func (c *rawConn) WriteBuffers(bufs ...[]byte) (int64, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	var total int64
	for len(bufs) > 0 {
		group := bufs[:min(len(bufs), len(c.wiov))]
		bufs = bufs[len(group):]
		n, err := c.writev(group)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// writev writes up to len(c.wiov) pieces; c.wmu is held. Only the pieces'
// bytes are kept (in the iovecs, until it returns), never the slice of
// pieces, so a caller's variadic argument stays on its stack.
func (c *rawConn) writev(bufs [][]byte) (int64, error) {
	c.wiovs = c.wiov[:0]
	for _, b := range bufs {
		if len(b) > 0 {
			c.wiovs = append(c.wiovs, syscall.Iovec{Base: &b[0]})
			c.wiovs[len(c.wiovs)-1].SetLen(len(b))
		}
	}
	c.wn, c.werr = 0, nil
	var err error
	if len(c.wiovs) > 0 {
		err = c.rc.Write(c.writevFn) // closed, or a deadline passed: net's own error
	}
	if err == nil && c.werr != nil {
		err = c.opError("write", c.werr)
	}
	c.wiovs = nil
	c.wiov = [4]syscall.Iovec{} // no pointers into the callers' buffers kept
	return int64(c.wn), err
}

func (c *rawConn) writevFd(fd uintptr) bool {
	for len(c.wiovs) > 0 {
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&c.wiovs[0])), uintptr(len(c.wiovs)))
		switch e {
		case 0:
			c.wn += int(n)
			for n > 0 && len(c.wiovs) > 0 {
				if l := uintptr(c.wiovs[0].Len); n >= l {
					n -= l
					c.wiovs = c.wiovs[1:]
				} else {
					c.wiovs[0].Base = (*byte)(unsafe.Add(unsafe.Pointer(c.wiovs[0].Base), n))
					c.wiovs[0].SetLen(int(l - n))
					n = 0
				}
			}
			continue
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		c.werr = e
		return true
	}
	return true
}

// opError wraps an errno as net.Conn's methods do, so callers that look
// for io.EOF, a reset or a broken pipe find it.
func (c *rawConn) opError(op string, err error) error {
	if err == io.EOF {
		return err
	}
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError(op, err)}
}

// idleClosed reports whether the peer of an idle upstream connection closed
// it (or reset it, or sent bytes no request asked for), without blocking:
// one non-blocking MSG_PEEK read. ok is false where it cannot tell.
func idleClosed(nc net.Conn) (closed, ok bool) {
	if cn, isCN := nc.(*closeNotifyConn); isCN {
		nc = cn.Conn
	}
	var rc syscall.RawConn
	switch c := nc.(type) {
	case *rawConn:
		rc = c.rc // held: SyscallConn allocates each time
	case syscall.Conn:
		var err error
		if rc, err = c.SyscallConn(); err != nil {
			return true, true
		}
	default:
		return false, false
	}
	var b [1]byte
	// Control, not Read: the probe never waits for readiness, so it needs
	// neither the read lock nor the poller; and a raw call, as rawConn's:
	// MSG_DONTWAIT never blocks, and the scheduler's syscall path wakes
	// sysmon (see rawConn).
	err := rc.Control(func(fd uintptr) {
		_, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), 1,
			syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
		// Would block: open and quiet, as an idle connection is. Anything
		// else — end of stream, a reset, a byte — means not reusable.
		closed = e != syscall.EAGAIN
	})
	return closed || err != nil, true
}
