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
	// WatchAfter is how long a call runs before its client connection is
	// watched for the client leaving (which cancels the request's context).
	WatchAfter time.Duration
	// ConnContext, if set, derives each connection's base context.
	ConnContext func(context.Context, net.Conn) context.Context

	mu      sync.Mutex
	conns   map[*conn]connState
	closing bool
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
	cr     *connReader
	br     *bufio.Reader
	bw     *bufio.Writer
	remote string
	tls    *tls.ConnectionState
	head   []byte // the request head's bytes, reused
}

// ServeConn serves requests on c until the client closes it, a request
// asks for the connection to end, an error breaks its framing, or the
// server shuts down. It closes c.
func (s *Server) ServeConn(nc net.Conn) {
	c := &conn{srv: s, nc: nc, remote: nc.RemoteAddr().String()}
	if !s.setState(c, stateIdle) {
		nc.Close()
		return
	}
	defer s.forget(c)
	defer nc.Close()
	if tc, ok := nc.(interface{ ConnectionState() tls.ConnectionState }); ok {
		st := tc.ConnectionState()
		c.tls = &st
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
		if !c.serve(ctx, req) {
			return
		}
		if !s.setState(c, stateIdle) {
			return
		}
	}
}

// serve runs the handler for one request and finishes its response. It
// reports whether the connection may carry another request.
func (c *conn) serve(base context.Context, req *http.Request) (keep bool) {
	ctx, cancel := context.WithCancelCause(base)
	req = req.WithContext(ctx)
	w := newResponse(c, req)
	body, _ := req.Body.(*body)
	if body != nil {
		body.resp, body.req = w, req
		w.body, w.expect = body, body.expect
	}
	watch := c.watchAfter(c.srv.watchAfter(), body, cancel)
	aborted := c.run(w, req)
	clientGone := watch.stop()
	cancel(nil)
	if aborted || clientGone {
		return false
	}
	if !w.finish() {
		return false
	}
	if body != nil && !body.drain() {
		return false
	}
	return !w.closeAfter
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
	// Let the client read the answer before the close resets it.
	if tc, ok := c.nc.(interface{ CloseWrite() error }); ok {
		tc.CloseWrite()
		c.nc.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		io.Copy(io.Discard, io.LimitReader(c.nc, 256<<10))
	}
}

func (s *Server) logger() *slog.Logger {
	if s.Logger != nil {
		return s.Logger
	}
	return slog.Default()
}

func (s *Server) idleTimeout() time.Duration {
	if s.IdleTimeout > 0 {
		return s.IdleTimeout
	}
	return defaultIdleTimeout
}

func (s *Server) readHeaderTimeout() time.Duration {
	if s.ReadHeaderTimeout > 0 {
		return s.ReadHeaderTimeout
	}
	return defaultReadHeaderTimeout
}

func (s *Server) maxHeaderBytes() int {
	if s.MaxHeaderBytes > 0 {
		return s.MaxHeaderBytes
	}
	return defaultMaxHeaderBytes
}

func (s *Server) watchAfter() time.Duration {
	if s.WatchAfter > 0 {
		return s.WatchAfter
	}
	return defaultWatchAfter
}

// setState records c's state; false means the server is shutting down and
// c must end (an idle connection at once, an active one after its call).
func (s *Server) setState(c *conn, st connState) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	if s.conns == nil {
		s.conns = make(map[*conn]connState)
	}
	s.conns[c] = st
	return true
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

// closing reports whether Shutdown has begun; a response then asks the
// client to close its connection.
func (s *Server) shuttingDown() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

// Shutdown closes idle connections, lets each active one finish its call
// (its response says Connection: close) and waits for them until ctx ends;
// then it closes what is left and returns ctx's error.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	s.gone = make(chan struct{}, 1)
	for c, st := range s.conns {
		if st == stateIdle {
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
