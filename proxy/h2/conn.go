package h2

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"runtime/debug"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// conn is one client connection and the upstream connections its streams
// were forwarded on. mu guards every field of the pair, both sides' stream
// tables, windows and write buffers; the client's reader goroutine and each
// upstream's reader take it for every frame.
type conn struct {
	s  *Server
	nc net.Conn
	br *bufio.Reader
	bw *bufio.Writer
	endpoint
	rtt func() time.Duration

	mu      sync.Mutex
	streams map[uint32]*stream // by client stream ID
	maxID   uint32             // highest client stream ID opened
	ups     []*upConn          // oldest first; those not draining take new streams
	goAway  bool               // we sent GOAWAY: no new streams
	linger  bool               // write side shut: serve returns, teardown drains
	closed  bool
	idle    *time.Timer

	// resets are the client streams the sidecar reset last, a ring: frames
	// the client sent on one before it read the RST_STREAM are ignored
	// (RFC 9113 §5.1), not answered with one more reset each.
	resets    [resetMemory]uint32
	resetNext int

	// upNCs are the sockets of ups, under s.mu rather than mu: a write to
	// an upstream that stopped reading blocks with mu held, and Close must
	// still reach that socket to end the write.
	upNCs map[net.Conn]struct{}
}

func newConn(s *Server, nc net.Conn) *conn {
	c := &conn{s: s, nc: nc, streams: make(map[uint32]*stream)}
	c.br = bufio.NewReaderSize(nc, bufSize)
	c.bw = bufio.NewWriterSize(nc, bufSize)
	c.fr = newFramer(c.bw, c.br, s.o.MaxHeaderListSize)
	c.enc = newEncoder()
	c.wbuf = c.bw
	c.init(int64(s.o.ConnWindow))
	if s.o.ConnRTT != nil {
		c.rtt = s.o.ConnRTT(nc)
	}
	return c
}

// windowUpdate is a WINDOW_UPDATE frame, read without the Framer, which
// would allocate one for each: they come with every few DATA frames.
type windowUpdate struct {
	StreamID, Increment uint32
}

// readFrame reads the next frame: a WINDOW_UPDATE as wu (f nil), any other
// through the Framer.
func readFrame(fr *http2.Framer, br *bufio.Reader) (f http2.Frame, wu windowUpdate, err error) {
	fh, err := fr.ReadFrameHeader()
	if err != nil {
		return nil, wu, err
	}
	if fh.Type == http2.FrameHeaders && fh.Flags.Has(http2.FlagHeadersPadded) {
		// The Framer calls padding longer than the payload a stream error
		// and returns before decoding the block, leaving HPACK's dynamic
		// table out of step with the peer's for every later block. RFC 9113
		// §6.2 makes it a connection error.
		b, err := br.Peek(int(fh.Length)) // at most maxReadFrame: ReadFrameHeader checked
		if err != nil {
			return nil, wu, err
		}
		prio := 0
		if fh.Flags.Has(http2.FlagHeadersPriority) {
			prio = 5
		}
		if len(b) == 0 || int(b[0]) > len(b)-1-prio {
			return nil, wu, http2.ConnectionError(http2.ErrCodeProtocol)
		}
	}
	if fh.Type != http2.FrameWindowUpdate || fh.Length != 4 {
		f, err = fr.ReadFrameForHeader(fh)
		return f, wu, err
	}
	b, err := br.Peek(4)
	if err != nil {
		return nil, wu, err
	}
	wu = windowUpdate{StreamID: fh.StreamID, Increment: binary.BigEndian.Uint32(b) & 0x7fffffff}
	br.Discard(4)
	if wu.Increment == 0 {
		if fh.StreamID == 0 {
			return nil, wu, http2.ConnectionError(http2.ErrCodeProtocol)
		}
		return nil, wu, http2.StreamError{StreamID: fh.StreamID, Code: http2.ErrCodeProtocol}
	}
	return nil, wu, nil
}

// idleZeroIncrement turns readFrame's stream error for a zero WINDOW_UPDATE
// increment into a connection error when the stream was never opened: an
// odd ID past lastID, the highest opened on the connection, or an even one
// (a stream the server opens: no push either way). An idle stream takes no
// WINDOW_UPDATE (§5.1), nor may it be reset (§6.4). Both readers use it.
func idleZeroIncrement(err error, wu windowUpdate, lastID uint32) error {
	if err == nil || wu.StreamID == 0 {
		return err // before se, which errors.As makes escape: no allocation a frame
	}
	var se http2.StreamError
	if errors.As(err, &se) && (wu.StreamID > lastID || wu.StreamID%2 == 0) {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	return err
}

// bufSize is each connection's read and write buffer: four full frames.
const bufSize = 64 << 10

func newFramer(w io.Writer, r io.Reader, maxHeaderList uint32) *http2.Framer {
	fr := http2.NewFramer(w, r)
	fr.SetReuseFrames()
	fr.SetMaxReadFrameSize(maxReadFrame)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fr.MaxHeaderListSize = maxHeaderList
	return fr
}

// process handles one frame from the client, c.mu held. A panic (a bug
// here or in the Observer's measurement) ends this connection with
// GOAWAY(INTERNAL_ERROR), logged with its stack, as net/http's server
// recovers a handler's: unrecovered, the deferred teardown waited for the
// lock the panicking code held and the connection hung, its calls with it.
func (c *conn) process(f http2.Frame, wu windowUpdate) (err error) {
	defer func() {
		if r := recover(); r != nil {
			c.s.o.Logger.Error("h2: panic handling a client frame; connection closed", "panic", r, "stack", string(debug.Stack()))
			err = http2.ConnectionError(http2.ErrCodeInternal)
		}
	}()
	if f == nil {
		return c.onWindowUpdate(wu)
	}
	return c.handle(f)
}

// serve runs the client connection until it ends.
func (c *conn) serve() {
	defer c.teardown()
	c.nc.SetReadDeadline(time.Now().Add(c.s.o.PrefaceTimeout))
	var pre [len(http2.ClientPreface)]byte
	if _, err := io.ReadFull(c.br, pre[:]); err != nil || string(pre[:]) != http2.ClientPreface {
		return
	}
	c.mu.Lock()
	c.fr.WriteSettings(
		http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: c.s.o.MaxConcurrentStreams},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: c.s.o.StreamWindow},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: c.s.o.MaxHeaderListSize},
	)
	c.openWindow()
	c.bw.Flush()
	c.idle = time.AfterFunc(c.s.o.IdleTimeout, c.idleClose)
	c.mu.Unlock()

	first := true
	for {
		f, wu, err := readFrame(c.fr, c.br)
		c.mu.Lock()
		if first && err == nil {
			first = false
			if _, ok := f.(*http2.SettingsFrame); !ok {
				err = http2.ConnectionError(http2.ErrCodeProtocol) // the preface ends with SETTINGS
			}
			if !c.linger {
				c.nc.SetReadDeadline(time.Time{})
			}
		}
		if err != nil {
			// se is declared here, not above: errors.As makes it escape,
			// which would cost an allocation on every frame read.
			var se http2.StreamError
			if errors.As(err, &se) && wu.StreamID == 0 && se.StreamID > c.maxID && se.StreamID%2 == 1 {
				// HEADERS the Framer refused (malformed fields) still opened
				// their stream, which the RST_STREAM closes: DATA the client
				// sent behind them is for a closed stream, not an idle one.
				c.maxID = se.StreamID
			}
		}
		err = idleZeroIncrement(err, wu, c.maxID)
		if !c.linger && err == nil {
			err = c.process(f, wu)
		}
		// Shut meanwhile (idle, Shutdown) or by this frame's end of the
		// last stream: teardown drains what follows.
		stop := c.linger
		if err != nil && !stop {
			stop = c.fail(err)
		}
		if c.br.Buffered() == 0 || stop {
			c.flushAll()
		}
		c.mu.Unlock()
		if stop {
			return
		}
	}
}

// openWindow raises the connection window from the protocol's 64 KiB to ours.
func (c *endpoint) openWindow() {
	if c.window > 65535 {
		c.fr.WriteWindowUpdate(0, uint32(c.window-65535))
		c.recvWin = c.window
	}
	c.dirty = true
}

// fail handles a read or protocol error on the client side; it reports
// whether the connection is over.
func (c *conn) fail(err error) bool {
	var se http2.StreamError
	if errors.As(err, &se) {
		c.streamError(se.StreamID, se.Code)
		return false
	}
	var ce http2.ConnectionError
	code := http2.ErrCodeFrameSize
	switch {
	case errors.As(err, &ce):
		code = http2.ErrCode(ce)
	case !errors.Is(err, http2.ErrFrameTooLarge):
		c.dirty = true
		return true // the connection broke: nothing to say
	}
	// The client's error: it must read why, so the GOAWAY is flushed and
	// the connection shut lingering (teardown drains).
	c.fr.WriteGoAway(c.maxID, code, nil)
	c.dirty = true
	c.flushAll()
	c.shutWrite()
	return true
}

// resetMemory is how many of the streams it reset last a connection
// remembers, to ignore the frames the client had in flight on them.
const resetMemory = 256

// rst resets a client stream and remembers that the sidecar did.
func (c *conn) rst(id uint32, code http2.ErrCode) {
	c.fr.WriteRSTStream(id, code)
	c.dirty = true
	c.resets[c.resetNext] = id
	c.resetNext = (c.resetNext + 1) % resetMemory
}

// wasReset reports whether the sidecar reset client stream id lately.
func (c *conn) wasReset(id uint32) bool {
	for _, r := range c.resets {
		if r == id {
			return true
		}
	}
	return false
}

// streamError resets a client stream for a protocol error of the client's.
func (c *conn) streamError(id uint32, code http2.ErrCode) {
	c.rst(id, code)
	if st := c.streams[id]; st != nil {
		st.ev.Reset, st.ev.ResetCode = ResetByClient, code
		st.resetUpstream(http2.ErrCodeCancel)
		st.kill()
	}
}

func (c *conn) handle(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.DataFrame:
		return c.onData(f)
	case *http2.MetaHeadersFrame:
		return c.onHeaders(f)
	case *http2.SettingsFrame:
		return c.settings(f, func(delta int64) bool {
			for _, st := range c.streams {
				if !st.resp.adjust(delta) {
					return false
				}
			}
			return true
		})
	case *http2.PingFrame:
		if !f.IsAck() {
			c.fr.WritePing(true, f.Data)
			c.dirty = true
		}
	case *http2.RSTStreamFrame:
		return c.onReset(f)
	case *http2.PriorityFrame:
		if f.StreamDep == f.StreamID {
			return http2.StreamError{StreamID: f.StreamID, Code: http2.ErrCodeProtocol}
		}
	case *http2.PushPromiseFrame:
		return http2.ConnectionError(http2.ErrCodeProtocol) // clients do not push
	}
	return nil // GOAWAY from a client needs nothing: it opens no more streams
}

func (c *conn) onHeaders(f *http2.MetaHeadersFrame) error {
	id := f.StreamID
	if id%2 == 0 {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	selfDep := f.HasPriority() && f.Priority.StreamDep == id
	if st := c.streams[id]; st != nil {
		if selfDep {
			return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol}
		}
		return c.onRequestTrailers(st, f)
	}
	if id <= c.maxID {
		if c.wasReset(id) {
			return nil // trailers sent before the client read our RST_STREAM (§5.1)
		}
		if f.StreamEnded() && len(f.PseudoFields()) == 0 {
			// Trailers on a closed stream, perhaps one reset before the
			// last resetMemory: no request reuses an ID here, so a stream
			// error is enough (§5.1), where GOAWAY failed every call.
			return http2.StreamError{StreamID: id, Code: http2.ErrCodeStreamClosed}
		}
		return http2.ConnectionError(http2.ErrCodeProtocol) // a request on a closed stream, or one below a newer (§5.1.1)
	}
	c.maxID = id
	if selfDep {
		// A stream error (RFC 9113 §5.3.1) on a stream these HEADERS
		// opened: DATA behind them is for a closed stream, not an idle one.
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol}
	}
	if c.goAway {
		c.rst(id, http2.ErrCodeRefusedStream)
		return nil
	}
	info, err := checkRequest(f.Fields)
	if err != nil && !f.Truncated { // a cut list may lack what came past the limit
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol, Cause: err}
	}
	if uint32(len(c.streams)) >= c.s.o.MaxConcurrentStreams {
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeRefusedStream}
	}
	end := f.StreamEnded()
	if end && info.contentLength > 0 && !f.Truncated {
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol, Cause: errContentLength}
	}

	st := &stream{c: c, start: time.Now(), grpc: info.grpc, contentLength: info.contentLength}
	win := int64(c.s.o.StreamWindow)
	st.req = half{src: &c.endpoint, srcID: id, stream: st, recvWin: win, window: win}
	st.resp = half{dst: &c.endpoint, dstID: id, stream: st, sendWin: int64(c.peerWindow)}
	var out []hpack.HeaderField
	st.w, out = c.s.o.Observer.Open(st.start, f.Fields)
	c.streams[id] = st
	c.idle.Stop()
	if f.Truncated {
		// Answered as net/http answers it (RFC 9113 §10.5.1): 431, for
		// gRPC RESOURCE_EXHAUSTED. REFUSED_STREAM would tell the client
		// that a retry of the same headers may succeed.
		if end {
			st.req.ended, st.ev.RequestEnd = true, st.since()
		}
		st.ev.Refused = errHeadersTooLarge
		c.answer(st, grpcResourceExhausted, 431, "inferwatch: "+errHeadersTooLarge.Error())
		return nil
	}

	up, err := c.upstream()
	if err == errUpstreamBusy {
		// Every connection the upstream would refuse it on; so do we, and
		// the client may retry.
		st.ev.Unavailable = errUpstreamBusy
		st.ev.Reset, st.ev.ResetCode = ResetByUpstream, http2.ErrCodeRefusedStream
		c.rst(id, http2.ErrCodeRefusedStream)
		st.kill()
		return nil
	}
	if err != nil {
		if end { // the answer closes the stream: no RST_STREAM after it
			st.req.ended, st.ev.RequestEnd = true, st.since()
		}
		c.unavailable(st, err)
		return nil
	}
	uid := up.nextID
	up.nextID += 2
	up.streams[uid] = st
	if len(c.ups) > 1 {
		up.idle.Stop() // only an extra connection closes when idle: no timer work a call otherwise
	}
	st.up = up
	st.req.dst, st.req.dstID, st.req.sendWin = &up.endpoint, uid, int64(up.peerWindow)
	st.resp.src, st.resp.srcID, st.resp.recvWin, st.resp.window = &up.endpoint, uid, win, win
	up.headers(uid, out, end)
	st.ev.UpstreamStart = st.since()
	if end {
		st.req.ended = true
		st.ev.RequestEnd = st.ev.UpstreamStart
		st.req.closeAt()
	}
	return nil
}

var (
	errUpstreamBusy = errors.New("upstream at its concurrent stream limit")
	errUpstreamGone = errors.New("upstream went away before the stream")

	errHeadersTooLarge = errors.New("request header list over MaxHeaderListSize")
)

func (c *conn) onRequestTrailers(st *stream, f *http2.MetaHeadersFrame) error {
	id := f.StreamID
	if st.req.ended {
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeStreamClosed}
	}
	if !f.StreamEnded() {
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol}
	}
	if err := checkTrailers(f.Fields); err != nil {
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol, Cause: err}
	}
	if st.contentLength >= 0 && st.ev.RequestBytes != st.contentLength {
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol, Cause: errContentLength}
	}
	st.req.ended = true
	st.ev.RequestEnd = st.since()
	if st.refused {
		st.req.closed = true
		c.reap(st)
		return nil
	}
	if f.Truncated {
		// Forwarding the fields that fit would pass a cut block off as
		// the client's trailers: the request is refused instead.
		st.ev.Refused = errHeadersTooLarge
		st.resetUpstream(http2.ErrCodeCancel)
		c.answer(st, grpcResourceExhausted, 431, "inferwatch: "+errHeadersTooLarge.Error())
		return nil
	}
	st.req.trailers(f.Fields)
	return nil
}

func (c *conn) onData(f *http2.DataFrame) error {
	id := f.StreamID
	n := int64(f.Length)
	if n > c.recvWin {
		return http2.ConnectionError(http2.ErrCodeFlowControl)
	}
	c.recvWin -= n
	st := c.streams[id]
	if st == nil || st.req.ended {
		c.credit(n)
		if st == nil && id > c.maxID {
			return http2.ConnectionError(http2.ErrCodeProtocol) // DATA on an idle stream
		}
		if st == nil && c.wasReset(id) {
			return nil // sent before the client read our RST_STREAM
		}
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeStreamClosed}
	}
	h := &st.req
	if n > h.recvWin {
		c.credit(n)
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeFlowControl}
	}
	h.recvWin -= n
	p := f.Data()
	h.giveBack(n - int64(len(p))) // padding is not forwarded
	st.ev.RequestBytes += int64(len(p))
	end := f.StreamEnded()
	if cl := st.contentLength; cl >= 0 && (st.ev.RequestBytes > cl || (end && st.ev.RequestBytes != cl)) {
		c.credit(int64(len(p)))
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol, Cause: errContentLength}
	}
	if end {
		h.ended = true
		st.ev.RequestEnd = st.since()
	}
	if st.refused {
		c.credit(int64(len(p)))
		if end {
			h.closed = true
			c.reap(st)
		}
		return nil
	}
	if err := st.w.RequestData(p); err != nil {
		c.credit(int64(len(p)))
		c.refuse(st, err)
		return nil
	}
	h.forward(p, end)
	return nil
}

func (c *conn) onWindowUpdate(f windowUpdate) error {
	inc := int64(f.Increment)
	if f.StreamID == 0 {
		c.sendWin += inc
		if c.sendWin > maxWindow {
			return http2.ConnectionError(http2.ErrCodeFlowControl)
		}
		c.unblock()
		return nil
	}
	st := c.streams[f.StreamID]
	if st == nil {
		if f.StreamID > c.maxID {
			return http2.ConnectionError(http2.ErrCodeProtocol)
		}
		return nil // a stream that just closed
	}
	if !st.resp.adjust(inc) {
		return http2.StreamError{StreamID: f.StreamID, Code: http2.ErrCodeFlowControl}
	}
	return nil
}

const maxWindow = 1<<31 - 1

// adjust changes the window dst grants this half by delta and sends what
// it now can; it reports false when the window overflows.
func (h *half) adjust(delta int64) bool {
	h.sendWin += delta
	if h.sendWin > maxWindow {
		return false
	}
	if delta > 0 {
		h.drain()
	}
	return true
}

func (c *conn) onReset(f *http2.RSTStreamFrame) error {
	st := c.streams[f.StreamID]
	if st == nil {
		if f.StreamID > c.maxID {
			return http2.ConnectionError(http2.ErrCodeProtocol) // RST_STREAM on an idle stream
		}
		return nil
	}
	st.ev.Reset, st.ev.ResetCode = ResetByClient, f.ErrCode
	st.resetUpstream(f.ErrCode)
	st.kill()
	return nil
}

// settings applies a peer's SETTINGS; adjust moves the stream windows the
// peer grants by the change of its initial window size.
func (e *endpoint) settings(f *http2.SettingsFrame, adjust func(delta int64) bool) error {
	if f.IsAck() {
		return nil
	}
	var delta int64
	err := f.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			return err
		}
		switch s.ID {
		case http2.SettingInitialWindowSize:
			delta += int64(s.Val) - int64(e.peerWindow)
			e.peerWindow = int32(s.Val)
		case http2.SettingMaxFrameSize:
			e.peerMaxFrame = s.Val
		case http2.SettingHeaderTableSize:
			e.enc.enc.SetMaxDynamicTableSizeLimit(s.Val)
		case http2.SettingMaxConcurrentStreams:
			e.maxStreams = s.Val
		}
		return nil
	})
	if err != nil {
		return err
	}
	e.fr.WriteSettingsAck()
	e.dirty = true
	if delta != 0 && !adjust(delta) {
		return http2.ConnectionError(http2.ErrCodeFlowControl)
	}
	return nil
}

// refuse answers a stream whose request the Watcher refused.
func (c *conn) refuse(st *stream, err error) {
	st.ev.Refused = err
	st.resetUpstream(http2.ErrCodeCancel)
	c.answer(st, grpcResourceExhausted, 413, "inferwatch: "+err.Error())
}

// unavailable answers a stream the upstream could not take or lost.
func (c *conn) unavailable(st *stream, err error) {
	st.ev.Unavailable = err
	c.answer(st, grpcUnavailable, 502, "inferwatch: upstream unavailable: "+err.Error())
}

// answer ends a stream's response with the sidecar's own status: a gRPC
// status (trailers-only before the response began, trailers after) or an
// HTTP status; an HTTP response already under way can only be reset. A
// client still sending is reset with NO_ERROR once the answer is out.
func (c *conn) answer(st *stream, grpcCode, httpStatus int, msg string) {
	st.refused = true
	st.req.drop()
	if st.resp.ended || st.resp.closed {
		return // the upstream's whole response is here already
	}
	st.resetClient = !st.req.ended
	st.resp.ended = true
	switch {
	case !st.headersSent && st.grpc:
		st.headersSent, st.ev.Status = true, 200
		st.resp.trailers(grpcStatusFields(true, grpcCode, msg))
	case !st.headersSent:
		st.headersSent, st.ev.Status = true, httpStatus
		st.resp.trailers(httpStatusFields(httpStatus))
	case st.grpc:
		st.resp.trailers(grpcStatusFields(false, grpcCode, msg))
	default:
		c.rst(st.resp.dstID, http2.ErrCodeInternal)
		st.kill()
	}
}

// reap forgets a stream once both directions are closed.
func (c *conn) reap(st *stream) {
	if !st.req.closed || !st.resp.closed {
		return
	}
	st.finish()
	if c.streams[st.req.srcID] == st {
		delete(c.streams, st.req.srcID)
	}
	if u := st.up; u != nil {
		delete(u.streams, st.req.dstID)
		u.retireIfDone()
		if len(u.streams) == 0 && !u.dead && len(c.ups) > 1 {
			u.idle.Reset(c.s.o.upstreamIdle)
		}
	}
	if len(c.streams) == 0 {
		if c.goAway {
			c.closeDrained()
		} else if c.idle != nil {
			c.idle.Reset(c.s.o.IdleTimeout)
		}
	}
}

// idleClose ends a connection that carried no stream for IdleTimeout.
func (c *conn) idleClose() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.streams) > 0 || c.closed {
		return
	}
	c.sendGoAway()
	c.closeDrained()
}

// lingerTimeout bounds how long a connection that has said its last
// waits for its client to close it.
const lingerTimeout = time.Second

// closeDrained ends a connection that has sent GOAWAY and has no stream
// left, lingering (shutWrite): the serve loop returns at its next frame or
// deadline, and teardown reads what the client still sends.
func (c *conn) closeDrained() {
	c.flushAll()
	if c.linger || !c.shutWrite() {
		c.nc.Close()
	}
}

// shutWrite starts a lingering close, as nginx and net/http do: closing a
// socket that holds unread bytes (a WINDOW_UPDATE or PING the client sent
// meanwhile) makes the kernel reset it and drop what it had still to send,
// the tail of the last responses or a GOAWAY's reason. So the write side
// is shut instead, a FIN after the last byte flushed, later writes are
// dropped, and teardown discards what is read until the client closes or
// lingerTimeout passes. It reports false where the connection cannot shut
// its write side.
func (c *conn) shutWrite() bool {
	cw, ok := c.nc.(interface{ CloseWrite() error })
	if !ok {
		return false
	}
	c.linger = true
	c.bw.Reset(io.Discard)
	if cw.CloseWrite() != nil {
		return false
	}
	c.nc.SetReadDeadline(time.Now().Add(lingerTimeout))
	return true
}

// sendGoAway tells the client no stream after the last it opened will be
// served; the open ones finish.
func (c *conn) sendGoAway() {
	if c.goAway {
		return
	}
	c.goAway = true
	c.fr.WriteGoAway(c.maxID, http2.ErrCodeNo, nil)
	c.dirty = true
}

// flushAll flushes every write buffer of the pair that holds frames.
func (c *conn) flushAll() {
	if c.dirty {
		c.dirty = false
		if err := c.bw.Flush(); err != nil {
			c.nc.Close()
		}
	}
	for _, u := range c.ups {
		if u.dirty {
			u.dirty = false
			if err := u.bw.Flush(); err != nil {
				u.nc.Close()
			}
		}
	}
}

// teardown ends the pair when the client connection is gone, broke the
// protocol or was shut: every open stream is reset upstream and told to its
// Watcher. A shut connection (drained, idle, or after a GOAWAY for the
// client's error) lingers before it closes.
func (c *conn) teardown() {
	c.mu.Lock()
	c.closed = true
	if c.idle != nil {
		c.idle.Stop()
	}
	for _, st := range c.streams {
		if !st.done {
			st.ev.Reset, st.ev.ResetCode = ResetByClient, http2.ErrCodeCancel
		}
		st.resetUpstream(http2.ErrCodeCancel)
		st.kill()
	}
	c.flushAll()
	for _, u := range c.ups {
		u.dead = true
		u.idle.Stop()
		u.nc.Close()
	}
	c.ups = nil
	linger := c.linger
	c.mu.Unlock()
	if linger {
		io.Copy(io.Discard, c.nc) // until the client closes or the deadline
	}
	c.nc.Close()
}

// resetUpstream resets the upstream side of a stream that is still open there.
func (st *stream) resetUpstream(code http2.ErrCode) {
	u := st.up
	if u == nil || u.dead || (st.req.closed && st.resp.ended) {
		return
	}
	u.fr.WriteRSTStream(st.req.dstID, code)
	u.dirty = true
}

// kill ends a reset stream: held frames dropped, Watcher told, forgotten.
func (st *stream) kill() {
	st.req.drop()
	st.resp.drop()
	st.c.reap(st)
}
