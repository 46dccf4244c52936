package h1

import (
	"errors"
	"net"
	"sync"
	"time"
)

// ErrClientGone is the cause a request's context is cancelled with when its
// client closed the connection during the call.
var ErrClientGone = errors.New("h1: client closed the connection")

// connReader sits under the connection's bufio.Reader: it hands over the
// byte a watch read, if one did, before reading the connection again.
type connReader struct {
	nc      net.Conn
	hasByte bool
	b       [1]byte
}

func (r *connReader) Read(p []byte) (int, error) {
	if r.hasByte && len(p) > 0 {
		p[0] = r.b[0]
		r.hasByte = false
		return 1, nil
	}
	return r.nc.Read(p)
}

// watcher detects a client leaving during a call, once its body has ended
// (the connection is idle then). On a clear-text TCP connection the hangup
// poller (hangup_linux.go) does it for every call at no cost per call.
// Anything else (TLS, whose peer says goodbye in a record first; another
// OS) is watched by a one-byte read of the idle connection, as net/http's
// background read does, and only for a call that has run WatchAfter: a
// short call never starts one.
type watcher struct {
	c      *conn
	cancel func(error)
	timer  *time.Timer // nil: polled
	polled bool

	// Polled: when the call began, and the check deferred until it has run
	// WatchAfter (a short call is never taken for a leaving client).
	start   time.Time
	recheck *time.Timer

	mu        sync.Mutex
	bodyDone  bool
	fired     bool
	started   bool
	stopped   bool
	aborted   bool          // the read was interrupted on purpose
	gone      bool          // the client closed or reset the connection
	readEnded chan struct{} // closed when the read returns
}

// watchAfter arms a watch of c for the current call; b is its body, nil
// when it has none.
func (c *conn) watchAfter(d time.Duration, b *body, cancel func(error)) *watcher {
	w := &watcher{c: c, cancel: cancel}
	if b == nil {
		w.bodyDone = true
	} else {
		b.mu.Lock()
		b.watch = w
		w.bodyDone = b.done
		b.mu.Unlock()
	}
	if c.pollID != 0 || (c.rc != nil && !c.pollFailed && c.register()) {
		w.polled, w.fired, w.start = true, true, time.Now()
		w.mu.Lock()
		w.maybeStart()
		w.mu.Unlock()
		return w
	}
	w.timer = time.AfterFunc(d, w.fire)
	return w
}

// register joins c to the hangup poller for its life, on its first call.
func (c *conn) register() bool {
	if !hangupPoller.register(c) {
		c.pollFailed = true
		return false
	}
	return true
}

func (w *watcher) fire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.fired = true
	w.maybeStart()
}

func (w *watcher) bodyEnded() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.bodyDone = true
	w.maybeStart()
}

// maybeStart starts the watch once the connection is idle (and, for the
// read, the call long enough). Bytes already buffered are a pipelined
// request: a client that sent one is not leaving, and there is nothing to
// watch.
func (w *watcher) maybeStart() {
	if !w.fired || !w.bodyDone || w.started || w.stopped || w.c.br.Buffered() > 0 || w.c.cr.hasByte {
		return
	}
	if b, ok := w.c.nc.(interface{ Buffered() int }); ok && b.Buffered() > 0 {
		return // a wrapper below holds bytes of the next request
	}
	w.started = true
	if w.polled {
		w.c.watchPolled(w)
		return
	}
	w.readEnded = make(chan struct{})
	go w.read()
}

// watchPolled makes w the call the poller's news is for. A hangup seen
// before (between calls, or during the body) is checked now: with
// edge-triggered events it will not be told again.
func (c *conn) watchPolled(w *watcher) {
	c.hmu.Lock()
	c.hwatch = w
	seen := c.hseen
	c.hmu.Unlock()
	if seen {
		c.peerHungUp()
	}
}

// peerHungUp is the poller's news of the peer closing or resetting the
// connection. It cancels the watched call if the peer left; data waiting
// is a pipelined request, and that client is not leaving.
func (c *conn) peerHungUp() {
	c.hmu.Lock()
	defer c.hmu.Unlock()
	c.hseen = true
	w := c.hwatch
	if w == nil || w.gone {
		return // told the next watched call
	}
	if wait := c.srv.watchAfter() - time.Since(w.start); wait > 0 {
		if w.recheck == nil {
			w.recheck = time.AfterFunc(wait, c.peerHungUp)
		}
		return
	}
	left, nothing := peerLeft(c.rc)
	switch {
	case left:
		w.gone = true
		w.cancel(ErrClientGone)
	case nothing:
		c.hseen = false
	}
}

func (w *watcher) read() {
	defer close(w.readEnded)
	n, err := w.c.nc.Read(w.c.cr.b[:])
	w.mu.Lock()
	defer w.mu.Unlock()
	if n == 1 {
		w.c.cr.hasByte = true
	}
	if err != nil && !w.aborted {
		w.gone = true
		w.cancel(ErrClientGone)
	}
}

// stop ends the watch when the call is over and reports whether the client
// left during it (the connection must close then).
func (w *watcher) stop() (gone bool) {
	if w.polled {
		c := w.c
		w.mu.Lock()
		w.stopped = true
		w.mu.Unlock()
		c.hmu.Lock()
		defer c.hmu.Unlock()
		if c.hwatch == w {
			c.hwatch = nil
		}
		if w.recheck != nil {
			w.recheck.Stop()
		}
		return w.gone
	}
	w.timer.Stop()
	w.mu.Lock()
	w.stopped = true
	started := w.started
	if started {
		w.aborted = true
		w.c.nc.SetReadDeadline(aLongTimeAgo)
	}
	w.mu.Unlock()
	if !started {
		return false
	}
	<-w.readEnded
	w.c.nc.SetReadDeadline(time.Time{})
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gone
}

var aLongTimeAgo = time.Unix(1, 0)
