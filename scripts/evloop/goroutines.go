//go:build linux

package main

import (
	"fmt"
	"net"
	"sync"
)

// runGoroutines forwards the same traffic the way Go code usually does: a
// goroutine per client connection, blocking reads and writes on net.Conn
// (Go's netpoller parks and wakes the goroutine), a mutex-guarded pool of
// upstream connections. Beside the loop it separates what the goroutine
// model costs from what the sidecar's own code costs.
func runGoroutines(listen, upstream string) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", listen, err)
	}
	p := &pool{addr: upstream}
	for {
		c, err := ln.Accept()
		if err != nil {
			return fmt.Errorf("accept: %w", err)
		}
		go p.serve(c)
	}
}

type pool struct {
	addr string
	mu   sync.Mutex
	idle []*gconn
}

// gconn is a connection and the bytes read from it not yet forwarded.
type gconn struct {
	nc  net.Conn
	buf []byte
}

func (p *pool) get() (*gconn, error) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		u := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return u, nil
	}
	p.mu.Unlock()
	nc, err := net.Dial("tcp", p.addr)
	if err != nil {
		return nil, err
	}
	return &gconn{nc: nc, buf: make([]byte, 0, 16<<10)}, nil
}

func (p *pool) put(u *gconn) {
	p.mu.Lock()
	p.idle = append(p.idle, u)
	p.mu.Unlock()
}

func (p *pool) serve(nc net.Conn) {
	defer nc.Close()
	c := &gconn{nc: nc, buf: make([]byte, 0, 16<<10)}
	for {
		n, err := c.message(true)
		if err != nil {
			return
		}
		u, err := p.get()
		if err != nil {
			return
		}
		if _, err := u.nc.Write(c.buf[:n]); err != nil {
			u.nc.Close()
			return
		}
		c.buf = c.buf[:copy(c.buf, c.buf[n:])]
		m, err := u.message(false)
		if err != nil {
			u.nc.Close()
			return
		}
		_, werr := nc.Write(u.buf[:m])
		u.buf = u.buf[:copy(u.buf, u.buf[m:])]
		if len(u.buf) == 0 {
			p.put(u)
		} else {
			u.nc.Close()
		}
		if werr != nil {
			return
		}
	}
}

// message reads until buf holds a whole message and returns its length.
func (c *gconn) message(request bool) (int, error) {
	for {
		n, ok, err := frame(c.buf, request)
		if err != nil {
			return 0, err
		}
		if ok {
			return n, nil
		}
		if len(c.buf) == cap(c.buf) {
			if cap(c.buf) >= maxMsg {
				return 0, errFraming
			}
			c.buf = append(c.buf, make([]byte, cap(c.buf))...)[:len(c.buf)]
		}
		r, err := c.nc.Read(c.buf[len(c.buf):cap(c.buf)])
		c.buf = c.buf[:len(c.buf)+r]
		if r == 0 && err != nil {
			return 0, err
		}
	}
}
