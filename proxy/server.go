package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/inferwatch/inferwatch/proxy/h1"
	"github.com/inferwatch/inferwatch/proxy/h2"
)

// Listener is one front: an address, what serves it, and optional TLS.
type Listener struct {
	Name    string
	Addr    string
	Handler http.Handler
	TLS     *tls.Config // nil: clear text (HTTP/1.1 and h2c)
	// Frames, if set, forwards HTTP/2 connections frame by frame (the frame
	// data plane); Handler then serves HTTP/1.1 only.
	Frames *h2.Server
	// HTTP1, if set, serves HTTP/1.x connections with the frame data plane's
	// own connection loop instead of net/http's server (see NewHTTP1Plane).
	HTTP1 *h1.Server
}

// Server runs the listeners and drains them on shutdown.
type Server struct {
	logger *slog.Logger
	ls     []Listener
	srvs   []*http.Server
	nls    []net.Listener
}

// NewServer prepares a Server; Listen binds it.
func NewServer(logger *slog.Logger, ls ...Listener) *Server {
	return &Server{logger: logger, ls: ls}
}

// Listen binds every listener, or none: an error names the address.
func (s *Server) Listen() error {
	for _, l := range s.ls {
		nl, err := net.Listen("tcp", l.Addr)
		if err != nil {
			for _, x := range s.nls {
				x.Close()
			}
			s.nls = nil
			return fmt.Errorf("listener %s: listen on %s: %w", l.Name, l.Addr, err)
		}
		s.nls = append(s.nls, nl)
	}
	for _, l := range s.ls {
		s.srvs = append(s.srvs, newHTTPServer(l, s.logger))
	}
	return nil
}

// Close releases what Listen bound, for a Server that will not Serve (a
// start that failed after Listen); Shutdown stops a serving one.
func (s *Server) Close() error {
	var errs []error
	for _, nl := range s.nls {
		errs = append(errs, nl.Close())
	}
	return errors.Join(errs...)
}

// Addrs returns the bound addresses, in listener order.
func (s *Server) Addrs() []net.Addr {
	out := make([]net.Addr, len(s.nls))
	for i, nl := range s.nls {
		out[i] = nl.Addr()
	}
	return out
}

// Serve serves every bound listener until Shutdown. It returns the first
// error other than the server closing as soon as one listener stops with
// it, while the others still serve (Shutdown stops them), so that a dead
// route is noticed; nil once every listener was shut down.
func (s *Server) Serve() error {
	errc := make(chan error, len(s.nls))
	var wg sync.WaitGroup
	for i, nl := range s.nls {
		l, srv := s.ls[i], s.srvs[i]
		switch {
		case l.Frames != nil || l.HTTP1 != nil:
			nl = newSniffListener(nl, l.TLS, l.Frames, l.HTTP1)
		case l.TLS != nil:
			nl = tls.NewListener(nl, l.TLS)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := srv.Serve(nl); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("listener %s: %w", l.Name, err)
			}
		}()
	}
	// The first error, at once; nil (the channel closed) once every
	// listener was shut down cleanly.
	go func() {
		wg.Wait()
		close(errc)
	}()
	return <-errc
}

// Client connection limits, the same on both data planes.
const (
	readHeaderTimeout = 10 * time.Second
	idleTimeout       = 2 * time.Minute
)

func newHTTPServer(l Listener, logger *slog.Logger) *http.Server {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	if l.TLS != nil {
		p.SetHTTP2(true)
	} else {
		p.SetUnencryptedHTTP2(true)
	}
	return &http.Server{
		Handler:           l.Handler,
		Protocols:         p,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		ConnContext:       withConn,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelDebug),
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams:          1000,
			MaxReceiveBufferPerStream:     1 << 20,
			MaxReceiveBufferPerConnection: 4 << 20,
			SendPingTimeout:               time.Minute,
			PingTimeout:                   15 * time.Second,
		},
	}
}

// Shutdown stops accepting and waits for in-flight calls and upgraded
// connections to finish, until ctx ends; then it closes what is left.
func (s *Server) Shutdown(ctx context.Context) error {
	var wg sync.WaitGroup
	errs := make([]error, 4*len(s.srvs))
	for i, srv := range s.srvs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := srv.Shutdown(ctx); err != nil {
				errs[i] = err
				srv.Close()
			}
		}()
		if h := s.ls[i].HTTP1; h != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[2*len(s.srvs)+i] = h.Shutdown(ctx)
			}()
		}
		if d, ok := s.ls[i].Handler.(interface{ DrainTunnels(context.Context) error }); ok {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[3*len(s.srvs)+i] = d.DrainTunnels(ctx)
			}()
		}
		if f := s.ls[i].Frames; f != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[len(s.srvs)+i] = f.Shutdown(ctx)
			}()
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}
