//go:build linux

// Command evloop is a measuring instrument, not part of the sidecar: an
// HTTP/1.1 forwarder that runs one epoll loop on one locked OS thread over
// raw non-blocking sockets, with no measurement and no goroutine per
// connection. scripts/evloop-bench.sh builds and runs it beside nginx and the
// sidecar's frame plane, to tell how much of the sidecar's HTTP/1.1 cost is
// Go's netpoller and scheduler rather than the sidecar's own work (issue
// #9): a floor for what a Go process pays to forward this traffic here.
//
// Two other modes forward the same way for comparison: -mode goroutines (a
// goroutine per connection on Go's netpoller, goroutines.go) and -mode uring
// (one io_uring on one locked thread, uring.go).
//
// It forwards keep-alive HTTP/1.1 requests and responses framed by
// Content-Length (what the benchmark's KServe v2 JSON calls are), one
// request in flight per client connection, each over a pooled upstream
// connection. Anything else (chunked bodies, a head over the buffer, an
// upstream failure) ends the client connection: an instrument, not a proxy.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"unsafe"
)

// maxMsg is the largest request or response evloop holds; its buffers grow
// to it.
const maxMsg = 4 << 20

type kind uint8

const (
	kListener kind = iota
	kClient
	kUpstream
)

// conn is one socket and what the loop knows about it.
type conn struct {
	fd   int
	kind kind
	in   []byte // bytes read and not yet forwarded
	out  []byte // bytes still to write (a slice of the peer's in)
	peer *conn  // client ⇄ upstream during an exchange
	open bool   // upstream: connect finished
	free bool   // upstream: in the idle pool
}

type loop struct {
	ep        int
	up        syscall.SockaddrInet4
	conns     map[int32]*conn
	idle      []*conn
	pollFirst bool
	evs       [128]syscall.EpollEvent
}

func main() {
	listen := flag.String("listen", "127.0.0.1:8080", "address to accept HTTP/1.1 on")
	upstream := flag.String("upstream", "127.0.0.1:8000", "HTTP/1.1 upstream address")
	pollFirst := flag.Bool("poll-first", true, "try a non-blocking epoll_wait as a raw syscall before a blocking one")
	mode := flag.String("mode", "loop", "loop: one epoll loop on one thread; goroutines: a goroutine per connection on Go's netpoller; uring: one io_uring on one thread")
	deferTaskrun := flag.Bool("defer-taskrun", true, "uring: set the ring up single-issuer with deferred task work (completions run only when the loop enters)")
	quiet := flag.Bool("quiet-sends", true, "uring: sends and connects that succeed post no completion (the receive linked after each tells)")
	flag.Parse()
	var err error
	switch *mode {
	case "loop":
		err = run(*listen, *upstream, *pollFirst)
	case "goroutines":
		err = runGoroutines(*listen, *upstream)
	case "uring":
		err = runURing(*listen, *upstream, *deferTaskrun, *quiet)
	default:
		err = fmt.Errorf("-mode %q: want loop, goroutines or uring", *mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "evloop:", err)
		os.Exit(1)
	}
}

func sockaddr(s, field string) (syscall.SockaddrInet4, error) {
	ap, err := netip.ParseAddrPort(s)
	if err != nil || !ap.Addr().Is4() {
		return syscall.SockaddrInet4{}, fmt.Errorf("-%s %q: want an IPv4 address:port", field, s)
	}
	return syscall.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}, nil
}

// addrs parses the -listen and -upstream flags' values.
func addrs(listen, upstream string) (la, ua syscall.SockaddrInet4, err error) {
	if la, err = sockaddr(listen, "listen"); err != nil {
		return la, ua, err
	}
	ua, err = sockaddr(upstream, "upstream")
	return la, ua, err
}

// listenFD returns a socket listening on la (listen, as given), with the
// socket type flags extra.
func listenFD(la syscall.SockaddrInet4, listen string, extra int) (int, error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC|extra, 0)
	if err != nil {
		return 0, fmt.Errorf("socket: %w", err)
	}
	syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1)
	if err := syscall.Bind(fd, &la); err != nil {
		syscall.Close(fd)
		return 0, fmt.Errorf("bind %s: %w", listen, err)
	}
	if err := syscall.Listen(fd, 4096); err != nil {
		syscall.Close(fd)
		return 0, fmt.Errorf("listen %s: %w", listen, err)
	}
	return fd, nil
}

func run(listen, upstream string, pollFirst bool) error {
	la, ua, err := addrs(listen, upstream)
	if err != nil {
		return err
	}
	// The whole forwarder is this goroutine on this thread.
	runtime.LockOSThread()
	lfd, err := listenFD(la, listen, syscall.SOCK_NONBLOCK)
	if err != nil {
		return err
	}
	ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return fmt.Errorf("epoll_create1: %w", err)
	}
	l := &loop{ep: ep, up: ua, conns: map[int32]*conn{}, pollFirst: pollFirst}
	if err := l.add(&conn{fd: lfd, kind: kListener}); err != nil {
		return err
	}
	for {
		n, err := l.wait()
		if err != nil {
			return err
		}
		for i := range n {
			ev := l.evs[i]
			c := l.conns[ev.Fd]
			if c == nil {
				continue
			}
			switch {
			case c.kind == kListener:
				l.accept(c)
			default:
				if ev.Events&(syscall.EPOLLOUT|syscall.EPOLLERR|syscall.EPOLLHUP) != 0 {
					l.writable(c)
				}
				if ev.Events&(syscall.EPOLLIN|syscall.EPOLLRDHUP|syscall.EPOLLERR|syscall.EPOLLHUP) != 0 && l.conns[ev.Fd] == c {
					l.readable(c)
				}
			}
		}
	}
}

// wait returns ready events. With pollFirst it first polls without blocking as
// a raw syscall (no scheduler bookkeeping), and blocks, as an ordinary
// syscall that lets the runtime hand the P on, only when nothing is ready.
func (l *loop) wait() (int, error) {
	if l.pollFirst {
		r, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_WAIT, uintptr(l.ep), uintptr(unsafe.Pointer(&l.evs[0])), uintptr(len(l.evs)), 0, 0, 0)
		if e == 0 && r > 0 {
			return int(r), nil
		}
	}
	for {
		n, err := syscall.EpollWait(l.ep, l.evs[:], -1)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("epoll_wait: %w", err)
		}
		return n, nil
	}
}

func (l *loop) add(c *conn) error {
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLOUT | syscall.EPOLLRDHUP | -syscall.EPOLLET, Fd: int32(c.fd)}
	if err := syscall.EpollCtl(l.ep, syscall.EPOLL_CTL_ADD, c.fd, &ev); err != nil {
		return fmt.Errorf("epoll_ctl add: %w", err)
	}
	l.conns[int32(c.fd)] = c
	return nil
}

func (l *loop) close(c *conn) {
	if c == nil || l.conns[int32(c.fd)] != c {
		return
	}
	delete(l.conns, int32(c.fd))
	syscall.Close(c.fd) // also leaves the epoll set
	if p := c.peer; p != nil {
		c.peer, p.peer = nil, nil
		l.close(p)
	}
}

func (l *loop) accept(ln *conn) {
	for {
		fd, _, err := syscall.Accept4(ln.fd, syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC)
		if err != nil {
			return // EAGAIN, or a transient error: the next event retries
		}
		syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1)
		if l.add(&conn{fd: fd, kind: kClient}) != nil {
			syscall.Close(fd)
		}
	}
}

// readable reads c until the kernel has nothing more, then moves whatever
// is complete on.
func (l *loop) readable(c *conn) {
	eof := false
	for {
		if len(c.in) == cap(c.in) {
			if cap(c.in) >= maxMsg {
				l.close(c)
				return
			}
			c.in = append(c.in, make([]byte, max(16<<10, cap(c.in)))...)[:len(c.in)]
		}
		n, err := rawRead(c.fd, c.in[len(c.in):cap(c.in)])
		if n > 0 {
			c.in = c.in[:len(c.in)+n]
			continue
		}
		if err == syscall.EAGAIN {
			break
		}
		if err == syscall.EINTR {
			continue
		}
		eof = true
		break
	}
	switch c.kind {
	case kClient:
		if eof {
			l.close(c)
			return
		}
		l.request(c)
	case kUpstream:
		if c.free {
			l.dropIdle(c)
			return
		}
		l.response(c, eof)
	}
}

// request forwards a complete request on a pooled upstream connection.
func (l *loop) request(c *conn) {
	if c.peer != nil || len(c.in) == 0 {
		return // one exchange at a time; a pipelined request waits
	}
	total, ok, err := frame(c.in, true)
	if err != nil {
		l.close(c)
		return
	}
	if !ok {
		return
	}
	u, err := l.upstream()
	if err != nil {
		l.close(c)
		return
	}
	c.peer, u.peer = u, c
	u.out = c.in[:total]
	if u.open {
		l.flush(u)
	}
}

// response forwards a complete response to the client and pools the
// upstream connection.
func (l *loop) response(u *conn, eof bool) {
	c := u.peer
	if c == nil {
		l.close(u)
		return
	}
	total, ok, err := frame(u.in, false)
	if err != nil || (!ok && eof) {
		l.close(u)
		return
	}
	if !ok {
		return
	}
	c.out = u.in[:total]
	l.flush(c)
}

// writable resumes a write the kernel had no room for (or a connect that
// finished).
func (l *loop) writable(c *conn) {
	if c.kind == kUpstream && !c.open {
		if v, err := syscall.GetsockoptInt(c.fd, syscall.SOL_SOCKET, syscall.SO_ERROR); err != nil || v != 0 {
			l.close(c)
			return
		}
		c.open = true
	}
	if len(c.out) > 0 {
		l.flush(c)
	}
}

// flush writes c.out; when it is all written the exchange moves on.
func (l *loop) flush(c *conn) {
	for len(c.out) > 0 {
		n, err := rawWrite(c.fd, c.out)
		if n > 0 {
			c.out = c.out[n:]
			continue
		}
		if err == syscall.EAGAIN {
			return // EPOLLOUT resumes
		}
		if err == syscall.EINTR {
			continue
		}
		l.close(c)
		return
	}
	c.out = nil
	switch c.kind {
	case kUpstream: // the request went out: its bytes leave the client's buffer
		cl := c.peer
		if cl != nil {
			total, _, _ := frame(cl.in, true)
			cl.in = cl.in[:copy(cl.in, cl.in[total:])]
		}
	case kClient: // the response went out: the upstream connection is free
		u := c.peer
		c.peer = nil
		if u != nil {
			total, _, _ := frame(u.in, false)
			u.in = u.in[:copy(u.in, u.in[total:])]
			u.peer = nil
			if len(u.in) != 0 {
				l.close(u)
			} else {
				u.free = true
				l.idle = append(l.idle, u)
			}
		}
		l.request(c)
	}
}

// upstream returns an idle upstream connection or starts a new one.
func (l *loop) upstream() (*conn, error) {
	for len(l.idle) > 0 {
		u := l.idle[len(l.idle)-1]
		l.idle = l.idle[:len(l.idle)-1]
		if l.conns[int32(u.fd)] == u {
			u.free = false
			return u, nil
		}
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1)
	u := &conn{fd: fd, kind: kUpstream}
	// Connect before joining the epoll set: a socket not yet connecting
	// polls as hung up.
	switch err := syscall.Connect(fd, &l.up); err {
	case nil:
		u.open = true
	case syscall.EINPROGRESS:
	default:
		syscall.Close(fd)
		return nil, err
	}
	if err := l.add(u); err != nil {
		syscall.Close(fd)
		return nil, err
	}
	return u, nil
}

// dropIdle closes an idle upstream connection the upstream closed or wrote
// on.
func (l *loop) dropIdle(u *conn) {
	for i, v := range l.idle {
		if v == u {
			l.idle = append(l.idle[:i], l.idle[i+1:]...)
			break
		}
	}
	l.close(u)
}

var errFraming = errors.New("unsupported framing")

// frame reports the length of the first message in b once all of it is
// there: its head and a Content-Length body. Requests without a length
// have no body; chunked messages are not supported.
func frame(b []byte, request bool) (int, bool, error) {
	end := bytes.Index(b, []byte("\r\n\r\n"))
	if end < 0 {
		return 0, false, nil
	}
	head := b[:end]
	n := -1
	for len(head) > 0 {
		i := bytes.Index(head, []byte("\r\n"))
		line := head
		if i >= 0 {
			line, head = head[:i], head[i+2:]
		} else {
			head = nil
		}
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		switch {
		case bytes.EqualFold(k, []byte("Content-Length")):
			x, err := strconv.Atoi(string(bytes.TrimSpace(v)))
			if err != nil || x < 0 {
				return 0, false, errFraming
			}
			n = x
		case bytes.EqualFold(k, []byte("Transfer-Encoding")):
			return 0, false, errFraming
		}
	}
	if n < 0 {
		if !request {
			return 0, false, errFraming
		}
		n = 0
	}
	total := end + 4 + n
	return total, len(b) >= total, nil
}

func rawRead(fd int, p []byte) (int, error) {
	r, _, e := syscall.RawSyscall(syscall.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

func rawWrite(fd int, p []byte) (int, error) {
	r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}
