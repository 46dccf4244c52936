package proxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/inferwatch/inferwatch/proxy/h1"
	"github.com/inferwatch/inferwatch/proxy/h2"
)

// A listener with a frame plane hands each connection to the plane its
// first bytes ask for: the HTTP/2 client preface (or ALPN h2 over TLS) goes
// to the frame-level forwarder, HTTP/1.x to the h1 connection loop; either
// goes to net/http where the listener has no such plane.

// sniffTimeout bounds how long a connection may take to show its preface
// or finish its TLS handshake.
const sniffTimeout = 10 * time.Second

type sniffListener struct {
	net.Listener
	tls    *tls.Config
	frames *h2.Server // nil: HTTP/2 goes to net/http
	http1  *h1.Server // nil: HTTP/1.x goes to net/http
	conns  chan net.Conn
	failed chan struct{}
	err    error
}

func newSniffListener(nl net.Listener, tc *tls.Config, frames *h2.Server, http1 *h1.Server) *sniffListener {
	l := &sniffListener{Listener: nl, tls: tc, frames: frames, http1: http1, conns: make(chan net.Conn), failed: make(chan struct{})}
	go l.accept()
	return l
}

func (l *sniffListener) accept() {
	defer close(l.failed)
	var backoff time.Duration
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if retryAccept(err) {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				time.Sleep(backoff)
				continue
			}
			l.err = err
			return
		}
		backoff = 0
		go l.sniff(newRawConn(c))
	}
}

// retryAccept says whether an accept error passes: a timeout, or running
// out of descriptors or kernel memory for a moment (a burst of connections
// over the process's limit), which net/http's own accept loop also waits
// out. Ending the loop on it would leave the route deaf for good: net/http
// retries the error this listener then returns for ever.
func retryAccept(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// Accept returns the next connection for net/http.
func (l *sniffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.failed:
		return nil, l.err
	}
}

func (l *sniffListener) sniff(c net.Conn) {
	c.SetDeadline(time.Now().Add(sniffTimeout))
	if l.tls != nil {
		tc := tls.Server(c, l.tls)
		if err := tc.Handshake(); err != nil {
			c.Close()
			return
		}
		c.SetDeadline(time.Time{})
		l.serve(tc, tc.ConnectionState().NegotiatedProtocol == "h2")
		return
	}
	br := bufio.NewReaderSize(c, 4096)
	isH2, err := hasPreface(br)
	if err != nil {
		c.Close()
		return
	}
	if !isH2 && !http1RequestLine(br) {
		// Neither HTTP/2 nor HTTP/1.x (an invalid preface, say): an HTTP/2
		// endpoint must close the connection, not answer it in HTTP/1.1.
		c.Close()
		return
	}
	c.SetDeadline(time.Time{})
	l.serve(&sniffedConn{Conn: c, r: br}, isH2)
}

// serve hands c to its plane.
func (l *sniffListener) serve(c net.Conn, isH2 bool) {
	switch {
	case isH2 && l.frames != nil:
		l.frames.ServeConn(c)
	case !isH2 && l.http1 != nil:
		l.http1.ServeConn(c)
	default:
		l.deliver(c)
	}
}

func (l *sniffListener) deliver(c net.Conn) {
	select {
	case l.conns <- c:
	case <-l.failed:
		c.Close()
	}
}

const clientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// hasPreface reads as little as it must to tell the HTTP/2 client preface
// from anything else: the first byte that differs settles it.
func hasPreface(br *bufio.Reader) (bool, error) {
	n := 1
	for {
		b, err := br.Peek(n)
		if err != nil {
			return false, err
		}
		if string(b) != clientPreface[:len(b)] {
			return false, nil
		}
		if len(b) == len(clientPreface) {
			return true, nil
		}
		n = max(n+1, min(len(clientPreface), br.Buffered()))
	}
}

// http1RequestLine reports whether the buffered connection starts with an
// HTTP/1.x request line ("GET /x HTTP/1.1"), after at most
// h1.MaxLeadingBlankLines empty lines, reading no further than it.
func http1RequestLine(br *bufio.Reader) bool {
	start, blank := 0, 0
	n := 1
	for {
		b, err := br.Peek(n)
		if err != nil {
			return false // closed early, or a line longer than the buffer
		}
		for {
			i := bytes.IndexByte(b[start:], '\n')
			if i < 0 {
				break
			}
			line := strings.TrimSuffix(string(b[start:start+i]), "\r")
			if line == "" {
				if blank++; blank > h1.MaxLeadingBlankLines {
					return false
				}
				start += i + 1
				continue
			}
			sp := strings.LastIndexByte(line, ' ')
			return sp > 0 && strings.Count(line, " ") == 2 && (line[sp+1:] == "HTTP/1.1" || line[sp+1:] == "HTTP/1.0")
		}
		n = max(len(b)+1, br.Buffered())
	}
}

// sniffedConn replays the bytes read while sniffing.
type sniffedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *sniffedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// Buffered is how many bytes read while sniffing are still to be replayed.
func (c *sniffedConn) Buffered() int { return c.r.Buffered() }

// WriteBuffers writes the pieces in order, in one writev where the
// connection underneath can (rawConn), else one after another.
func (c *sniffedConn) WriteBuffers(bufs ...[]byte) (int64, error) {
	if bw, ok := c.Conn.(interface {
		WriteBuffers(...[]byte) (int64, error)
	}); ok {
		return bw.WriteBuffers(bufs...)
	}
	b := net.Buffers(bufs)
	return b.WriteTo(c.Conn)
}

// CloseWrite shuts the write side of the TCP connection underneath, for
// the planes' lingering closes.
func (c *sniffedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// SyscallConn reaches the TCP connection's descriptor, for the HTTP/1.1
// loop's hangup poller; the bytes Buffered holds are not in the socket.
func (c *sniffedConn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, errors.ErrUnsupported
	}
	return sc.SyscallConn()
}
