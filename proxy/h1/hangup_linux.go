//go:build linux

package h1

import (
	"errors"
	"sync"
	"syscall"
)

// hangups watches idle client connections for their peer leaving with an
// epoll instance of its own, so that a watched call costs two epoll_ctl
// calls instead of a goroutine parked in a one-byte read, the deadline that
// ends that read and the wake-ups both cost (at full HTTP JSON load, where
// every call outlives WatchAfter, those were about 7 % of the sidecar's CPU).
// Go's netpoller keeps the descriptor too: a descriptor may sit in several
// epoll sets, and this one asks only for the peer's FIN or an error,
// one-shot.
type hangups struct {
	once sync.Once
	epfd int
	err  error

	mu   sync.Mutex
	next uint64
	byID map[uint64]*watcher
}

var hangupPoller hangups

const hangupEvents = syscall.EPOLLRDHUP | syscall.EPOLLONESHOT

// add registers w's connection; false: it cannot be polled here (the
// caller watches with a read instead).
func (h *hangups) add(w *watcher, rc syscall.RawConn) bool {
	h.once.Do(func() {
		h.epfd, h.err = syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
		if h.err == nil {
			h.byID = make(map[uint64]*watcher)
			go h.loop()
		}
	})
	if h.err != nil {
		return false
	}
	h.mu.Lock()
	h.next++
	id := h.next
	h.byID[id] = w
	h.mu.Unlock()
	w.id, w.rc = id, rc
	var err error
	cerr := rc.Control(func(fd uintptr) {
		err = syscall.EpollCtl(h.epfd, syscall.EPOLL_CTL_ADD, int(fd), event(id))
	})
	if err != nil || cerr != nil {
		h.forget(id)
		w.id, w.rc = 0, nil
		return false
	}
	return true
}

// remove ends w's registration. A connection the handler already closed
// left the set with its descriptor.
func (h *hangups) remove(w *watcher) {
	_ = w.rc.Control(func(fd uintptr) {
		_ = syscall.EpollCtl(h.epfd, syscall.EPOLL_CTL_DEL, int(fd), nil)
	})
	h.forget(w.id)
}

// rearm asks for w's next event after a wake-up that was not a hangup.
func (h *hangups) rearm(w *watcher) {
	_ = w.rc.Control(func(fd uintptr) {
		_ = syscall.EpollCtl(h.epfd, syscall.EPOLL_CTL_MOD, int(fd), event(w.id))
	})
}

func (h *hangups) forget(id uint64) {
	h.mu.Lock()
	delete(h.byID, id)
	h.mu.Unlock()
}

func event(id uint64) *syscall.EpollEvent {
	return &syscall.EpollEvent{Events: hangupEvents, Fd: int32(uint32(id)), Pad: int32(uint32(id >> 32))}
}

// loop runs for the life of the process in a thread of its own, blocked in
// epoll_wait while nobody leaves.
func (h *hangups) loop() {
	var evs [64]syscall.EpollEvent
	for {
		n, err := syscall.EpollWait(h.epfd, evs[:], -1)
		if err != nil {
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			return // EBADF and the like cannot happen to a set nobody closes
		}
		for _, ev := range evs[:n] {
			id := uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
			h.mu.Lock()
			w := h.byID[id]
			h.mu.Unlock()
			if w != nil {
				w.hangup()
			}
		}
	}
}

// peerLeft tells a closed or reset peer from a wake-up with data waiting (a
// pipelined request: that client is not leaving) or none (spurious).
func peerLeft(rc syscall.RawConn) (left, spurious bool) {
	var b [1]byte
	var n int
	var err error
	if rc.Control(func(fd uintptr) {
		n, _, err = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	}) != nil {
		return false, false // closed here: the call is over
	}
	switch {
	case errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EINTR):
		return false, true
	case err != nil:
		return true, false // reset
	}
	return n == 0, false
}

// hangupsWatching is how many connections the poller watches now.
func hangupsWatching() int {
	h := &hangupPoller
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.byID)
}
