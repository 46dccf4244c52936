package proxy

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"time"
)

// Upstream protocols a Transport speaks.
const (
	UpstreamHTTP2 = "h2"    // HTTP/2: h2c in clear text, ALPN h2 over TLS (gRPC)
	UpstreamHTTP1 = "http1" // HTTP/1.1 (HTTP/2 too over TLS when the server offers it)
)

// TransportOptions configure the pooled connections to one upstream.
type TransportOptions struct {
	Protocol    string        // UpstreamHTTP2 or UpstreamHTTP1
	Addr        string        // host:port; set, a clear-text HTTP/1.1 upstream gets the direct path (h1.go)
	TLS         *tls.Config   // nil: clear text
	DialTimeout time.Duration // default 1s: an absent upstream must fail fast
	MaxIdle     int           // idle connections kept, default 64
	IdleTimeout time.Duration // default 90s
	KeepAlive   time.Duration // TCP keepalive, default 30s
}

// Transport is the pooled client side towards one upstream.
type Transport struct {
	*http.Transport
	conns  *upstreamConns
	dialer *net.Dialer
	tls    *tls.Config
	h1     *h1Pool // clear-text HTTP/1.1 upstreams: in-memory requests skip net/http's loops
}

// RoundTrip sends a request whose body is absent or replayable (GetBody
// set: the handler's small in-memory bodies) over the direct HTTP/1.1 path
// when the upstream speaks clear-text HTTP/1.1; everything else goes through
// net/http's transport.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.h1 != nil && (req.Body == nil || req.GetBody != nil) {
		return t.h1.roundTrip(req)
	}
	return t.Transport.RoundTrip(req)
}

// CloseIdleConnections closes the idle connections of both paths.
func (t *Transport) CloseIdleConnections() {
	t.Transport.CloseIdleConnections()
	if t.h1 != nil {
		t.h1.closeIdle()
	}
}

// DialH2 opens an HTTP/2 connection to addr for the frame plane: TCP, and
// TLS with ALPN h2 when the upstream speaks TLS. The connection counts for
// RTT like the transport's own.
func (t *Transport) DialH2(ctx context.Context, addr string) (net.Conn, error) {
	c, err := t.dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	c = newRawConn(c)
	if t.tls != nil {
		cfg := t.tls.Clone()
		cfg.NextProtos = []string{"h2"}
		if cfg.ServerName == "" {
			if host, _, err := net.SplitHostPort(addr); err == nil {
				cfg.ServerName = host
			}
		}
		tlsc := tls.Client(c, cfg)
		if err := tlsc.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, err
		}
		if p := tlsc.ConnectionState().NegotiatedProtocol; p != "h2" {
			tlsc.Close()
			return nil, fmt.Errorf("upstream %s negotiated %q, not h2", addr, p)
		}
		c = tlsc
	}
	return t.conns.add(c), nil
}

// NewTransport builds a Transport. It never decompresses or adds headers of
// its own: what the client sent is what the upstream gets.
func NewTransport(o TransportOptions) *Transport {
	if o.DialTimeout <= 0 {
		o.DialTimeout = time.Second
	}
	if o.MaxIdle <= 0 {
		o.MaxIdle = 64
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 90 * time.Second
	}
	if o.KeepAlive <= 0 {
		o.KeepAlive = 30 * time.Second
	}
	conns := &upstreamConns{}
	d := &net.Dialer{Timeout: o.DialTimeout, KeepAlive: o.KeepAlive}
	t := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return conns.add(newRawConn(c)), nil
		},
		TLSClientConfig:     o.TLS,
		TLSHandshakeTimeout: 5 * time.Second,
		DisableCompression:  true,
		MaxIdleConns:        o.MaxIdle,
		MaxIdleConnsPerHost: o.MaxIdle,
		IdleConnTimeout:     o.IdleTimeout,
		ReadBufferSize:      64 << 10,
		WriteBufferSize:     64 << 10,
		// The direct path's bound (h1.go), not net/http's 10 MiB: one
		// figure for what an upstream's head may cost, whichever path.
		MaxResponseHeaderBytes: maxResponseHeadBytes,
		HTTP2: &http.HTTP2Config{
			SendPingTimeout:               o.KeepAlive,
			PingTimeout:                   5 * time.Second,
			MaxReceiveBufferPerStream:     4 << 20,
			MaxReceiveBufferPerConnection: 64 << 20,
		},
	}
	p := new(http.Protocols)
	switch {
	case o.Protocol == UpstreamHTTP2 && o.TLS == nil:
		p.SetUnencryptedHTTP2(true)
	case o.Protocol == UpstreamHTTP2:
		p.SetHTTP2(true)
	case o.TLS != nil:
		p.SetHTTP1(true)
		p.SetHTTP2(true)
	default:
		p.SetHTTP1(true)
	}
	t.Protocols = p
	tr := &Transport{Transport: t, conns: conns, dialer: d, tls: o.TLS}
	if o.Protocol == UpstreamHTTP1 && o.TLS == nil && o.Addr != "" {
		tr.h1 = newH1Pool(func(ctx context.Context) (net.Conn, error) {
			c, err := d.DialContext(ctx, "tcp", o.Addr)
			if err != nil {
				return nil, err
			}
			return conns.add(newRawConn(c)), nil
		}, o.MaxIdle, o.IdleTimeout)
	}
	return tr
}

// RTT returns the kernel's RTT to the upstream, 0 when unknown.
func (t *Transport) RTT() time.Duration { return t.conns.RTT() }
