//go:build linux

package h1

import (
	"errors"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// hangups learns of clients leaving from an epoll set of its own. A
// clear-text TCP connection joins it, edge-triggered for the peer's FIN
// (EPOLLRDHUP) and errors, at its first call and stays for its life (the
// kernel drops it from the set when it closes), so watching a call costs
// no system call and no goroutine: the thread blocked in epoll_wait wakes
// only when a client closes or resets. Before, every call that outlived
// WatchAfter parked a goroutine in a one-byte read and ended it with a
// deadline (at full HTTP JSON load, where every call does, about 7 % of the
// sidecar's CPU samples). Go's netpoller keeps the descriptor too: a
// descriptor may sit in several epoll sets.
type hangups struct {
	once sync.Once
	epfd int
	err  error

	mu   sync.Mutex
	next uint64
	byID map[uint64]*conn
}

var hangupPoller hangups

// register adds c for its life; false: it cannot be polled here (its calls
// are watched with a read instead).
func (h *hangups) register(c *conn) bool {
	h.once.Do(func() {
		h.epfd, h.err = unix.EpollCreate1(unix.EPOLL_CLOEXEC)
		if h.err == nil {
			h.byID = make(map[uint64]*conn)
			go h.loop()
		}
	})
	if h.err != nil {
		return false
	}
	h.mu.Lock()
	h.next++
	id := h.next
	h.byID[id] = c
	h.mu.Unlock()
	ev := unix.EpollEvent{Events: unix.EPOLLRDHUP | unix.EPOLLET, Fd: int32(uint32(id)), Pad: int32(uint32(id >> 32))}
	var err error
	cerr := c.rc.Control(func(fd uintptr) {
		err = unix.EpollCtl(h.epfd, unix.EPOLL_CTL_ADD, int(fd), &ev)
	})
	if err != nil || cerr != nil {
		h.forget(id)
		return false
	}
	c.pollID = id
	return true
}

// forget drops c's entry when it ends; its descriptor leaves the set when
// it closes.
func (h *hangups) forget(id uint64) {
	h.mu.Lock()
	delete(h.byID, id)
	h.mu.Unlock()
}

// loop runs for the life of the process in a thread of its own.
func (h *hangups) loop() {
	var evs [64]unix.EpollEvent
	for {
		n, err := unix.EpollWait(h.epfd, evs[:], -1)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return // EBADF and the like cannot happen to a set nobody closes
		}
		for _, ev := range evs[:n] {
			id := uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
			h.mu.Lock()
			c := h.byID[id]
			h.mu.Unlock()
			if c != nil {
				c.peerHungUp()
			}
		}
	}
}

// peerLeft tells a closed or reset peer from data waiting (a pipelined
// request: that client is not leaving) or nothing at all.
func peerLeft(rc syscall.RawConn) (left, nothing bool) {
	var b [1]byte
	var n int
	var err error
	if rc.Control(func(fd uintptr) {
		n, _, err = unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
	}) != nil {
		return false, false // closed here: the call is over
	}
	switch {
	case errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR):
		return false, true
	case err != nil:
		return true, false // reset
	}
	return n == 0, false
}
