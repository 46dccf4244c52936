package proxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inferwatch/inferwatch/record"
	"golang.org/x/net/http/httpguts"
)

// upgradeType returns the protocols an HTTP/1.x request asks to switch to
// (Connection: upgrade, Upgrade: websocket), "" when none. h2c is never
// forwarded: the listener speaks HTTP/2 itself, by prior knowledge, and a
// client that offered h2c gets HTTP/1.1, as the mechanism allows.
func upgradeType(r *http.Request) string {
	if r.ProtoMajor != 1 {
		return ""
	}
	return offeredUpgrade(r.Header)
}

func offeredUpgrade(h http.Header) string {
	if !httpguts.HeaderValuesContainsToken(h["Connection"], "upgrade") {
		return ""
	}
	var keep []string
	for _, v := range h["Upgrade"] {
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p != "" && !strings.EqualFold(p, "h2c") {
				keep = append(keep, p)
			}
		}
	}
	return strings.Join(keep, ", ")
}

// setUpgrade puts back the two hop-by-hop headers an upgrade travels on,
// after removeHopHeaders took them off.
func setUpgrade(h http.Header, protocols string) {
	h["Connection"] = []string{"Upgrade"}
	h["Upgrade"] = []string{protocols}
}

// tunnelLinger is how long the other direction of a tunnel may go on once
// one side finished cleanly (its half-close forwarded) before both close.
const tunnelLinger = 10 * time.Second

// tunnel serves a 101 Switching Protocols answer to an upgrade request
// that offered protocols: the 101 goes to the client over its hijacked
// connection and bytes are relayed both ways, untouched, until both sides
// are done. The record is the handshake's: its End is when the 101 went
// out, so a session of an hour is not an hour's latency; its byte counts
// include what the session carried.
func (h *Handler) tunnel(w http.ResponseWriter, cl *call, res *http.Response, offered string) {
	c := cl.rec
	back, ok := res.Body.(io.ReadWriteCloser)
	chosen := strings.TrimSpace(res.Header.Get("Upgrade"))
	switch {
	case offered == "" || chosen == "" || !tokenListHas(offered, chosen):
		h.refuseSwitch(w, cl, res, fmt.Sprintf("switched to %q, offered %q", chosen, offered))
		return
	case !ok:
		h.refuseSwitch(w, cl, res, "the upgraded connection is not writable")
		return
	}
	client, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		h.refuseSwitch(w, cl, res, "client connection cannot switch: "+err.Error())
		return
	}
	t := h.tunnels.add(client, back)
	defer h.tunnels.remove(t)
	defer client.Close()
	defer back.Close()
	client.SetDeadline(time.Time{})

	removeHopHeaders(res.Header)
	setUpgrade(res.Header, chosen)
	c.Code, c.Stream = "101", true
	// Taken before the write the client waits for: the call ends as its
	// answer goes out.
	c.ResponseEnd = time.Since(c.Start)
	c.End = c.ResponseEnd
	brw.WriteString("HTTP/1.1 101 Switching Protocols\r\n")
	res.Header.Write(brw)
	brw.WriteString("\r\n")
	if err := brw.Flush(); err != nil {
		c.ErrorKind, c.Code = record.ErrClientCancel, statusForCancel(false)
		return
	}

	// What the client sent after its request head sits in brw's reader.
	up, down, err := relayBoth(client, brw.Reader, back)
	cl.tunnelUp = up
	c.ResponseBytes += down
	if err != nil && !t.closedByUs() {
		h.o.Logger.Debug("upgraded connection broke", "route", h.o.Route, "err", err)
	}
}

// refuseSwitch answers 502 to a 101 that cannot be relayed (a protocol the
// client did not offer, a connection that cannot be taken over).
func (h *Handler) refuseSwitch(w http.ResponseWriter, cl *call, res *http.Response, why string) {
	res.Body.Close()
	h.o.Logger.Debug("upgrade refused", "route", h.o.Route, "why", why)
	cl.rec.ErrorKind = record.ErrUpstreamUnavailable
	cl.rec.Code = "502"
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusBadGateway)
	io.WriteString(w, "inferwatch: upstream "+h.o.Upstream+": protocol switch not relayed: "+why+"\n")
}

// relayBoth copies client→back (reading clientR, which holds what the
// client sent early) and back→client. A side that ends cleanly has its
// end forwarded as a half-close where the other connection allows one, and
// the other direction gets tunnelLinger to finish; an error, or a side
// that cannot be half-closed, ends both. It returns the bytes each way and
// the first error that was not an end of stream or of our closing.
func relayBoth(client net.Conn, clientR io.Reader, back io.ReadWriteCloser) (up, down int64, err error) {
	type result struct {
		toBack bool
		n      int64
		err    error
	}
	var shut atomic.Bool
	closeBoth := func() {
		shut.Store(true)
		client.Close()
		back.Close()
	}
	done := make(chan result, 2)
	go func() {
		n, err := io.Copy(back, clientR)
		done <- result{true, n, err}
	}()
	go func() {
		n, err := io.Copy(client, back)
		done <- result{false, n, err}
	}()
	for i := range 2 {
		r := <-done
		if r.toBack {
			up = r.n
		} else {
			down = r.n
		}
		if r.err != nil && err == nil && (i == 0 || !shut.Load()) {
			err = r.err
		}
		if i == 1 {
			break
		}
		var dst any = client
		if r.toBack {
			dst = back
		}
		if r.err != nil || !closeWrite(dst) {
			closeBoth()
			continue
		}
		timer := time.AfterFunc(tunnelLinger, closeBoth)
		defer timer.Stop()
	}
	return up, down, err
}

// closeWrite half-closes w's connection (a FIN after what was written),
// reporting whether it could.
func closeWrite(w any) bool {
	for {
		if cw, ok := w.(interface{ CloseWrite() error }); ok {
			return cw.CloseWrite() == nil
		}
		switch x := w.(type) {
		case *sniffedConn:
			w = x.Conn
		case *closeNotifyConn:
			w = x.Conn
		default:
			return false
		}
	}
}

// tunnelSet holds the open tunnels, so that a drain waits for them and
// then ends them (net/http's Shutdown forgets hijacked connections).
type tunnelSet struct {
	mu     sync.Mutex
	open   map[*openTunnel]struct{}
	cutAll bool // the drain's time is up: no tunnel may stay open
	gone   chan struct{}
}

type openTunnel struct {
	client net.Conn
	back   io.Closer
	cut    atomic.Bool // closed by the drain
}

func (t *openTunnel) cutOff() {
	t.cut.Store(true)
	t.client.Close()
	t.back.Close()
}

func (t *openTunnel) closedByUs() bool { return t.cut.Load() }

func (s *tunnelSet) add(client net.Conn, back io.Closer) *openTunnel {
	t := &openTunnel{client: client, back: back}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cutAll {
		t.cutOff()
		return t
	}
	if s.open == nil {
		s.open = make(map[*openTunnel]struct{})
	}
	s.open[t] = struct{}{}
	return t
}

func (s *tunnelSet) remove(t *openTunnel) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.open, t)
	if s.gone != nil {
		select {
		case s.gone <- struct{}{}:
		default:
		}
	}
}

// DrainTunnels waits for the upgraded connections (WebSocket sessions) to
// end until ctx ends, then closes those left, and any switched later, and
// returns ctx's error.
func (h *Handler) DrainTunnels(ctx context.Context) error {
	s := &h.tunnels
	s.mu.Lock()
	if s.gone == nil {
		s.gone = make(chan struct{}, 1)
	}
	s.mu.Unlock()
	for {
		s.mu.Lock()
		n := len(s.open)
		s.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-s.gone:
		case <-ctx.Done():
			s.mu.Lock()
			s.cutAll = true
			for t := range s.open {
				t.cutOff()
			}
			s.mu.Unlock()
			return fmt.Errorf("upgraded connections still open: %w", ctx.Err())
		}
	}
}
