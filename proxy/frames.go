package proxy

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/inferwatch/inferwatch/inferapi"
	"github.com/inferwatch/inferwatch/proxy/h1"
	"github.com/inferwatch/inferwatch/proxy/h2"
	"github.com/inferwatch/inferwatch/record"
)

// The frame plane (package h2) moves the bytes; a Handler measures its
// streams as h2.Observer, with the same scanners, sampled decode, trace hook
// and error kinds as the stdlib plane, so both give the same records.

var _ h2.Observer = (*Handler)(nil)

// frameCall is one stream's measurement on the frame plane.
type frameCall struct {
	h          *Handler
	rec        *record.Call
	route      inferapi.Route
	grpc       bool
	reqScan    *inferapi.GRPCScanner
	respScan   *inferapi.GRPCScanner
	res        *reservation
	deadline   time.Time
	timeout    time.Duration // grpc-timeout as sent
	grpcStatus string
	respErr    error
	stream     *inferapi.StreamTracker // streams followed message by message only (Route.TracksStream)
	sse        *inferapi.EventTimer    // a generative route's event stream over HTTP/2
}

// Open starts measuring a stream the frame plane forwards.
func (h *Handler) Open(start time.Time, fields []hpack.HeaderField) (h2.Watcher, []hpack.HeaderField) {
	h.inflight.Add(1)
	fc := &frameCall{h: h, rec: &record.Call{Start: start}}
	c := fc.rec
	var method, path, timeout string
	for _, f := range fields {
		switch f.Name {
		case ":method":
			method = f.Value
		case ":path":
			path = f.Value
		case "content-type":
			fc.grpc = strings.HasPrefix(f.Value, "application/grpc")
		case "grpc-timeout":
			timeout = f.Value
		}
	}
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	if fc.grpc {
		c.Protocol = record.ProtocolGRPC
		fc.route = inferapi.GRPCRoute(path)
		fc.reqScan = new(inferapi.GRPCScanner)
		fc.reqScan.Reset(fc.route.Message, h.o.MaxMessageBytes)
		if fc.route.Message == inferapi.KindInferRequest && h.sampleDecode() {
			fc.res = &reservation{budget: &h.budget}
			fc.reqScan.Capture(h.o.DecodeMaxBytes, fc.res.take)
		}
		fc.respScan = new(inferapi.GRPCScanner)
		fc.respScan.Reset(fc.route.Reply, h.o.MaxMessageBytes)
		fc.stream = inferapi.WatchStream(fc.route, start, fc.reqScan, fc.respScan)
		if d, ok := parseGRPCTimeout(timeout); ok {
			fc.deadline, fc.timeout = start.Add(d), d
		}
	} else {
		c.Protocol = record.ProtocolHTTP
		fc.route = inferapi.HTTPRoute(method, path, h.o.APIHint)
	}
	c.API, c.Method, c.Model, c.Version = fc.route.API, fc.route.Method, fc.route.Model, fc.route.Version
	c.Stream = fc.route.Streaming()
	if h.o.Trace != nil {
		fields = traceFields(h.o.Trace, c, h.o.Route, fields)
	}
	return fc, fields
}

// traceFields runs the trace hook on a header block and returns the block
// with the fields it changed rewritten; fields itself when it changed none.
func traceFields(t TraceContext, c *record.Call, route string, fields []hpack.HeaderField) []hpack.HeaderField {
	hdr := make(http.Header, len(fields))
	for _, f := range fields {
		if !strings.HasPrefix(f.Name, ":") {
			k := textproto.CanonicalMIMEHeaderKey(f.Name)
			hdr[k] = append(hdr[k], f.Value)
		}
	}
	orig := hdr.Clone()
	t.Start(c, route, hdr)
	var changed []string
	for k, vv := range hdr {
		if !slices.Equal(orig[k], vv) {
			changed = append(changed, strings.ToLower(k))
		}
	}
	for k := range orig {
		if _, ok := hdr[k]; !ok {
			changed = append(changed, strings.ToLower(k))
		}
	}
	if len(changed) == 0 {
		return fields
	}
	out := make([]hpack.HeaderField, 0, len(fields)+2)
	for _, f := range fields {
		if !slices.Contains(changed, f.Name) {
			out = append(out, f)
		}
	}
	for _, name := range changed {
		for _, v := range hdr[textproto.CanonicalMIMEHeaderKey(name)] {
			out = append(out, hpack.HeaderField{Name: name, Value: v})
		}
	}
	return out
}

func (fc *frameCall) RequestData(p []byte) error {
	if fc.reqScan != nil {
		return fc.reqScan.Feed(p)
	}
	return nil
}

func (fc *frameCall) ResponseHeaders(fields []hpack.HeaderField, trailers bool) {
	for _, f := range fields {
		switch f.Name {
		case "grpc-status":
			fc.grpcStatus = f.Value
		case "server-timing":
			fc.rec.Stages = inferapi.ParseServerTiming([]string{f.Value}, fc.rec.Stages)
		case "content-type":
			if !trailers && fc.route.Generative() && inferapi.IsEventStream(f.Value) {
				fc.sse = inferapi.NewEventTimer(fc.route)
			}
		}
	}
	if !trailers && fc.route.API == record.APIOpenAI {
		fc.rec.Stages = inferapi.ParseTGITimes(func(name string) string {
			for _, f := range fields {
				if f.Name == name {
					return f.Value
				}
			}
			return ""
		}, fc.rec.Stages)
	}
}

func (fc *frameCall) ResponseData(p []byte) {
	if fc.respScan != nil {
		if err := fc.respScan.Feed(p); err != nil && fc.respErr == nil {
			fc.respErr = err
		}
	}
	if fc.sse != nil {
		// The frame goes into the client connection's write buffer right
		// after this, flushed once the upstream's reader has nothing more
		// pending: on this plane an event's arrival stands for its time at
		// the client too.
		at := time.Since(fc.rec.Start)
		fc.sse.Read(p, at)
		fc.sse.Written(at)
	}
}

// pastDeadline is cl.pastDeadline for the frame plane.
func (fc *frameCall) pastDeadline() bool {
	return nearDeadline(fc.deadline, fc.timeout)
}

func (fc *frameCall) Done(e *h2.Events) {
	h := fc.h
	defer h.inflight.Add(-1)
	c := fc.rec
	c.RequestEnd, c.UpstreamStart, c.UpstreamSent = e.RequestEnd, e.UpstreamStart, e.UpstreamSent
	c.FirstByte, c.ResponseEnd, c.End, c.Egress = e.FirstByte, e.ResponseEnd, e.End, e.Egress
	c.RequestBytes, c.ResponseBytes = e.RequestBytes, e.ResponseBytes
	switch {
	case e.Refused != nil:
		c.ErrorKind = record.ErrTooLarge
		status := http.StatusRequestEntityTooLarge
		if e.Status == http.StatusRequestHeaderFieldsTooLarge { // headers or trailers over the limit
			status = e.Status
		}
		c.Code = fc.code(grpcResourceExhausted, status)
	case (e.Unavailable != nil || e.Reset != h2.ResetNone) && fc.pastDeadline():
		c.ErrorKind = record.ErrTimeout
		c.Code = fc.code(grpcDeadlineExceeded, http.StatusGatewayTimeout)
	case e.Unavailable != nil:
		c.ErrorKind = record.ErrUpstreamUnavailable
		c.Code = fc.code(grpcUnavailable, http.StatusBadGateway)
	case e.Reset == h2.ResetByClient:
		c.ErrorKind = record.ErrClientCancel
		c.Code = statusForCancel(fc.grpc)
	case e.Reset == h2.ResetByUpstream:
		c.ErrorKind = record.ErrUpstreamUnavailable
		c.Code = fc.code(resetGRPCCode(e.ResetCode), http.StatusBadGateway)
	case fc.grpc:
		c.Code = grpcCodeName(fc.grpcStatus)
	default:
		c.Code = strconv.Itoa(e.Status)
	}
	if c.ErrorKind == record.ErrNone && errors.Is(fc.respErr, inferapi.ErrTooLarge) {
		c.ErrorKind = record.ErrTooLarge
	}
	fillGRPC(c, fc.reqScan, fc.respScan, fc.res)
	if fc.sse != nil {
		fc.sse.Finish(c, e.Reset == h2.ResetByClient)
	}
	if fc.stream != nil {
		fc.stream.Fill(c)
	}
	if !fc.grpc {
		c.RequestMessages, c.ResponseMessages = 1, 1
	}
	if h.o.UpstreamRTT != nil {
		c.UpstreamRTT = h.o.UpstreamRTT()
	}
	c.ClientRTT = e.ClientRTT
	if !h.o.Pipeline.Submit(c) {
		fc.res.release()
	}
}

func (fc *frameCall) code(grpc, status int) string {
	if fc.grpc {
		return record.GRPCCodeName(grpc)
	}
	return strconv.Itoa(status)
}

// resetGRPCCode maps a RST_STREAM code to the gRPC status a client sees
// (the gRPC HTTP/2 transport's table).
func resetGRPCCode(code http2.ErrCode) int {
	switch code {
	case http2.ErrCodeRefusedStream:
		return grpcUnavailable
	case http2.ErrCodeCancel:
		return grpcCancelled
	case http2.ErrCodeEnhanceYourCalm, http2.ErrCodeFlowControl:
		return grpcResourceExhausted
	case http2.ErrCodeInadequateSecurity:
		return 7 // PERMISSION_DENIED
	}
	return grpcInternal
}

// NewFramePlane returns the frame-level data plane (package h2) for h's
// route: HTTP/2 connections forwarded frame by frame to upstream, dialed
// through tr (TLS and RTT included), measured by h. Set it as the route's
// Listener.Frames.
func NewFramePlane(h *Handler, tr *Transport, upstream string, dialTimeout time.Duration) (*h2.Server, error) {
	return h2.NewServer(h2.Options{
		Dial:        func(ctx context.Context) (net.Conn, error) { return tr.DialH2(ctx, upstream) },
		Observer:    h,
		Logger:      h.o.Logger,
		ConnRTT:     ConnRTT,
		DialTimeout: dialTimeout,
	})
}

// NewHTTP1Plane returns the frame data plane's HTTP/1.x server for h: its
// own connection loop in place of net/http's (package h1), with the
// stdlib plane's timeouts and the client connection in each call's
// context (for its kernel RTT).
func NewHTTP1Plane(h *Handler) *h1.Server {
	return &h1.Server{
		Handler:           h,
		Logger:            h.o.Logger,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		ConnContext:       withConn,
	}
}
