//go:build linux

package main

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// The uring mode forwards the same traffic as the loop over io_uring: one
// ring on one locked thread, a request's send to the upstream linked to the
// receive of its answer and a response's send linked to the receive of the
// next request, so that a call costs the kernel a share of one or two
// io_uring_enter calls instead of a read, a write and an epoll_wait per hop.
// It answers one question of issue #9: how far under nginx's CPU a call a
// forwarder can get on this kernel when it stops paying a system call per
// operation. Measuring nothing, it is a floor, not a proxy: one request in
// flight per client connection and no pipelining (a second request already
// read when the first one's answer has gone out waits for more bytes).

// Kernel ABI (include/uapi/linux/io_uring.h).
const (
	sysIOUringSetup = 425
	sysIOUringEnter = 426

	opAccept  = 13
	opConnect = 16
	opSend    = 26
	opRecv    = 27

	sqeIOLink         = 1 << 2
	sqeCQESkipSuccess = 1 << 6

	enterGetEvents = 1 << 0

	setupCoopTaskrun  = 1 << 8
	setupSingleIssuer = 1 << 12
	setupDeferTaskrun = 1 << 13

	featSingleMmap = 1 << 0
	offSQES        = 0x10000000
)

type ringOffsets struct {
	head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
	resv2                                                           uint64
}

type cqOffsets struct {
	head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
	resv2                                                           uint64
}

type uringParams struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFD uint32
	resv                                                                   [3]uint32
	sqOff                                                                  ringOffsets
	cqOff                                                                  cqOffsets
}

type sqe struct {
	opcode      uint8
	flags       uint8
	ioprio      uint16
	fd          int32
	off         uint64
	addr        uint64
	len         uint32
	opFlags     uint32
	userData    uint64
	bufIndex    uint16
	personality uint16
	spliceFD    int32
	addr3       uint64
	pad         uint64
}

type cqe struct {
	userData uint64
	res      int32
	flags    uint32
}

// ring is an io_uring's two queues, mapped.
type ring struct {
	fd                     int
	sqHead, sqTail, sqMask *uint32
	sqArray                []uint32
	sqes                   []sqe
	cqHead, cqTail, cqMask *uint32
	cqes                   []cqe
	queued                 uint32 // SQEs written and not yet submitted
	deferred               bool
}

func newRing(entries uint32, deferTaskrun bool) (*ring, error) {
	var p uringParams
	if deferTaskrun {
		p.flags = setupSingleIssuer | setupDeferTaskrun
	} else {
		p.flags = setupCoopTaskrun
	}
	fd, _, e := syscall.Syscall(sysIOUringSetup, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
	if e != 0 {
		return nil, fmt.Errorf("io_uring_setup: %w", e)
	}
	if p.features&featSingleMmap == 0 {
		syscall.Close(int(fd))
		return nil, fmt.Errorf("io_uring_setup: kernel without IORING_FEAT_SINGLE_MMAP")
	}
	size := max(p.sqOff.array+p.sqEntries*4, p.cqOff.cqes+p.cqEntries*uint32(unsafe.Sizeof(cqe{})))
	rb, err := syscall.Mmap(int(fd), 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED|syscall.MAP_POPULATE)
	if err != nil {
		syscall.Close(int(fd))
		return nil, fmt.Errorf("mmap rings: %w", err)
	}
	sb, err := syscall.Mmap(int(fd), offSQES, int(p.sqEntries)*int(unsafe.Sizeof(sqe{})), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED|syscall.MAP_POPULATE)
	if err != nil {
		syscall.Close(int(fd))
		return nil, fmt.Errorf("mmap SQEs: %w", err)
	}
	u32 := func(off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&rb[off])) }
	return &ring{
		fd:       int(fd),
		sqHead:   u32(p.sqOff.head),
		sqTail:   u32(p.sqOff.tail),
		sqMask:   u32(p.sqOff.ringMask),
		sqArray:  unsafe.Slice(u32(p.sqOff.array), p.sqEntries),
		sqes:     unsafe.Slice((*sqe)(unsafe.Pointer(&sb[0])), p.sqEntries),
		cqHead:   u32(p.cqOff.head),
		cqTail:   u32(p.cqOff.tail),
		cqMask:   u32(p.cqOff.ringMask),
		cqes:     unsafe.Slice((*cqe)(unsafe.Pointer(&rb[p.cqOff.cqes])), p.cqEntries),
		deferred: deferTaskrun,
	}, nil
}

// get returns the next free SQE, zeroed, submitting what is queued first
// when the queue is full.
func (r *ring) get() (*sqe, error) {
	tail := atomic.LoadUint32(r.sqTail) + r.queued
	if tail-atomic.LoadUint32(r.sqHead) >= uint32(len(r.sqes)) {
		if err := r.enter(0); err != nil {
			return nil, err
		}
		tail = atomic.LoadUint32(r.sqTail)
	}
	i := tail & *r.sqMask
	r.sqArray[i] = i
	s := &r.sqes[i]
	*s = sqe{}
	r.queued++
	return s, nil
}

// enter submits what is queued and, with wait > 0, waits for that many
// completions.
func (r *ring) enter(wait uint32) error {
	n := r.queued
	atomic.StoreUint32(r.sqTail, atomic.LoadUint32(r.sqTail)+n)
	r.queued = 0
	flags := uintptr(0)
	if wait > 0 || r.deferred {
		flags = enterGetEvents
	}
	for {
		var e syscall.Errno
		if wait > 0 {
			_, _, e = syscall.Syscall6(sysIOUringEnter, uintptr(r.fd), uintptr(n), uintptr(wait), flags, 0, 0)
		} else {
			_, _, e = syscall.RawSyscall6(sysIOUringEnter, uintptr(r.fd), uintptr(n), 0, flags, 0, 0)
		}
		switch e {
		case 0:
			return nil
		case syscall.EINTR:
			n = 0 // they were taken before the signal
			continue
		}
		return fmt.Errorf("io_uring_enter: %w", e)
	}
}

// ops a conn can have in flight, in the low bits of user_data.
const (
	uAccept = iota
	uConnect
	uSend
	uRecv
)

type uconn struct {
	id       uint32
	fd       int
	kind     kind
	in       []byte
	peer     *uconn
	inflight int
	closing  bool
	dialed   bool // upstream: its connect has been submitted
}

type uloop struct {
	r     *ring
	quiet bool // sends and connects post a completion only when they fail
	lfd   int
	up    [16]byte // sockaddr_in of the upstream
	conns []*uconn // by id; nil for a free id
	free  []uint32
	idle  []*uconn
}

// runURing serves with a ring set up single-issuer with deferred task work
// (or cooperative task work) and, with quiet, sends and connects that
// succeed posting no completion: the receive linked after each says it
// succeeded, so the loop is not woken once for the send and again for the
// answer.
func runURing(listen, upstream string, deferTaskrun, quiet bool) error {
	la, ua, err := addrs(listen, upstream)
	if err != nil {
		return err
	}
	// The ring is single-issuer with deferred task work: every enter comes
	// from this thread.
	runtime.LockOSThread()
	lfd, err := listenFD(la, listen, 0)
	if err != nil {
		return err
	}
	r, err := newRing(512, deferTaskrun)
	if err != nil {
		return err
	}
	l := &uloop{r: r, lfd: lfd, quiet: quiet}
	l.up[0] = syscall.AF_INET // little-endian sa_family
	l.up[2], l.up[3] = byte(ua.Port>>8), byte(ua.Port)
	copy(l.up[4:8], ua.Addr[:])
	if err := l.accept(); err != nil {
		return err
	}
	for {
		if err := r.enter(1); err != nil {
			return err
		}
		head := atomic.LoadUint32(r.cqHead)
		for tail := atomic.LoadUint32(r.cqTail); head != tail; head++ {
			c := r.cqes[head&*r.cqMask]
			atomic.StoreUint32(r.cqHead, head+1)
			if err := l.complete(c.userData, c.res); err != nil {
				return err
			}
		}
	}
}

func (l *uloop) submit(c *uconn, op uint8, fd int, addr unsafe.Pointer, n int, off uint64, flags uint32, link bool) error {
	s, err := l.r.get()
	if err != nil {
		return err
	}
	s.opcode = op
	s.fd = int32(fd)
	s.addr = uint64(uintptr(addr))
	s.len = uint32(n)
	s.off = off
	s.opFlags = flags
	if link {
		s.flags = sqeIOLink
	}
	counted := true
	if l.quiet && (op == opSend || op == opConnect) {
		// A failure still posts, possibly after the linked receive's
		// cancellation has closed c: such a completion is not c's to
		// count, and is ignored.
		s.flags |= sqeCQESkipSuccess
		counted = false
	}
	var id, kindOp uint64
	switch op {
	case opConnect:
		kindOp = uConnect
	case opSend:
		kindOp = uSend
	case opRecv:
		kindOp = uRecv
	}
	if c != nil {
		id = uint64(c.id)
		if counted {
			c.inflight++
		}
	}
	s.userData = id<<8 | kindOp
	return nil
}

func (l *uloop) accept() error {
	return l.submit(nil, opAccept, l.lfd, nil, 0, 0, syscall.SOCK_CLOEXEC, false)
}

func (l *uloop) newConn(fd int, k kind) *uconn {
	c := &uconn{fd: fd, kind: k}
	if n := len(l.free); n > 0 {
		c.id = l.free[n-1]
		l.free = l.free[:n-1]
		l.conns[c.id] = c
	} else {
		c.id = uint32(len(l.conns))
		l.conns = append(l.conns, c)
	}
	return c
}

// recv receives into the free end of c.in, growing it first when full.
func (l *uloop) recv(c *uconn, link bool) error {
	if len(c.in) == cap(c.in) {
		if cap(c.in) >= maxMsg {
			l.close(c)
			return nil
		}
		c.in = append(c.in, make([]byte, max(16<<10, cap(c.in)))...)[:len(c.in)]
	}
	free := c.in[len(c.in):cap(c.in)]
	return l.submit(c, opRecv, c.fd, unsafe.Pointer(&free[0]), len(free), 0, 0, link)
}

func (l *uloop) send(c *uconn, b []byte, link bool) error {
	return l.submit(c, opSend, c.fd, unsafe.Pointer(&b[0]), len(b), 0, syscall.MSG_WAITALL|syscall.MSG_NOSIGNAL, link)
}

// close shuts c down at once, so its operations in flight end, and closes
// its descriptor once the last has; a peer in mid-exchange goes too.
func (l *uloop) close(c *uconn) {
	if c == nil || c.closing {
		return
	}
	c.closing = true
	syscall.Shutdown(c.fd, syscall.SHUT_RDWR)
	if p := c.peer; p != nil {
		c.peer, p.peer = nil, nil
		l.close(p)
	}
	l.release(c)
}

func (l *uloop) release(c *uconn) {
	if c.closing && c.inflight == 0 {
		syscall.Close(c.fd)
		l.conns[c.id] = nil
		l.free = append(l.free, c.id)
	}
}

func (l *uloop) complete(ud uint64, res int32) error {
	op := ud & 0xff
	if op == uAccept {
		if res >= 0 {
			fd := int(res)
			syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1)
			if err := l.recv(l.newConn(fd, kClient), false); err != nil {
				return err
			}
		}
		return l.accept()
	}
	if l.quiet && (op == uSend || op == uConnect) {
		return nil // a failure: the linked receive's cancellation acts on it
	}
	c := l.conns[ud>>8]
	c.inflight--
	if c.closing {
		l.release(c)
		return nil
	}
	if res < 0 {
		l.close(c)
		return nil
	}
	switch {
	case op == uConnect:
		return nil // the linked send follows
	case op == uSend:
		if c.kind == kClient {
			l.pool(c)
		}
		return nil // the linked receive follows
	}
	// uRecv
	if c.kind == kClient {
		// Linked after the response's send: that send went out, and the
		// upstream it came from is free (already, unless quiet).
		l.pool(c)
	}
	if res == 0 {
		l.close(c)
		return nil
	}
	c.in = c.in[:len(c.in)+int(res)]
	if c.kind == kClient {
		return l.request(c)
	}
	return l.response(c)
}

// pool returns the upstream connection of client c's finished exchange to
// the idle pool.
func (l *uloop) pool(c *uconn) {
	u := c.peer
	if u == nil {
		return
	}
	c.peer, u.peer = nil, nil
	total, _, _ := frame(u.in, false)
	u.in = u.in[:copy(u.in, u.in[total:])]
	if len(u.in) != 0 {
		l.close(u)
	} else {
		l.idle = append(l.idle, u)
	}
}

// request starts the exchange of a complete request: its send upstream
// linked to the receive of the answer.
func (l *uloop) request(c *uconn) error {
	total, ok, err := frame(c.in, true)
	if err != nil {
		l.close(c)
		return nil
	}
	if !ok {
		return l.recv(c, false)
	}
	u, err := l.upstream()
	if err != nil {
		l.close(c)
		return nil
	}
	c.peer, u.peer = u, c
	if !u.dialed {
		u.dialed = true
		if err := l.submit(u, opConnect, u.fd, unsafe.Pointer(&l.up[0]), 0, uint64(len(l.up)), 0, true); err != nil {
			return err
		}
	}
	if err := l.send(u, c.in[:total], true); err != nil {
		return err
	}
	return l.recv(u, false)
}

// response, once the whole answer is in, sends it to the client linked to
// the receive of the client's next request.
func (l *uloop) response(u *uconn) error {
	c := u.peer
	if c == nil {
		l.close(u)
		return nil
	}
	total, ok, err := frame(u.in, false)
	if err != nil {
		l.close(u)
		return nil
	}
	if !ok {
		return l.recv(u, false)
	}
	// The request's send finished before this receive began (they were
	// linked): its bytes leave the client's buffer before a receive
	// writes after them.
	rt, _, _ := frame(c.in, true)
	c.in = c.in[:copy(c.in, c.in[rt:])]
	if err := l.send(c, u.in[:total], true); err != nil {
		return err
	}
	return l.recv(c, false)
}

func (l *uloop) upstream() (*uconn, error) {
	if n := len(l.idle); n > 0 {
		u := l.idle[n-1]
		l.idle = l.idle[:n-1]
		return u, nil
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1)
	return l.newConn(fd, kUpstream), nil
}
