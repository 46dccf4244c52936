package proxy

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// The kernel keeps a smoothed RTT for every TCP connection (TCP_INFO on
// Linux). Reading it costs a syscall, so each connection is read at most once
// per rttRefresh and calls in between reuse the last reading.
const rttRefresh = time.Second

var epoch = time.Now()

// rttConn remembers a connection and its last RTT reading.
type rttConn struct {
	conn net.Conn
	at   atomic.Int64 // monotonic ns since epoch of the last reading, 0 never
	rtt  atomic.Int64
}

func (t *rttConn) sample() time.Duration {
	now := int64(time.Since(epoch))
	last := t.at.Load()
	if last != 0 && now-last < int64(rttRefresh) {
		return time.Duration(t.rtt.Load())
	}
	if t.at.CompareAndSwap(last, now) {
		if d, ok := readRTT(t.conn); ok {
			t.rtt.Store(int64(d))
		}
	}
	return time.Duration(t.rtt.Load())
}

type connKey struct{}

// withConn is an http.Server ConnContext hook: it lets a call find the client
// connection it arrived on.
func withConn(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, &rttConn{conn: c})
}

// clientRTT returns the kernel RTT of the call's client connection, 0 if unknown.
func clientRTT(ctx context.Context) time.Duration {
	if t, ok := ctx.Value(connKey{}).(*rttConn); ok {
		return t.sample()
	}
	return 0
}

// netConn unwraps TLS and the listener's sniffing wrapper to reach the TCP
// connection.
func netConn(c net.Conn) net.Conn {
	for {
		switch x := c.(type) {
		case *tls.Conn:
			c = x.NetConn()
		case *sniffedConn:
			c = x.Conn
		case *closeNotifyConn:
			c = x.Conn
		default:
			return c
		}
	}
}

// ConnRTT returns a reader of a connection's kernel RTT, read at most once a
// second: the frame plane's h2.Options.ConnRTT.
func ConnRTT(c net.Conn) func() time.Duration {
	t := &rttConn{conn: c}
	return t.sample
}

// upstreamConns tracks the live connections a transport dialed, so the RTT to
// the upstream can be read. Upstream HTTP/2 multiplexes calls over one or a few
// connections, so the most recently dialed live one stands for all.
type upstreamConns struct {
	mu    sync.Mutex
	conns []*rttConn
}

func (u *upstreamConns) add(c net.Conn) net.Conn {
	t := &rttConn{conn: c}
	u.mu.Lock()
	u.conns = append(u.conns, t)
	u.mu.Unlock()
	return &closeNotifyConn{Conn: c, onClose: func() { u.remove(t) }}
}

func (u *upstreamConns) remove(t *rttConn) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for i, x := range u.conns {
		if x == t {
			u.conns = append(u.conns[:i], u.conns[i+1:]...)
			return
		}
	}
}

// RTT returns the kernel RTT of the newest live upstream connection.
func (u *upstreamConns) RTT() time.Duration {
	u.mu.Lock()
	var t *rttConn
	if n := len(u.conns); n > 0 {
		t = u.conns[n-1]
	}
	u.mu.Unlock()
	if t == nil {
		return 0
	}
	return t.sample()
}

type closeNotifyConn struct {
	net.Conn
	once    sync.Once
	onClose func()
}

func (c *closeNotifyConn) Close() error {
	c.once.Do(c.onClose)
	return c.Conn.Close()
}
