package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/inferwatch/inferwatch/proxy/h1"
)

// h1Pool is the HTTP/1.1 upstream path for requests whose body is in memory
// (or absent): the handler's goroutine writes the request and reads the
// response on a pooled keep-alive connection itself. net/http's transport
// hands each request to a write loop and each response back from a read
// loop, two goroutine wake-ups a call that cost more than the forwarding;
// streaming bodies still take that path, where a concurrent writer is needed.
type h1Pool struct {
	dial        func(ctx context.Context) (net.Conn, error)
	idleTimeout time.Duration
	maxIdle     int                              // hard cap
	probe       func(net.Conn) (closed, ok bool) // idleClosed; tests watch it

	mu       sync.Mutex
	idle     []*h1Conn // most recently used last
	inflight int
	peak     int       // most calls at once in the current window
	lastPeak int       // in the previous window
	window   time.Time // start of the current window
}

// idleProbeAfter is how long a connection must have been idle before its
// reuse probes whether the upstream closed it: far below any keep-alive
// timeout servers use, far above the gaps between calls under load.
const idleProbeAfter = 50 * time.Millisecond

// peakWindow is how long a burst's concurrency keeps connections warm.
const peakWindow = time.Minute

// h1Conn is one upstream connection. Its read buffer is taken from a pool
// for one exchange and handed back when the exchange ends, so an idle
// connection holds no buffer: the pool keeps as many connections as the
// load's peak concurrency, but buffers only for the calls in flight.
type h1Conn struct {
	nc   net.Conn
	br   *bufio.Reader // during an exchange only, over lr
	lr   limitedConn
	used time.Time
	live bool // reused, and seen open just before this exchange
}

const h1BufSize = 32 << 10

// maxResponseHeadBytes bounds the response heads of one exchange (any 1xx
// and the final one together), as net/http's transport bounds them
// (MaxResponseHeaderBytes): h1.ReadResponse's fallback, net/http's reader,
// would take header lines without end. Bytes of the body read into the
// buffer with the head count too, as in net/http.
const maxResponseHeadBytes = 1 << 20

var errHeadTooLarge = fmt.Errorf("upstream response head exceeds %d bytes", maxResponseHeadBytes)

// limitedConn is the reader under an exchange's buffer: it lets remain
// bytes through, then fails with errHeadTooLarge; unlimited once the head
// is read.
type limitedConn struct {
	nc     net.Conn
	remain int64
}

func (l *limitedConn) Read(p []byte) (int, error) {
	if l.remain <= 0 {
		return 0, errHeadTooLarge
	}
	if int64(len(p)) > l.remain {
		p = p[:l.remain]
	}
	n, err := l.nc.Read(p)
	l.remain -= int64(n)
	return n, err
}

var (
	h1Readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, h1BufSize) }}
	h1Writers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, h1BufSize) }}
)

// release hands the read buffer back; the exchange is over.
func (c *h1Conn) release() {
	if c.br != nil {
		c.br.Reset(nil)
		h1Readers.Put(c.br)
		c.br = nil
	}
}

// close ends the connection and its exchange.
func (c *h1Conn) close() {
	c.nc.Close()
	c.release()
}

func newH1Pool(dial func(ctx context.Context) (net.Conn, error), maxIdle int, idleTimeout time.Duration) *h1Pool {
	return &h1Pool{dial: dial, maxIdle: maxIdle, idleTimeout: idleTimeout, window: time.Now(), probe: idleClosed}
}

// get returns an idle connection (reused true) or a new one. Connections
// are taken from the pool under its lock and checked outside it: the probe
// is a system call, and every call's get and put wait on that lock.
func (p *h1Pool) get(ctx context.Context) (*h1Conn, bool, error) {
	now := time.Now()
	p.mu.Lock()
	p.inflight++
	if now.Sub(p.window) >= peakWindow {
		p.lastPeak, p.peak, p.window = p.peak, 0, now
	}
	p.peak = max(p.peak, p.inflight)
	p.mu.Unlock()
	for c := p.popIdle(); c != nil; c = p.popIdle() {
		if now.Sub(c.used) >= p.idleTimeout {
			c.nc.Close()
			continue
		}
		// An upstream whose keep-alive is shorter than ours (uvicorn's 5 s,
		// KServe's Python servers) closes idle connections: skip those
		// before a request is written to one, so that a request lost on a
		// connection seen open is the upstream's failure, not ours to replay.
		// One used moments ago is taken as open unprobed: under load
		// connections come back within milliseconds, and probing every
		// reuse cost 1–4 µs a call (BenchmarkHTTP1Plane, ~145 cpu-µs).
		c.live = true
		if now.Sub(c.used) >= idleProbeAfter {
			closed, ok := p.probe(c.nc)
			if closed {
				c.nc.Close()
				continue
			}
			c.live = ok
		}
		return c, true, nil
	}
	nc, err := p.dial(ctx)
	if err != nil {
		p.done()
		return nil, false, err
	}
	return &h1Conn{nc: nc}, false, nil
}

// popIdle takes the most recently used idle connection, nil when none.
func (p *h1Pool) popIdle() *h1Conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.idle)
	if n == 0 {
		return nil
	}
	c := p.idle[n-1]
	p.idle[n-1] = nil // the slice's array no longer holds it
	p.idle = p.idle[:n-1]
	return c
}

func (p *h1Pool) done() {
	p.mu.Lock()
	p.inflight--
	p.mu.Unlock()
}

// put keeps a connection whose exchange ended cleanly, as many as recent
// load needed (the peak concurrency of this window or the last), closing
// the rest.
func (p *h1Pool) put(c *h1Conn) {
	c.release()
	c.used = time.Now()
	p.mu.Lock()
	p.inflight--
	keep := min(p.maxIdle, max(p.peak, p.lastPeak, 1))
	if len(p.idle) < keep {
		p.idle = append(p.idle, c)
		c = nil
	}
	p.mu.Unlock()
	if c != nil {
		c.nc.Close()
	}
}

// closeIdle closes every idle connection.
func (p *h1Pool) closeIdle() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, c := range idle {
		c.nc.Close()
	}
}

var errNoResponse = errors.New("upstream closed the connection before a response")

// roundTrip sends req (body nil or replayable through GetBody) and returns
// the response; its body hands the connection back when read to the end.
// Idle connections the upstream closed are skipped before a request is
// written (get). A reused connection that ends without a response byte is
// retried once on a new one, as net/http does: always when the connection
// could not be checked, else for an idempotent request only, since one
// seen open just before was most likely lost with the request in hand
// (a worker killed mid-inference), and a POST may not run twice.
func (p *h1Pool) roundTrip(req *http.Request) (*http.Response, error) {
	// A RoundTripper closes the request body whatever happens: a pooled
	// body buffer goes back only then.
	defer func() {
		if req.Body != nil {
			req.Body.Close()
		}
	}()
	for attempt := 0; ; attempt++ {
		c, reused, err := p.get(req.Context())
		if err != nil {
			return nil, err
		}
		if attempt > 0 && req.GetBody != nil {
			if req.Body != nil {
				req.Body.Close() // the first attempt's, written or not
			}
			body, err := req.GetBody()
			if err != nil {
				p.done()
				c.close()
				return nil, err
			}
			req.Body = body
		}
		res, sent, err := p.exchange(c, req)
		if err == nil {
			return res, nil
		}
		c.close()
		p.done()
		if reused && !sent && attempt == 0 && req.Context().Err() == nil && (!c.live || idempotent(req)) {
			continue
		}
		return nil, err
	}
}

// exchange writes req on c and reads the response head. sent says whether
// any response byte arrived (after which a retry could duplicate the call).
func (p *h1Pool) exchange(c *h1Conn, req *http.Request) (*http.Response, bool, error) {
	ctx := req.Context()
	stop := context.AfterFunc(ctx, func() { c.nc.SetDeadline(time.Unix(1, 0)) })
	bw := h1Writers.Get().(*bufio.Writer)
	bw.Reset(c.nc)
	err := h1.WriteRequest(bw, req)
	if err == nil {
		err = bw.Flush()
	}
	bw.Reset(nil)
	h1Writers.Put(bw)
	if err != nil {
		stop()
		return nil, false, fmt.Errorf("write request: %w", ctxErr(ctx, err))
	}
	c.br = h1Readers.Get().(*bufio.Reader)
	c.lr = limitedConn{nc: c.nc, remain: maxResponseHeadBytes}
	c.br.Reset(&c.lr)
	if _, err := c.br.Peek(1); err != nil {
		stop()
		if errors.Is(err, io.EOF) {
			err = errNoResponse
		}
		return nil, false, ctxErr(ctx, err)
	}
	res, err := h1.ReadResponse(c.br, req)
	if err != nil {
		stop()
		return nil, true, fmt.Errorf("read response: %w", ctxErr(ctx, err))
	}
	for res.StatusCode >= 100 && res.StatusCode < 200 && res.StatusCode != http.StatusSwitchingProtocols {
		// An interim answer (100 Continue to a body that went with the
		// request already, 102, 103 Early Hints) is dropped as net/http's
		// transport drops it; taken for the final one, the real answer would
		// be left unread on the connection.
		if res, err = h1.ReadResponse(c.br, req); err != nil {
			stop()
			return nil, true, fmt.Errorf("read response: %w", ctxErr(ctx, err))
		}
	}
	c.lr.remain = math.MaxInt64 // the body, or the switched protocol's bytes
	if res.StatusCode == http.StatusSwitchingProtocols {
		// The connection carries another protocol from here: it leaves the
		// pool, and the call's context no longer bounds it (the tunnel
		// closes it).
		if !stop() {
			return nil, true, ctxErr(ctx, errors.New("cancelled as the protocol switched"))
		}
		res.Body = &switchedConn{c: c, p: p}
		return res, true, nil
	}
	res.Body = &h1Body{rc: res.Body, c: c, p: p, stop: stop, keep: !res.Close && !req.Close}
	return res, true, nil
}

// switchedConn is an upstream connection after a 101: what the upstream
// sends, from the bytes buffered behind the 101 on, and what it is sent.
type switchedConn struct {
	c    *h1Conn
	p    *h1Pool
	once sync.Once
}

func (s *switchedConn) Read(b []byte) (int, error)  { return s.c.br.Read(b) }
func (s *switchedConn) Write(b []byte) (int, error) { return s.c.nc.Write(b) }

// CloseWrite forwards the client's end of the stream as a FIN.
func (s *switchedConn) CloseWrite() error {
	if !closeWrite(s.c.nc) {
		return errors.New("upstream connection cannot half-close")
	}
	return nil
}

// Close ends the connection. Its read buffer is not pooled again: a read
// may still be returning from it.
func (s *switchedConn) Close() error {
	s.once.Do(func() {
		s.c.nc.Close()
		s.p.done()
	})
	return nil
}

// ctxErr prefers the context's error, so a cancelled call classifies as
// cancelled and not as the broken read that cancelling caused.
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// h1Body is a response body that returns its connection to the pool once
// read to EOF and closed, or closes it when the exchange ended early.
type h1Body struct {
	rc   io.ReadCloser
	c    *h1Conn
	p    *h1Pool
	stop func() bool
	keep bool
	eof  bool
	once sync.Once
}

func (b *h1Body) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

func (b *h1Body) Close() error {
	b.once.Do(func() {
		err := b.rc.Close()
		cancelled := !b.stop() // the deadline may have been set
		if b.keep && b.eof && err == nil && !cancelled && b.c.br.Buffered() == 0 {
			b.p.put(b.c)
			return
		}
		b.c.close()
		b.p.done()
	})
	return nil
}

// idempotent reports a request net/http would replay after it went out:
// a safe method, or one the client marked with an idempotency key.
func idempotent(req *http.Request) bool {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	_, key := req.Header["Idempotency-Key"]
	_, xkey := req.Header["X-Idempotency-Key"]
	return key || xkey
}
