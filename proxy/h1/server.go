package h1

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Defaults for the zero Server fields; ReadHeaderTimeout, IdleTimeout and
// MaxHeaderBytes are net/http's defaults as the stdlib data plane sets them.
const (
	defaultReadHeaderTimeout = 10 * time.Second
	defaultIdleTimeout       = 2 * time.Minute
	defaultMaxHeaderBytes    = 1 << 20
	defaultWatchAfter        = 10 * time.Millisecond
	bufSize                  = 4 << 10
)

// Server serves HTTP/1.x connections handed to ServeConn.
type Server struct {
	Handler           http.Handler
	Logger            *slog.Logger
	ReadHeaderTimeout time.Duration // from a request's first byte to the end of its head
	IdleTimeout       time.Duration // between requests on a kept-alive connection
	MaxHeaderBytes    int           // request line and header fields together
	// WatchAfter is how long a call runs before its client leaving cancels
	// the request's context (a client that half-closes after a short
	// request still gets its answer); where the hangup poller cannot look,
	// also when the watching read starts.
	WatchAfter time.Duration
	// ConnContext, if set, derives each connection's base context.
	ConnContext func(context.Context, net.Conn) context.Context

	closing atomic.Bool
	mu      sync.Mutex
	conns   map[*conn]struct{}
	gone    chan struct{} // signalled when a connection ends during shutdown
}

type connState uint8

const (
	stateIdle connState = iota
	stateActive
)

var (
	readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, bufSize) }}
	writers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, bufSize) }}
)

// conn is one client connection and what its loop reuses across requests.
type conn struct {
	srv    *Server
	nc     net.Conn
	state  atomic.Uint32 // a connState
	cr     *connReader
	br     *bufio.Reader
	bw     *bufio.Writer
	remote string
	tls    *tls.ConnectionState
	head   []byte // the request head's bytes, reused
	linger bool   // the last response went out: close lingering
	// hijacked: the handler took the connection over (hijack.go); the
	// server leaves it alone from then on.
	hijacked bool

	// The hangup poller's view (hangup_linux.go): rc is a clear-text TCP
	// connection's descriptor, pollID its entry once registered.
	rc         syscall.RawConn
	pollID     uint64
	pollFailed bool
	hmu        sync.Mutex
	hseen      bool     // the poller saw a hangup not yet checked by a call
	hwatch     *watcher // the call it is for; nil between calls
}

// ServeConn serves requests on c until the client closes it, a request
// asks for the connection to end, an error breaks its framing, or the
// server shuts down. It closes c.
func (s *Server) ServeConn(nc net.Conn) {
	c := &conn{srv: s, nc: nc, remote: nc.RemoteAddr().String()}
	if !s.track(c) {
		nc.Close()
		return
	}
	defer s.forget(c)
	defer func() {
		if !c.hijacked {
			nc.Close()
		}
	}()
	defer func() {
		if c.pollID != 0 {
			hangupPoller.forget(c.pollID)
		}
		if c.linger {
			c.lingerClose()
		}
	}()
	if tc, ok := nc.(interface{ ConnectionState() tls.ConnectionState }); ok {
		st := tc.ConnectionState()
		c.tls = &st
	}
	if sc, ok := nc.(syscall.Conn); ok && c.tls == nil {
		c.rc, _ = sc.SyscallConn()
	}
	c.cr = &connReader{nc: nc}
	c.br = readers.Get().(*bufio.Reader)
	c.br.Reset(c.cr)
	c.bw = writers.Get().(*bufio.Writer)
	c.bw.Reset(nc)
	defer func() {
		c.br.Reset(nil)
		readers.Put(c.br)
		c.bw.Reset(nil)
		writers.Put(c.bw)
	}()
	ctx := context.Background()
	if s.ConnContext != nil {
		ctx = s.ConnContext(ctx, nc)
	}
	for {
		if c.br.Buffered() == 0 {
			nc.SetReadDeadline(time.Now().Add(s.idleTimeout()))
			if _, err := c.br.Peek(1); err != nil {
				return
			}
		}
		if !s.setState(c, stateActive) {
			return
		}
		nc.SetReadDeadline(time.Now().Add(s.readHeaderTimeout()))
		req, err := c.readRequest()
		if err != nil {
			c.reject(err)
			return
		}
		nc.SetReadDeadline(time.Time{})
		if cap(c.head) > 64<<10 {
			c.head = nil // one huge head does not pin its buffer for the connection's life
		}
		if keep, answered := c.serve(ctx, req); !keep {
			c.linger = answered
			return
		}
		if !s.setState(c, stateIdle) {
			return
		}
	}
}

// serve runs the handler for one request and finishes its response. It
// reports whether the connection may carry another request, and, when it
// may not, whether the response went out whole (the connection ends in a
// lingering close).
func (c *conn) serve(base context.Context, req *http.Request) (keep, answered bool) {
	ctx, cancel := context.WithCancelCause(base)
	req = req.WithContext(ctx)
	w := newResponse(c, req)
	body, _ := req.Body.(*body)
	if body != nil {
		body.resp, body.req = w, req
		w.body, w.expect = body, body.expect
	}
	watch := c.watchAfter(c.srv.watchAfter(), body, cancel)
	w.watch = watch
	aborted := c.run(w, req)
	if c.hijacked {
		cancel(nil)
		return false, false
	}
	clientGone := watch.stop()
	cancel(nil)
	if aborted || clientGone {
		return false, false
	}
	if !w.finish() {
		return false, false
	}
	if body != nil && !body.drain() {
		return false, true
	}
	return !w.closeAfter, true
}

// run calls the handler; it reports a handler that aborted the response
// (http.ErrAbortHandler or any other panic), after which the connection
// must end without a clean finish, as net/http does it.
func (c *conn) run(w *response, req *http.Request) (aborted bool) {
	defer func() {
		if v := recover(); v != nil {
			aborted = true
			if v != http.ErrAbortHandler {
				buf := make([]byte, 16<<10)
				buf = buf[:runtime.Stack(buf, false)]
				c.srv.logger().Error("h1: handler panic", "remote", c.remote, "panic", fmt.Sprint(v), "stack", string(buf))
			}
			// What was buffered is sent so the client sees a cut-off
			// response, not a stalled one.
			c.bw.Flush()
		}
	}()
	c.srv.Handler.ServeHTTP(w, req)
	return false
}

// reject answers a request whose head could not be read, then the
// connection closes. A connection that closed or timed out gets nothing.
func (c *conn) reject(err error) {
	var he *httpError
	if !errors.As(err, &he) {
		return // EOF, reset or deadline while reading the head
	}
	c.srv.logger().Debug("h1: bad request", "remote", c.remote, "status", he.status, "err", he.msg)
	fmt.Fprintf(c.bw, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s",
		he.status, http.StatusText(he.status), len(he.msg)+1, he.msg+"\n")
	c.bw.Flush()
	c.linger = true
}

// lingerTime bounds a lingering close.
const lingerTime = 500 * time.Millisecond

// lingerClose lets the client read the last response before the
// connection closes. Closing a socket that holds unread bytes (a body the
// handler did not read, a pipelined request) makes the kernel reset it and
// drop what it had still to send, the response's tail; so the write side
// is shut first, a FIN after the last byte, and what the client sends is
// read and dropped until it closes or lingerTime passes (as net/http).
func (c *conn) lingerClose() {
	tc, ok := c.nc.(interface{ CloseWrite() error })
	if !ok || tc.CloseWrite() != nil {
		return
	}
	c.nc.SetReadDeadline(time.Now().Add(lingerTime))
	io.Copy(io.Discard, c.nc)
}

func (s *Server) logger() *slog.Logger {
	if s.Logger != nil {
		return s.Logger
	}
	return slog.Default()
}

func (s *Server) idleTimeout() time.Duration { return orDefault(s.IdleTimeout, defaultIdleTimeout) }
func (s *Server) readHeaderTimeout() time.Duration {
	return orDefault(s.ReadHeaderTimeout, defaultReadHeaderTimeout)
}
func (s *Server) maxHeaderBytes() int       { return orDefault(s.MaxHeaderBytes, defaultMaxHeaderBytes) }
func (s *Server) watchAfter() time.Duration { return orDefault(s.WatchAfter, defaultWatchAfter) }

// orDefault is v when set (positive), else d.
func orDefault[T int | time.Duration](v, d T) T {
	if v > 0 {
		return v
	}
	return d
}

// track registers c (false: the server is shutting down, c must not be
// served). The registry changes only when a connection starts or ends; a
// request's state changes are atomics, so no lock is shared between
// connections on the per-request path.
func (s *Server) track(c *conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing.Load() {
		return false
	}
	if s.conns == nil {
		s.conns = make(map[*conn]struct{})
	}
	s.conns[c] = struct{}{}
	return true
}

// setState records c's state; false means the server is shutting down and
// c must end (an idle connection at once, an active one after its call).
// The state is stored before closing is read, and Shutdown sets closing
// before it reads the states: one of the two always sees the other.
func (s *Server) setState(c *conn, st connState) bool {
	c.state.Store(uint32(st))
	return !s.closing.Load()
}

func (s *Server) forget(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	if s.gone != nil {
		select {
		case s.gone <- struct{}{}:
		default:
		}
	}
	s.mu.Unlock()
}

// Shutdown closes idle connections, lets each active one finish its call
// (its response says Connection: close) and waits for them until ctx ends;
// then it closes what is left and returns ctx's error.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing.Store(true)
	s.gone = make(chan struct{}, 1)
	for c := range s.conns {
		if connState(c.state.Load()) == stateIdle {
			c.nc.Close()
		}
	}
	s.mu.Unlock()
	for {
		s.mu.Lock()
		n := len(s.conns)
		s.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-s.gone:
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			s.mu.Lock()
			for c := range s.conns {
				c.nc.Close()
			}
			s.mu.Unlock()
			return ctx.Err()
		}
	}
}
