package tracing

import (
	"net/http"
)

// Trace flags of W3C Trace Context (level 2).
const (
	flagSampled byte = 0x01
	flagRandom  byte = 0x02
)

// incoming is the trace context a client sent, in whichever format.
type incoming struct {
	traceID [16]byte
	spanID  [8]byte // the client's span: the sidecar span's parent
	hasSpan bool    // spanID is set (a B3 header may carry a trace id only in error)
	decided bool    // the client made a sampling decision
	sampled bool    // and this is it
	random  bool    // W3C random flag: the trace id's right 7 bytes are random
	state   string  // tracestate (W3C only)
	b3Short bool    // the context came in B3 with a 64-bit trace id
}

// Canonical header keys, looked up without canonicalising on the data path.
const (
	hdrTraceparent = "Traceparent"
	hdrTracestate  = "Tracestate"
	hdrB3          = "B3"
	hdrB3TraceID   = "X-B3-Traceid"
	hdrB3SpanID    = "X-B3-Spanid"
	hdrB3Parent    = "X-B3-Parentspanid"
	hdrB3Sampled   = "X-B3-Sampled"
	hdrB3Flags     = "X-B3-Flags"
)

// extract reads the client's trace context: a valid W3C traceparent first
// (with its tracestate), else a B3 single header, else B3 multi headers. A
// malformed header counts as absent. ok is false when no context was found;
// in may still carry a bare B3 sampling decision ("b3: 0", or
// "X-B3-Sampled: 0" without ids).
func extract(h http.Header) (in incoming, ok bool) {
	if v := h[hdrTraceparent]; len(v) == 1 {
		// More than one traceparent is invalid (W3C: treat as absent).
		if tid, sid, flags, valid := parseTraceparent(v[0]); valid {
			in = incoming{traceID: tid, spanID: sid, hasSpan: true, decided: true,
				sampled: flags&flagSampled != 0, random: flags&flagRandom != 0}
			if ts := h[hdrTracestate]; len(ts) > 0 {
				in.state = joinTracestate(ts)
			}
			return in, true
		}
	}
	if v := h[hdrB3]; len(v) > 0 {
		if b, valid := parseB3(v[0]); valid {
			return b, b.hasSpan
		}
	}
	if v := h[hdrB3TraceID]; len(v) > 0 {
		var b incoming
		var short, okT, okS bool
		b.traceID, short, okT = parseB3TraceID(v[0])
		if sv := h[hdrB3SpanID]; len(sv) > 0 {
			b.spanID, okS = parseHex8(sv[0])
		}
		if okT && okS {
			b.hasSpan, b.b3Short = true, short
			b.decided, b.sampled = b3MultiDecision(h)
			return b, true
		}
		return incoming{}, false
	}
	// B3 lets a sampling state travel without ids ("X-B3-Sampled: 0"), as a
	// bare "b3: 0" does: the sidecar starts the trace and follows it.
	var b incoming
	b.decided, b.sampled = b3MultiDecision(h)
	return b, false
}

// b3MultiDecision reads the sampling state of B3 multi headers: X-B3-Flags: 1
// (debug, which implies sampled), else X-B3-Sampled; none is no decision.
func b3MultiDecision(h http.Header) (decided, sampled bool) {
	if f := h[hdrB3Flags]; len(f) > 0 && f[0] == "1" {
		return true, true
	}
	if s := h[hdrB3Sampled]; len(s) > 0 {
		switch s[0] {
		case "1", "true":
			return true, true
		case "0", "false":
			return true, false
		}
	}
	return false, false
}

// joinTracestate combines tracestate header lines into one list, as W3C
// allows a list split over several lines.
func joinTracestate(v []string) string {
	if len(v) == 1 {
		return v[0]
	}
	n := 0
	for _, s := range v {
		n += len(s) + 1
	}
	b := make([]byte, 0, n)
	for _, s := range v {
		if s == "" {
			continue
		}
		if len(b) > 0 {
			b = append(b, ',')
		}
		b = append(b, s...)
	}
	return string(b)
}

// parseTraceparent parses a W3C traceparent: version-traceid-parentid-flags,
// lower-case hex. Version 00 is exactly 55 characters; a later version may
// append fields after a dash, which are ignored; version ff is invalid. All-zero
// ids are invalid.
func parseTraceparent(s string) (tid [16]byte, sid [8]byte, flags byte, ok bool) {
	if len(s) < 55 || s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return tid, sid, 0, false
	}
	ver, ok1 := hexByte(s[0], s[1])
	if !ok1 || ver == 0xff || (ver == 0 && len(s) != 55) || (ver != 0 && len(s) > 55 && s[55] != '-') {
		return tid, sid, 0, false
	}
	if !decodeLowerHex(tid[:], s[3:35]) || !decodeLowerHex(sid[:], s[36:52]) {
		return tid, sid, 0, false
	}
	f, ok2 := hexByte(s[53], s[54])
	if !ok2 || tid == ([16]byte{}) || sid == ([8]byte{}) {
		return tid, sid, 0, false
	}
	if ver != 0 {
		// A later version's other flag bits may mean something else:
		// W3C Trace Context says to read only the sampled bit from it.
		f &= 0x01
	}
	return tid, sid, f, true
}

// formatTraceparent writes version 00 of traceparent.
func formatTraceparent(tid [16]byte, sid [8]byte, flags byte) string {
	var b [55]byte
	b[0], b[1], b[2] = '0', '0', '-'
	encodeHex(b[3:35], tid[:])
	b[35] = '-'
	encodeHex(b[36:52], sid[:])
	b[52] = '-'
	encodeHex(b[53:55], []byte{flags})
	return string(b[:])
}

// parseB3 parses the B3 single header: {TraceId}-{SpanId}[-{SamplingState}[-{ParentSpanId}]],
// or a bare sampling state ("0", "1", "d"). TraceId is 16 or 32 hex digits.
// The result has hasSpan false for a bare sampling state.
func parseB3(s string) (in incoming, ok bool) {
	switch s {
	case "0":
		return incoming{decided: true}, true
	case "1", "d":
		return incoming{decided: true, sampled: true}, true
	}
	tidS, rest, found := cut(s)
	if !found {
		return incoming{}, false
	}
	sidS, rest, more := cut(rest)
	var okT, okS bool
	in.traceID, in.b3Short, okT = parseB3TraceID(tidS)
	in.spanID, okS = parseHex8(sidS)
	if !okT || !okS {
		return incoming{}, false
	}
	if more {
		state, parent, hasParent := cut(rest)
		switch state {
		case "1", "d":
			in.decided, in.sampled = true, true
		case "0":
			in.decided = true
		default:
			return incoming{}, false
		}
		if hasParent {
			if _, okP := parseHex8(parent); !okP {
				return incoming{}, false
			}
		}
	}
	in.hasSpan = true
	return in, true
}

// writeB3 rewrites the B3 headers the client sent, in the form it sent them,
// to the context traceparent carries, so that an upstream reading B3 also
// sees the sidecar's upstream span as its parent; a bare sampling state or a
// malformed b3 header is removed (traceparent says it all).
func writeB3(h http.Header, short bool, tid [16]byte, upstream, parent [8]byte, sampled bool) {
	_, single := h[hdrB3]
	_, multi := h[hdrB3TraceID]
	if !single && !multi {
		return
	}
	id := tid[:]
	if short && [8]byte(tid[:8]) == [8]byte{} {
		id = tid[8:]
	}
	var buf [32]byte
	idHex := string(encodeHex(buf[:2*len(id)], id))
	var sb [16]byte
	spanHex := string(encodeHex(sb[:], upstream[:]))
	parentHex := string(encodeHex(sb[:], parent[:]))
	state := "0"
	if sampled {
		state = "1"
	}
	if single {
		if b, ok := parseB3(h[hdrB3][0]); ok && b.hasSpan {
			h[hdrB3] = []string{idHex + "-" + spanHex + "-" + state + "-" + parentHex}
		} else {
			delete(h, hdrB3)
		}
	}
	if multi {
		h[hdrB3TraceID] = []string{idHex}
		h[hdrB3SpanID] = []string{spanHex}
		h[hdrB3Parent] = []string{parentHex}
		h[hdrB3Sampled] = []string{state}
		delete(h, hdrB3Flags)
	}
}

// parseB3TraceID reads a 64- or 128-bit B3 trace id; a 64-bit one is
// left-padded with zeros as B3 specifies for W3C interop.
func parseB3TraceID(s string) (tid [16]byte, short, ok bool) {
	switch len(s) {
	case 32:
		ok = decodeHex(tid[:], s)
	case 16:
		ok, short = decodeHex(tid[8:], s), true
	}
	if tid == ([16]byte{}) {
		ok = false
	}
	return tid, short, ok
}

func parseHex8(s string) (sid [8]byte, ok bool) {
	if len(s) != 16 || !decodeHex(sid[:], s) || sid == ([8]byte{}) {
		return sid, false
	}
	return sid, true
}

func cut(s string) (before, after string, found bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == '-' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

const hexDigits = "0123456789abcdef"

func encodeHex(dst, src []byte) []byte {
	for i, b := range src {
		dst[2*i], dst[2*i+1] = hexDigits[b>>4], hexDigits[b&0x0f]
	}
	return dst[:2*len(src)]
}

// decodeLowerHex decodes lower-case hex only, as W3C requires.
func decodeLowerHex(dst []byte, s string) bool {
	for i := range dst {
		hi, ok1 := lowerNibble(s[2*i])
		lo, ok2 := lowerNibble(s[2*i+1])
		if !ok1 || !ok2 {
			return false
		}
		dst[i] = hi<<4 | lo
	}
	return true
}

// decodeHex decodes hex of either case (B3 says lower-case, clients vary).
func decodeHex(dst []byte, s string) bool {
	if len(s) != 2*len(dst) {
		return false
	}
	for i := range dst {
		hi, ok1 := nibble(s[2*i])
		lo, ok2 := nibble(s[2*i+1])
		if !ok1 || !ok2 {
			return false
		}
		dst[i] = hi<<4 | lo
	}
	return true
}

func hexByte(a, b byte) (byte, bool) {
	hi, lo := lowerHex[a], lowerHex[b]
	return hi<<4 | lo, hi != 0xff && lo != 0xff
}

func lowerNibble(c byte) (byte, bool) {
	v := lowerHex[c]
	return v, v != 0xff
}

func nibble(c byte) (byte, bool) {
	if c >= 'A' && c <= 'F' {
		return c - 'A' + 10, true
	}
	return lowerNibble(c)
}

// lowerHex maps a lower-case hex digit to its value, anything else to 0xff.
var lowerHex = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xff
	}
	for i := 0; i < 10; i++ {
		t['0'+i] = byte(i)
	}
	for i := 0; i < 6; i++ {
		t['a'+i] = byte(10 + i)
	}
	return t
}()
