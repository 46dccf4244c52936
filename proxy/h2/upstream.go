package h2

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"runtime/debug"
	"time"

	"golang.org/x/net/http2"
)

// upConn is one upstream HTTP/2 connection of a pair. The pair's lock
// (conn.mu) guards it; its reader goroutine takes that lock per frame.
type upConn struct {
	c  *conn
	nc net.Conn
	br *bufio.Reader
	bw *bufio.Writer
	endpoint

	streams map[uint32]*stream // by upstream stream ID
	nextID  uint32
	goAway  bool // the upstream sent GOAWAY: no new streams on it
	dead    bool
	idle    *time.Timer // closes it once it carried no stream for a while
}

// maxStreamID is where a connection stops taking streams, well before the
// 31-bit ID space runs out.
const maxStreamID = 1<<31 - 1<<16

// maxUpstreamConns bounds the upstream connections taking new streams that
// one client connection opens: a client multiplexing more streams than the
// upstream's SETTINGS_MAX_CONCURRENT_STREAMS gets them spread over up to
// this many, as a pooling client would, and REFUSED_STREAM past them.
const maxUpstreamConns = 8

// upstream returns a connection with room for a new stream, the oldest (its
// HPACK table warm, the newer ones left to go idle), dialing one when none
// has room and fewer than maxUpstreamConns take streams; errUpstreamBusy
// when that many are at the upstream's limit, or when the one it dialed
// allows no stream (one dial a stream, not a burst of them). It runs with
// c.mu held: a dial holds up the pair for as long as it takes (DialTimeout
// at worst).
func (c *conn) upstream() (*upConn, error) {
	usable := 0
	for _, u := range c.ups {
		if !u.takesStreams() {
			continue // draining: not counted, as it takes no new streams
		}
		if !u.full() {
			return u, nil
		}
		usable++
	}
	if usable >= maxUpstreamConns {
		return nil, errUpstreamBusy
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.s.o.DialTimeout)
	defer cancel()
	nc, err := c.s.o.Dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("dial: %w", err)
	}
	u := &upConn{c: c, nc: nc, streams: make(map[uint32]*stream), nextID: 1}
	u.br = bufio.NewReaderSize(nc, bufSize)
	u.bw = bufio.NewWriterSize(nc, bufSize)
	u.fr = newFramer(u.bw, u.br, c.s.o.MaxHeaderListSize)
	u.enc = newEncoder()
	u.wbuf = u.bw
	u.init(int64(c.s.o.ConnWindow))
	u.bw.WriteString(http2.ClientPreface)
	u.fr.WriteSettings(
		http2.Setting{ID: http2.SettingEnablePush, Val: 0},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: c.s.o.StreamWindow},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: c.s.o.MaxHeaderListSize},
	)
	u.openWindow()
	c.s.mu.Lock()
	if c.upNCs == nil {
		c.upNCs = make(map[net.Conn]struct{})
	}
	c.upNCs[nc] = struct{}{}
	c.s.mu.Unlock()
	if err := u.awaitSettings(ctx); err != nil {
		u.dead = true
		nc.Close()
		c.dropUp(u)
		return nil, err
	}
	u.idle = time.AfterFunc(c.s.o.upstreamIdle, u.idleClose)
	c.ups = append(c.ups, u)
	go u.read()
	if u.full() {
		// Its SETTINGS allow no stream (a limit of 0): kept, as it may
		// raise the limit later, but this stream is refused.
		return nil, errUpstreamBusy
	}
	return u, nil
}

// awaitSettings sends the preface and reads the upstream's, its SETTINGS,
// before the connection takes a stream, as grpc-go's client waits for it:
// until then its SETTINGS_MAX_CONCURRENT_STREAMS is not known, and a burst
// of streams sent past it (a client opening its calls at once) is refused.
func (u *upConn) awaitSettings(ctx context.Context) error {
	u.dirty = false
	if err := u.bw.Flush(); err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	if d, ok := ctx.Deadline(); ok {
		u.nc.SetReadDeadline(d)
	}
	f, wu, err := readFrame(u.fr, u.br)
	if err != nil {
		return fmt.Errorf("reading the upstream's SETTINGS: %w", err)
	}
	if _, ok := f.(*http2.SettingsFrame); !ok || f.Header().Flags.Has(http2.FlagSettingsAck) {
		return errors.New("upstream did not begin with SETTINGS")
	}
	if err := u.process(f, wu); err != nil {
		return fmt.Errorf("upstream SETTINGS: %w", err)
	}
	u.nc.SetReadDeadline(time.Time{})
	return nil
}

// read runs the upstream connection's reader until it ends.
// process handles one frame from the upstream, c.mu held; a panic loses
// this upstream connection (its calls get UNAVAILABLE), logged with its
// stack, rather than the process.
func (u *upConn) process(f http2.Frame, wu windowUpdate) (err error) {
	defer func() {
		if r := recover(); r != nil {
			u.c.s.o.Logger.Error("h2: panic handling an upstream frame; upstream connection closed", "panic", r, "stack", string(debug.Stack()))
			err = fmt.Errorf("h2: panic handling an upstream frame: %v", r)
		}
	}()
	if f == nil {
		return u.onWindowUpdate(wu)
	}
	return u.handle(f)
}

func (u *upConn) read() {
	c := u.c
	for {
		f, wu, err := readFrame(u.fr, u.br)
		c.mu.Lock()
		if u.dead {
			c.mu.Unlock()
			return
		}
		if err == nil {
			err = u.process(f, wu)
		}
		if errors.Is(err, http2.ErrFrameTooLarge) {
			err = http2.ConnectionError(http2.ErrCodeFrameSize) // told with GOAWAY, as a client is (§4.2)
		}
		if err != nil {
			err = idleZeroIncrement(err, wu, u.nextID-1) // IDs from nextID on were never opened
			var se http2.StreamError
			if errors.As(err, &se) {
				u.streamError(se.StreamID, se.Code)
				err = nil
			} else {
				var ce http2.ConnectionError
				if errors.As(err, &ce) {
					u.fr.WriteGoAway(0, http2.ErrCode(ce), nil)
					u.dirty = true
				}
			}
		}
		if err != nil {
			c.flushAll()
			c.lost(u, err)
			c.flushAll()
			c.mu.Unlock()
			return
		}
		if u.br.Buffered() == 0 {
			c.flushAll()
		}
		c.mu.Unlock()
	}
}

func (u *upConn) handle(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.DataFrame:
		return u.onData(f)
	case *http2.MetaHeadersFrame:
		return u.onHeaders(f)
	case *http2.SettingsFrame:
		return u.settings(f, func(delta int64) bool {
			for _, st := range u.streams {
				if !st.req.adjust(delta) {
					return false
				}
			}
			return true
		})
	case *http2.PingFrame:
		if !f.IsAck() {
			u.fr.WritePing(true, f.Data)
			u.dirty = true
		}
	case *http2.RSTStreamFrame:
		if u.streams[f.StreamID] == nil && u.neverOpened(f.StreamID) {
			return http2.ConnectionError(http2.ErrCodeProtocol) // an idle stream cannot be reset (§6.4)
		}
		u.onReset(f)
	case *http2.GoAwayFrame:
		u.onGoAway(f)
	case *http2.PushPromiseFrame:
		return http2.ConnectionError(http2.ErrCodeProtocol) // we disabled push
	}
	return nil
}

func (u *upConn) onWindowUpdate(f windowUpdate) error {
	inc := int64(f.Increment)
	if f.StreamID == 0 {
		u.sendWin += inc
		if u.sendWin > maxWindow {
			return http2.ConnectionError(http2.ErrCodeFlowControl)
		}
		u.unblock()
		return nil
	}
	st := u.streams[f.StreamID]
	if st == nil && u.neverOpened(f.StreamID) {
		return http2.ConnectionError(http2.ErrCodeProtocol) // an idle stream takes no WINDOW_UPDATE (§5.1)
	}
	if st != nil && !st.req.adjust(inc) {
		return http2.StreamError{StreamID: f.StreamID, Code: http2.ErrCodeFlowControl}
	}
	return nil
}

// neverOpened reports whether a stream ID names a stream the sidecar never
// opened on this connection: an odd one from nextID on, or an even one (the
// upstream's own, which only PUSH_PROMISE could reserve, and push is off).
// A frame on such a stream but PRIORITY is a connection error (§5.1).
func (u *upConn) neverOpened(id uint32) bool {
	return id >= u.nextID || id%2 == 0
}

func (u *upConn) onHeaders(f *http2.MetaHeadersFrame) error {
	st := u.streams[f.StreamID]
	if st == nil {
		if u.neverOpened(f.StreamID) {
			return http2.ConnectionError(http2.ErrCodeProtocol) // a server opens no stream with HEADERS (§5.1.1)
		}
		return nil // reset by us meanwhile
	}
	if st.resp.ended {
		return http2.StreamError{StreamID: f.StreamID, Code: http2.ErrCodeStreamClosed}
	}
	if f.Truncated {
		// Forwarding the fields that fit would pass a cut block (a status
		// without its grpc-status) off as the upstream's answer.
		return http2.StreamError{StreamID: f.StreamID, Code: http2.ErrCodeProtocol, Cause: errors.New("response header list over MaxHeaderListSize")}
	}
	if !st.headersSent {
		status := responseStatus(f.Fields)
		if status == 0 || (status < 200 && f.StreamEnded()) {
			return http2.StreamError{StreamID: f.StreamID, Code: http2.ErrCodeProtocol, Cause: errors.New("response without a valid :status")}
		}
		if status < 200 {
			u.c.headers(st.resp.dstID, f.Fields, false) // 1xx: more headers follow
			return nil
		}
		st.headersSent = true
		st.ev.FirstByte, st.ev.Status = st.since(), status
		st.w.ResponseHeaders(f.Fields, false)
		if f.StreamEnded() {
			st.resp.ended = true
			st.ev.ResponseEnd = st.ev.FirstByte
			st.resp.trailers(f.Fields) // trailers-only
			return nil
		}
		u.c.headers(st.resp.dstID, f.Fields, false)
		return nil
	}
	if !f.StreamEnded() {
		return http2.StreamError{StreamID: f.StreamID, Code: http2.ErrCodeProtocol, Cause: errors.New("trailers without END_STREAM")}
	}
	st.w.ResponseHeaders(f.Fields, true)
	st.resp.ended = true
	st.ev.ResponseEnd = st.since()
	st.resp.trailers(f.Fields)
	return nil
}

func (u *upConn) onData(f *http2.DataFrame) error {
	id := f.StreamID
	n := int64(f.Length)
	if n > u.recvWin {
		return http2.ConnectionError(http2.ErrCodeFlowControl)
	}
	u.recvWin -= n
	st := u.streams[id]
	if st == nil || st.resp.ended {
		u.credit(n)
		if st == nil && u.neverOpened(id) {
			return http2.ConnectionError(http2.ErrCodeProtocol)
		}
		if st == nil {
			return nil // reset by us meanwhile
		}
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeStreamClosed}
	}
	h := &st.resp
	if !st.headersSent {
		u.credit(n)
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol, Cause: errors.New("response DATA before HEADERS")} // malformed (§8.1)
	}
	if n > h.recvWin {
		u.credit(n)
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeFlowControl}
	}
	h.recvWin -= n
	p := f.Data()
	h.giveBack(n - int64(len(p)))
	st.ev.ResponseBytes += int64(len(p))
	st.w.ResponseData(p)
	end := f.StreamEnded()
	if end {
		h.ended = true
		st.ev.ResponseEnd = st.since()
	}
	h.forward(p, end)
	return nil
}

func (u *upConn) onReset(f *http2.RSTStreamFrame) {
	st := u.streams[f.StreamID]
	if st == nil {
		return
	}
	if st.resp.ended {
		// The response is complete and the upstream wants no more request
		// (NO_ERROR, RFC 9113 §8.1, or any other code: a client connected
		// directly would have read the whole response before the reset):
		// the client hears the same once the response is out. Until then
		// its DATA is dropped here: no frame may follow a RST_STREAM.
		st.req.drop()
		st.refused = true
		if !st.req.ended {
			st.resetClient, st.resetCode = true, f.ErrCode
			if st.resp.closed {
				u.c.rst(st.resp.dstID, f.ErrCode)
			}
		}
		u.c.reap(st)
		return
	}
	st.ev.Reset, st.ev.ResetCode = ResetByUpstream, f.ErrCode
	u.c.rst(st.resp.dstID, f.ErrCode)
	st.kill()
}

// onGoAway stops new streams on the connection; streams the upstream never
// saw are refused to the client, which may retry them.
func (u *upConn) onGoAway(f *http2.GoAwayFrame) {
	u.goAway = true
	for id, st := range u.streams {
		if id > f.LastStreamID {
			st.ev.Unavailable = errUpstreamGone
			st.ev.Reset, st.ev.ResetCode = ResetByUpstream, http2.ErrCodeRefusedStream
			u.c.rst(st.resp.dstID, http2.ErrCodeRefusedStream)
			st.kill()
		}
	}
	u.retireIfDone()
}

// streamError resets an upstream stream the upstream broke the protocol on;
// the client gets UNAVAILABLE (gRPC) or 502.
func (u *upConn) streamError(id uint32, code http2.ErrCode) {
	u.fr.WriteRSTStream(id, code)
	u.dirty = true
	if st := u.streams[id]; st != nil {
		st.req.drop()
		st.req.closed = true
		u.c.unavailable(st, fmt.Errorf("upstream protocol error: %v", code))
		u.c.reap(st)
	}
}

// lost fails every stream of an upstream connection that broke.
func (c *conn) lost(u *upConn, err error) {
	u.dead = true
	u.nc.Close()
	for _, st := range u.streams {
		st.req.drop()
		if !st.resp.ended {
			c.unavailable(st, fmt.Errorf("connection lost: %w", err))
		} else if !st.req.ended {
			st.resetClient = true
			if st.resp.closed {
				c.rst(st.resp.dstID, http2.ErrCodeNo)
			}
		}
		c.reap(st)
	}
	u.streams = map[uint32]*stream{}
	c.dropUp(u)
}

// full reports whether the connection is at the upstream's limit; a limit
// of 0 takes no new stream (RFC 9113 §6.5.2), it is not unlimited.
func (u *upConn) full() bool {
	return uint32(len(u.streams)) >= u.maxStreams && u.open() >= u.maxStreams
}

// open counts the streams still open on the upstream's side: one whose
// request went out in full and whose response ended is closed there, and
// does not count against its limit, though its response may still wait
// here for the client's window.
func (u *upConn) open() uint32 {
	var n uint32
	for _, st := range u.streams {
		if !st.req.closed || !st.resp.ended {
			n++
		}
	}
	return n
}

// retireIfDone closes a connection that takes no new streams once its last
// stream is gone.
func (u *upConn) retireIfDone() {
	if (u.goAway || u.nextID >= maxStreamID) && len(u.streams) == 0 && !u.dead {
		u.dead = true
		u.c.flushAll()
		u.nc.Close()
		u.c.dropUp(u)
	}
}

// takesStreams reports whether the connection takes new streams, room or
// not: it is not draining.
func (u *upConn) takesStreams() bool {
	return !u.dead && !u.goAway && u.nextID < maxStreamID
}

// idleClose closes a connection that carried no stream for upstreamIdle,
// with GOAWAY(NO_ERROR), unless it is the oldest taking streams: the
// extra ones a burst over the upstream's stream limit opened would
// otherwise stay until the client leaves. The oldest goes with the client
// connection (its own IdleTimeout).
func (u *upConn) idleClose() {
	c := u.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if !u.takesStreams() || len(u.streams) > 0 {
		return
	}
	for _, x := range c.ups {
		if x == u {
			return // the oldest
		}
		if x.takesStreams() {
			break
		}
	}
	u.fr.WriteGoAway(0, http2.ErrCodeNo, nil)
	u.dirty = true
	c.flushAll()
	u.dead = true
	u.nc.Close()
	c.dropUp(u)
}

func (c *conn) dropUp(u *upConn) {
	if u.idle != nil {
		u.idle.Stop()
	}
	c.s.mu.Lock()
	delete(c.upNCs, u.nc)
	c.s.mu.Unlock()
	for i, x := range c.ups {
		if x == u {
			c.ups = append(c.ups[:i], c.ups[i+1:]...)
			return
		}
	}
}
