package h1

import (
	"errors"
	"net"
	"sync"
	"syscall"
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

// watcher detects a client leaving during a call, but only for a call that
// has run WatchAfter and whose body has ended (the connection is idle then).
// A short call never starts one. A clear-text TCP connection is watched by
// the hangup poller (hangup_linux.go); anything else (TLS, whose peer says
// goodbye in a record first; another OS) by a one-byte read of the idle
// connection, as net/http's background read does.
type watcher struct {
	c      *conn
	cancel func(error)
	timer  *time.Timer

	// Set by the hangup poller when it took the watch.
	id uint64
	rc syscall.RawConn

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
	w.timer = time.AfterFunc(d, w.fire)
	return w
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

// maybeStart starts the read once the call is long enough and the
// connection idle. Bytes already buffered are a pipelined request: a client
// that sent one is not leaving, and there is nothing to watch.
func (w *watcher) maybeStart() {
	if !w.fired || !w.bodyDone || w.started || w.stopped || w.c.br.Buffered() > 0 || w.c.cr.hasByte {
		return
	}
	if b, ok := w.c.nc.(interface{ Buffered() int }); ok && b.Buffered() > 0 {
		return // a wrapper below holds bytes of the next request
	}
	w.started = true
	if w.c.rc != nil && hangupPoller.add(w, w.c.rc) {
		return
	}
	w.readEnded = make(chan struct{})
	go w.read()
}

// hangup is the poller's news of the peer closing, resetting, or (one-shot
// wake-ups being what they are) sending more.
func (w *watcher) hangup() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped || w.gone {
		return
	}
	left, spurious := peerLeft(w.rc)
	switch {
	case spurious:
		hangupPoller.rearm(w)
	case left:
		w.gone = true
		w.cancel(ErrClientGone)
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
	w.timer.Stop()
	w.mu.Lock()
	w.stopped = true
	if w.rc != nil {
		hangupPoller.remove(w)
		gone := w.gone
		w.mu.Unlock()
		return gone
	}
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
