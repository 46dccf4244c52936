// Package callcap holds what the in-process and ext_proc fronts share about
// a call's payload: a byte budget every capture of one front draws from,
// bounded body prefixes (HTTP) and sampled whole messages (gRPC) taken out
// of it, and the deferred decodes that price them on the pipeline goroutine
// with the inferapi decoders. The proxy keeps its own copy of this logic in
// proxy/ (owned by the data plane); the semantics are the same: a capture
// holds budget from the moment it is taken until its decode ran or its
// record was dropped.
package callcap

import (
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/inferwatch/inferwatch/inferapi"
	"github.com/inferwatch/inferwatch/proto/inference"
	"github.com/inferwatch/inferwatch/record"
)

// DefaultBudget is the budget when none is configured (64 MiB), as for the proxy.
const DefaultBudget = 64 << 20

// Budget is the number of captured bytes all calls of one front may hold
// at once while they wait for their decode.
type Budget struct{ left atomic.Int64 }

// NewBudget returns a budget of n bytes; n <= 0 means DefaultBudget.
func NewBudget(n int64) *Budget {
	if n <= 0 {
		n = DefaultBudget
	}
	b := &Budget{}
	b.left.Store(n)
	return b
}

// Left is the number of bytes not held by any capture.
func (b *Budget) Left() int64 { return b.left.Load() }

// take reserves n bytes, or reports that the budget has not got them.
func (b *Budget) take(n int64) bool {
	if b.left.Add(-n) < 0 {
		b.left.Add(n)
		return false
	}
	return true
}

func (b *Budget) give(n int64) { b.left.Add(n) }

// Prefix keeps the first Max bytes of a body for a bounded decode, out of a
// Budget. The zero value with a nil Budget keeps nothing.
type Prefix struct {
	Buf       []byte
	Truncated bool // the body went on past what Buf holds
	max       int
	budget    *Budget
}

// NewPrefix returns a prefix capture of at most max bytes drawn from b.
func NewPrefix(max int, b *Budget) *Prefix { return &Prefix{max: max, budget: b} }

// Write appends what fits of p.
func (c *Prefix) Write(p []byte) {
	if c == nil || len(p) == 0 {
		return
	}
	room := c.max - len(c.Buf)
	if room <= 0 {
		c.Truncated = true
		return
	}
	if len(p) > room {
		p = p[:room]
		c.Truncated = true
	}
	if c.budget == nil || !c.budget.take(int64(len(p))) {
		c.Truncated = true // the decode sees what it got
		c.max = len(c.Buf) // and takes nothing more
		return
	}
	c.Buf = append(c.Buf, p...)
}

// Release gives the captured bytes back to the budget; a second call gives nothing.
func (c *Prefix) Release() {
	if c == nil {
		return
	}
	if c.budget != nil {
		c.budget.give(int64(len(c.Buf)))
	}
	c.Buf = nil
}

// Reservation is the budget a sampled gRPC message holds from the moment its
// length prefix is read until its decode ran or its record was dropped.
type Reservation struct {
	budget *Budget
	held   int64
}

// NewReservation returns an empty reservation on b.
func NewReservation(b *Budget) *Reservation { return &Reservation{budget: b} }

// Take reserves n bytes (inferapi.GRPCScanner.Capture's reserve function).
func (r *Reservation) Take(n int64) bool {
	if !r.budget.take(n) {
		return false
	}
	r.held += n
	return true
}

// Release gives the reserved bytes back; a second call gives nothing.
func (r *Reservation) Release() {
	if r == nil || r.held == 0 {
		return
	}
	r.budget.give(r.held)
	r.held = 0
}

// Sampler picks every n-th infer call for a full decode of its first
// gRPC message.
type Sampler struct {
	every uint64
	n     atomic.Uint64
}

// NewSampler returns a sampler for share (0..1) of the calls; 0 never samples.
func NewSampler(share float64) *Sampler {
	s := &Sampler{}
	if share > 0 {
		s.every = max(uint64(1/share+0.5), 1)
	}
	return s
}

// Sample reports whether this call is one of the share.
func (s *Sampler) Sample() bool {
	return s.every != 0 && s.n.Add(1)%s.every == 0
}

// GRPCDecode returns the deferred full decode of a captured ModelInferRequest
// body (DecodeGRPC).
func GRPCDecode(msg []byte, res *Reservation) func(*record.Call) {
	return func(c *record.Call) {
		defer res.Release()
		DecodeGRPC(c, msg)
	}
}

// DecodeGRPC unmarshals a captured ModelInferRequest message into the
// generated type; its time is the call's decode phase. Every front that
// samples gRPC messages decodes them here.
func DecodeGRPC(c *record.Call, msg []byte) {
	var m inference.ModelInferRequest
	s := time.Now()
	err := proto.Unmarshal(msg, &m)
	c.Decode, c.DecodeRan = time.Since(s), true
	if err != nil {
		c.DecodeFail = true
	}
}

// HTTPDecode returns the deferred decode of captured HTTP bodies (DecodeHTTP).
func HTTPDecode(rt inferapi.Route, reqHdr http.Header, req *Prefix, respHdr http.Header, resp *Prefix, full bool) func(*record.Call) {
	return func(c *record.Call) {
		defer req.Release()
		defer resp.Release()
		DecodeHTTP(c, rt, full, req.body(reqHdr), resp.body(respHdr))
	}
}

func (p *Prefix) body(h http.Header) Body {
	if p == nil {
		return Body{}
	}
	return Body{Header: h, Buf: p.Buf, Truncated: p.Truncated}
}

// Body is a captured HTTP body as the decoders read it: its headers, its
// first bytes, and whether it went on past them.
type Body struct {
	Header    http.Header
	Buf       []byte
	Truncated bool
}

// DecodeHTTP reads a call's captured bodies into c: the request's always,
// the response's when the call succeeded (2xx). Every call gets the
// bracket scan (inferapi.ScanHTTPRequest), which fills the record; a full
// one (the decode sample) gets the validating walk instead, whose time is
// the call's decode phase, as a gRPC call's unmarshal is. Every front that
// captures HTTP bodies decodes them here.
func DecodeHTTP(c *record.Call, rt inferapi.Route, full bool, req, resp Body) {
	decodeReq, decodeResp := inferapi.ScanHTTPRequest, inferapi.ScanHTTPResponse
	if full {
		decodeReq, decodeResp = inferapi.DecodeHTTPRequest, inferapi.DecodeHTTPResponse
	}
	s := time.Now()
	err := decodeReq(rt, req.Header, req.Buf, req.Truncated, c)
	if resp.Header != nil && len(resp.Buf) > 0 && c.Code != "" && c.Code[0] == '2' {
		if rerr := decodeResp(rt, resp.Header, resp.Buf, resp.Truncated, c); rerr != nil && err == nil {
			err = rerr
		}
	}
	if full {
		c.Decode, c.DecodeRan = time.Since(s), true
	}
	if err != nil {
		c.DecodeFail = true
	}
}

// DecodeHeaders keeps the headers a decoder reads (inferapi.DecodeHeaders)
// from a lookup by lower-case name, as HTTP/2 and Envoy spell them.
func DecodeHeaders(get func(key string) string) http.Header {
	out := make(http.Header, len(inferapi.DecodeHeaders))
	for i, k := range inferapi.DecodeHeaders {
		if v := get(lowerDecodeHeaders[i]); v != "" {
			out[k] = []string{v}
		}
	}
	return out
}

var lowerDecodeHeaders = func() (l [len(inferapi.DecodeHeaders)]string) {
	for i, k := range inferapi.DecodeHeaders {
		l[i] = strings.ToLower(k)
	}
	return l
}()
