package h2

import (
	"bufio"
	"encoding/binary"
	"math"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// endpoint is one side of a forwarded connection pair: the client's
// connection or an upstream one. Everything in it is guarded by the pair's
// lock (conn.mu).
type endpoint struct {
	fr  *http2.Framer
	enc *encoder

	peerWindow   int32  // the peer's SETTINGS_INITIAL_WINDOW_SIZE
	peerMaxFrame uint32 // the peer's SETTINGS_MAX_FRAME_SIZE
	sendWin      int64  // connection window the peer still grants us
	recvWin      int64  // connection window we still grant the peer
	owed         int64  // connection credit not yet given back to the peer
	window       int64  // the connection window we advertise
	maxStreams   uint32 // the peer's SETTINGS_MAX_CONCURRENT_STREAMS; unlimited until it says
	dirty        bool   // the write buffer holds unflushed frames
	blocked      []*half
	wbuf         *bufio.Writer // under fr
	hdr          [9]byte       // a DATA frame header being written
}

func (e *endpoint) init(window int64) {
	e.peerWindow = 65535
	e.peerMaxFrame = 16384
	e.maxStreams = math.MaxUint32 // RFC 9113 §6.5.2: unlimited until SETTINGS say otherwise
	e.sendWin = 65535
	e.recvWin = 65535
	e.window = window
}

// writeData writes one DATA frame; the payload goes from the reader's buffer
// to the writer's buffer with no copy in between (the Framer's own
// WriteData would assemble the frame in a buffer of its own first).
func (e *endpoint) writeData(id uint32, p []byte, end bool) {
	h := &e.hdr
	n := len(p)
	h[0], h[1], h[2] = byte(n>>16), byte(n>>8), byte(n)
	h[3] = byte(http2.FrameData)
	h[4] = 0
	if end {
		h[4] = byte(http2.FlagDataEndStream)
	}
	binary.BigEndian.PutUint32(h[5:], id)
	e.wbuf.Write(h[:])
	if n > 0 {
		e.wbuf.Write(p)
	}
	e.dirty = true
}

// credit gives n bytes of connection window back to the peer, in batches of
// a quarter window so small calls do not each cost a WINDOW_UPDATE.
func (e *endpoint) credit(n int64) {
	e.owed += n
	if e.owed >= e.window/4 {
		e.fr.WriteWindowUpdate(0, uint32(e.owed))
		e.recvWin += e.owed
		e.owed = 0
		e.dirty = true
	}
}

// headers writes a header block to the peer.
func (e *endpoint) headers(id uint32, fields []hpack.HeaderField, end bool) {
	writeHeaders(e.fr, id, e.enc.block(fields), end, e.peerMaxFrame)
	e.dirty = true
}

// unblock lets every half waiting for this endpoint's connection window try
// again.
func (e *endpoint) unblock() {
	for len(e.blocked) > 0 && e.sendWin > 0 {
		h := e.blocked[0]
		e.blocked = e.blocked[1:]
		h.queued = false
		h.drain()
	}
	if len(e.blocked) == 0 {
		e.blocked = nil
	}
}

// half is one direction of a stream: from src to dst.
type half struct {
	src, dst     *endpoint
	srcID, dstID uint32
	stream       *stream

	recvWin int64 // stream window src may still use
	owed    int64 // stream credit not yet given back to src
	window  int64 // the stream window we advertise to src
	sendWin int64 // stream window dst still grants

	pending   []item // frames held for dst's windows, in order
	ended     bool   // src sent END_STREAM
	closed    bool   // END_STREAM went to dst
	queued    bool   // in dst.blocked
	heldSince time.Duration
	held      time.Duration // total time frames were held
}

// item is a frame held for flow control: DATA (a pooled copy) or trailers.
type item struct {
	buf    *[]byte
	off, n int
	fields []hpack.HeaderField
	end    bool
}

// frameBufs hold DATA payloads that must wait for a window: the only copy
// the forwarder makes, and only under back-pressure.
var frameBufs = sync.Pool{New: func() any { b := make([]byte, maxReadFrame); return &b }}

// maxReadFrame is the largest frame payload either side may send us: the
// SETTINGS_MAX_FRAME_SIZE default, which we do not raise.
const maxReadFrame = 16384

// forward sends a DATA payload from src on to dst, as much as dst's windows
// allow now; the rest is held, in order, until they grow. src gets its
// window back for what went out.
func (h *half) forward(p []byte, end bool) {
	if len(h.pending) == 0 {
		n := h.room(len(p))
		if n == len(p) {
			h.send(p, end)
			return
		}
		if n > 0 {
			h.send(p[:n], false)
			p = p[n:]
		}
	} else if last := &h.pending[len(h.pending)-1]; last.buf != nil && !last.end {
		// Small frames (streamed messages, tokens) share the last held
		// buffer: a frame-sized buffer each would let a window's worth of
		// tiny frames pin thousands of times their bytes.
		k := copy((*last.buf)[last.n:], p)
		last.n += k
		p = p[k:]
		if len(p) == 0 {
			last.end = end
			return
		}
	}
	bp := frameBufs.Get().(*[]byte)
	copy(*bp, p)
	h.hold(item{buf: bp, n: len(p), end: end})
}

// trailers sends a trailer block on, behind any held DATA.
func (h *half) trailers(fields []hpack.HeaderField) {
	if len(h.pending) == 0 {
		h.dst.headers(h.dstID, fields, true)
		h.closeAt()
		return
	}
	h.hold(item{fields: fields, end: true})
}

func (h *half) hold(it item) {
	if len(h.pending) == 0 {
		h.heldSince = h.stream.since()
	}
	h.pending = append(h.pending, it)
	h.wait()
}

// wait registers the half with dst when it is the connection window that
// stops it; a stream window's growth reaches the half directly.
func (h *half) wait() {
	if !h.queued && h.dst.sendWin <= 0 && h.sendWin > 0 {
		h.queued = true
		h.dst.blocked = append(h.dst.blocked, h)
	}
}

// room is how much of n bytes the windows let through now.
func (h *half) room(n int) int {
	w := min(h.sendWin, h.dst.sendWin)
	if w <= 0 {
		return 0 // an empty DATA frame (END_STREAM) still goes: room(0) == 0 == len
	}
	return int(min(int64(n), w))
}

// send writes DATA to dst and gives src its window back.
func (h *half) send(p []byte, end bool) {
	h.dst.writeData(h.dstID, p, end)
	n := int64(len(p))
	h.sendWin -= n
	h.dst.sendWin -= n
	h.giveBack(n)
	if end {
		h.closeAt()
	}
}

// giveBack returns n bytes of window to src, for the connection and, while
// src may still send on it, the stream.
func (h *half) giveBack(n int64) {
	if n <= 0 {
		return
	}
	h.src.credit(n)
	if h.ended {
		return
	}
	h.owed += n
	if h.owed >= h.window/4 {
		h.src.fr.WriteWindowUpdate(h.srcID, uint32(h.owed))
		h.recvWin += h.owed
		h.owed = 0
		h.src.dirty = true
	}
}

// drain sends held frames while the windows allow.
func (h *half) drain() {
	if len(h.pending) == 0 {
		return
	}
	for len(h.pending) > 0 {
		it := &h.pending[0]
		if it.fields != nil {
			h.dst.headers(h.dstID, it.fields, true)
			h.pending = h.pending[1:]
			h.closeAt()
			continue
		}
		rest := (*it.buf)[it.off:it.n]
		n := h.room(len(rest))
		if n == 0 && len(rest) > 0 {
			h.wait()
			return
		}
		last := n == len(rest)
		h.send(rest[:n], last && it.end)
		if !last {
			it.off += n
			continue
		}
		frameBufs.Put(it.buf)
		h.pending = h.pending[1:]
	}
	h.pending = nil
	h.held += h.stream.since() - h.heldSince
}

// drop discards held frames (the stream was reset) and returns their
// connection window to src.
func (h *half) drop() {
	var n int64
	for _, it := range h.pending {
		if it.buf != nil {
			n += int64(it.n - it.off)
			frameBufs.Put(it.buf)
		}
	}
	h.pending = nil
	h.closed = true
	if n > 0 {
		h.src.credit(n)
	}
}

func (h *half) closeAt() {
	h.closed = true
	h.stream.halfClosed(h, h.stream.since())
}

// stream is one client stream and the upstream stream it maps to.
type stream struct {
	c     *conn
	up    *upConn // nil until mapped
	w     Watcher
	start time.Time
	ev    Events

	req, resp half

	grpc          bool
	contentLength int64
	headersSent   bool          // response HEADERS went to the client
	refused       bool          // the request was refused, the upstream lost or done with it: its DATA is dropped
	resetClient   bool          // RST_STREAM(resetCode) goes to the client once the response is out
	resetCode     http2.ErrCode // the upstream's, after a complete response; else NO_ERROR
	done          bool          // Watcher.Done was called
}

func (s *stream) since() time.Duration { return time.Since(s.start) }

// halfClosed notes END_STREAM sent on one direction.
func (s *stream) halfClosed(h *half, now time.Duration) {
	if h == &s.req {
		s.ev.UpstreamSent = now
		s.c.reap(s)
		return
	}
	s.ev.End = now
	if s.resetClient && !s.req.ended {
		s.c.rst(s.req.srcID, s.resetCode)
		s.req.drop()
	}
	s.finish()
	s.c.reap(s)
}

// finish tells the Watcher, once.
func (s *stream) finish() {
	if s.done {
		return
	}
	s.done = true
	s.ev.Egress = s.resp.held
	if len(s.resp.pending) > 0 {
		s.ev.Egress += s.since() - s.resp.heldSince
	}
	if s.ev.End == 0 {
		s.ev.End = s.since()
	}
	if s.c.rtt != nil {
		s.ev.ClientRTT = s.c.rtt()
	}
	s.w.Done(&s.ev)
}
