package h2

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"
)

// Options configure a Server.
type Options struct {
	// Dial opens a connection to the upstream, TLS (ALPN h2) included when
	// the upstream speaks it. Required.
	Dial func(ctx context.Context) (net.Conn, error)
	// Observer is told of every stream. Required.
	Observer Observer
	Logger   *slog.Logger
	// ConnRTT, if set, returns a reader of a client connection's RTT; it is
	// called once per connection and the reader once per finished stream.
	ConnRTT func(net.Conn) func() time.Duration

	// Windows advertised both ways. Defaults 4 MiB per stream and 16 MiB
	// per connection: BenchmarkForwarderWindows (docs/perf.md) measured 16
	// MiB tensors between grpc-go peers as fast as direct from there, 15 %
	// slower at 1/4 MiB and 30 % at 256 KiB/1 MiB. They bound what the
	// forwarder can be made to hold (only while the next hop's window is
	// shut): a connection's window at most.
	StreamWindow         uint32
	ConnWindow           uint32
	MaxConcurrentStreams uint32        // per client connection; default 1000
	MaxHeaderListSize    uint32        // default 1 MiB
	IdleTimeout          time.Duration // a client connection, or an extra upstream one, without streams closes after; default 2m
	PrefaceTimeout       time.Duration // for the client's preface; default 10s
	DialTimeout          time.Duration // default 1s: an absent upstream must fail fast

	// upstreamIdle closes an upstream connection without streams other
	// than the oldest; IdleTimeout unless a test sets it.
	upstreamIdle time.Duration
}

// Server forwards client HTTP/2 connections to the upstream.
type Server struct {
	o Options

	mu       sync.Mutex
	conns    map[*conn]struct{}
	draining bool
	wg       sync.WaitGroup
}

// NewServer returns a Server; o.Dial and o.Observer are required.
func NewServer(o Options) (*Server, error) {
	if o.Dial == nil || o.Observer == nil {
		return nil, errors.New("h2: Options.Dial and Options.Observer are required")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	def := func(v *uint32, d uint32) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.StreamWindow, 4<<20)
	def(&o.ConnWindow, 16<<20)
	def(&o.MaxConcurrentStreams, 1000)
	def(&o.MaxHeaderListSize, 1<<20)
	if o.StreamWindow < 65535 || o.StreamWindow > maxWindow || o.ConnWindow < 65535 || o.ConnWindow > maxWindow {
		return nil, errors.New("h2: windows must be between 65535 and 2^31-1 bytes")
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 2 * time.Minute
	}
	if o.upstreamIdle <= 0 {
		o.upstreamIdle = o.IdleTimeout
	}
	if o.PrefaceTimeout <= 0 {
		o.PrefaceTimeout = 10 * time.Second
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = time.Second
	}
	return &Server{o: o, conns: make(map[*conn]struct{})}, nil
}

// ServeConn forwards one client connection whose first bytes are the
// HTTP/2 client preface (h2c prior knowledge, or TLS with ALPN h2); it
// returns when the connection is over.
func (s *Server) ServeConn(nc net.Conn) {
	c := newConn(s, nc)
	s.mu.Lock()
	if s.draining {
		s.mu.Unlock()
		nc.Close()
		return
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		s.wg.Done()
	}()
	c.serve()
}

// Shutdown sends GOAWAY on every connection and waits until their open
// streams finished, or ctx ends; then it closes what is left.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.draining = true
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	// A connection's lock is held for as long as a write to a client that
	// stopped reading blocks (until TCP gives up, minutes): each GOAWAY goes
	// out on its own, so no such client keeps the others from draining or
	// Shutdown from closing it at ctx's end.
	var sent sync.WaitGroup
	for _, c := range conns {
		sent.Add(1)
		go func() {
			defer sent.Done()
			c.mu.Lock()
			defer c.mu.Unlock()
			c.sendGoAway()
			if len(c.streams) == 0 {
				c.closeDrained()
			} else {
				c.flushAll()
			}
		}()
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		sent.Wait()
		return nil
	case <-ctx.Done():
		s.Close()
		<-done
		sent.Wait()
		return ctx.Err()
	}
}

// Conns returns the number of client connections being served.
func (s *Server) Conns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// Close closes every connection now, upstream ones included.
func (s *Server) Close() {
	s.mu.Lock()
	s.draining = true
	for c := range s.conns {
		c.nc.Close()
		for nc := range c.upNCs {
			nc.Close()
		}
	}
	s.mu.Unlock()
}
