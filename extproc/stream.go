package extproc

import (
	"encoding/binary"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/inferwatch/inferwatch/inferapi"
	"github.com/inferwatch/inferwatch/internal/callcap"
	"github.com/inferwatch/inferwatch/record"
)

// Envoy attributes the record reads, when the filter's request_attributes or
// response_attributes name them. Envoy sends each under the filter's name
// ("envoy.filters.http.ext_proc") as a Struct field named by the attribute;
// timestamps come as RFC 3339 text, numbers as numbers.
const (
	attrRequestTime     = "request.time"         // first byte of the request received by Envoy
	attrResponseCode    = "response.code"        // HTTP status
	attrGRPCStatus      = "response.grpc_status" // gRPC status code
	attrUpstreamAddress = "upstream.address"     // the upstream host:port Envoy chose
)

// maxClockSkew bounds how far before the headers' arrival request.time may
// lie and still be taken as the call's start (Envoy and inferwatch share a
// node's clock; a value further off is a wrong clock, not a slow Envoy).
const maxClockSkew = 30 * time.Second

// maxAddrLen bounds the upstream address kept from an attribute.
const maxAddrLen = 256

// scanners are reused across streams: a scanner keeps its small buffers
// over Reset, and Fill* copy out what the record keeps.
var scanners = sync.Pool{New: func() any { return new(inferapi.GRPCScanner) }}

// stream is one ext_proc stream: the request and response of one HTTP call.
// Only the goroutine serving the stream touches it.
type stream struct {
	s                 *Server
	first             bool
	reqMode, respMode BodyMode

	rec     *record.Call
	start   time.Time
	route   inferapi.Route
	grpc    bool
	invalid bool // a malformed sequence: the record is not trusted and not submitted

	observing bool      // Envoy's observability mode: nothing is answered
	lastAt    time.Time // arrival of the latest message

	reqHeaders, reqDone   bool
	respHeaders, respDone bool
	reqBody, respBody     bool // a body message came in that direction
	respAt                time.Time
	reqLen, respLen       int64 // content-length, for a body never sent to us

	reqScan, respScan *inferapi.GRPCScanner
	reqStop, respStop bool // the scanner refused a message: no more feeding
	grpcRes           *callcap.Reservation
	reqCap, respCap   *callcap.Prefix
	reqHdr, respHdr   http.Header             // what the deferred HTTP decode reads
	sse               *inferapi.EventTimer    // a generative route's event stream
	stream            *inferapi.StreamTracker // a followed stream's requests and responses (Route.TracksStream)

	grpcStatus, httpStatus string
	attrGRPC, attrHTTP     string
}

func newStream(s *Server) *stream {
	return &stream{s: s, first: true, reqMode: s.o.BodyMode, respMode: s.o.BodyMode}
}

// at is the offset of t in the call, at least 1 (reached).
func (st *stream) at(t time.Time) time.Duration {
	if d := t.Sub(st.start); d > 0 {
		return d
	}
	return 1
}

// observe measures one message, received at now and answered at sent (equal
// in observability mode).
func (st *stream) observe(req *extprocv3.ProcessingRequest, now, sent time.Time) {
	st.lastAt = now
	st.observing = st.observing || req.GetObservabilityMode()
	if len(req.ProtoReflect().GetUnknown()) > 0 {
		st.s.fault(kindUnknownFields, "ext_proc message with fields this version does not know; ignored")
	}
	switch r := req.Request.(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		st.requestHeaders(r.RequestHeaders, req.GetAttributes(), now, sent)
	case *extprocv3.ProcessingRequest_RequestBody:
		if !st.order(true, "request_body") {
			return
		}
		b := r.RequestBody
		st.reqBody = true
		st.rec.RequestBytes += st.feed(true, b)
		if b.GetEndOfStream() {
			st.requestDone(now, sent)
		}
	case *extprocv3.ProcessingRequest_RequestTrailers:
		if !st.order(true, "request_trailers") {
			return
		}
		st.requestDone(now, sent)
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		st.responseHeaders(r.ResponseHeaders, req.GetAttributes(), now, sent)
	case *extprocv3.ProcessingRequest_ResponseBody:
		if !st.order(false, "response_body") {
			return
		}
		b := r.ResponseBody
		st.respBody = true
		st.rec.ResponseBytes += st.feed(false, b)
		if st.sse != nil {
			// The chunk reaches the client once answered (ordinary mode),
			// or as it reaches us (observability mode: sent is now).
			st.sse.Read(b.GetBody(), st.at(now))
			st.sse.Written(st.at(sent))
		}
		if b.GetEndOfStream() {
			st.responseDone(now, sent)
		}
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		if !st.order(false, "response_trailers") {
			return
		}
		st.trailers(r.ResponseTrailers.GetTrailers())
		st.attributes(req.GetAttributes())
		st.responseDone(now, sent)
	}
}

// order checks that a body or trailers message follows the headers of its
// direction and comes before that direction ended.
func (st *stream) order(request bool, what string) bool {
	headers, done := st.reqHeaders, st.reqDone
	if !request {
		headers, done = st.respHeaders, st.respDone
	}
	switch {
	case !headers:
		st.s.fault(kindBodyBeforeHeaders, what+" before its headers; answered, call not recorded")
	case done:
		st.s.fault(kindOutOfOrder, what+" after its direction ended; answered, call not recorded")
	default:
		return true
	}
	st.invalid = true
	return false
}

func (st *stream) requestHeaders(h *extprocv3.HttpHeaders, attrs map[string]*structpb.Struct, now, sent time.Time) {
	if st.reqHeaders {
		st.s.fault(kindOutOfOrder, "request_headers twice on one stream; answered, call not recorded")
		st.invalid = true
		return
	}
	st.reqHeaders = true
	st.start = now
	if t, ok := attrTime(attrs, attrRequestTime); ok {
		if lag := now.Sub(t); lag >= 0 && lag <= maxClockSkew {
			st.start = now.Add(-lag) // keeps now's monotonic reading
		}
	}
	c := &record.Call{Start: st.start}
	st.rec = c
	var path, method, ctype string
	var trace http.Header
	for _, hv := range h.GetHeaders().GetHeaders() {
		k := hv.GetKey()
		switch k {
		case ":path":
			path = headerValue(hv)
		case ":method":
			method = headerValue(hv)
		case "content-type":
			ctype = headerValue(hv)
		case "content-length":
			st.reqLen, _ = strconv.ParseInt(headerValue(hv), 10, 64)
		case "traceparent", "tracestate", "b3", "x-b3-traceid", "x-b3-spanid", "x-b3-parentspanid", "x-b3-sampled", "x-b3-flags":
			if trace == nil {
				trace = make(http.Header, 2)
			}
			ck := http.CanonicalHeaderKey(k)
			trace[ck] = append(trace[ck], headerValue(hv))
		}
	}
	if q := strings.IndexByte(path, '?'); q >= 0 {
		path = path[:q]
	}
	st.grpc = strings.HasPrefix(ctype, "application/grpc")
	o := &st.s.o
	if st.grpc {
		c.Protocol = record.ProtocolGRPC
		st.route = inferapi.GRPCRoute(path)
		st.reqScan = scanners.Get().(*inferapi.GRPCScanner)
		st.reqScan.Reset(st.route.Message, o.MaxMessageBytes)
		if st.route.Message == inferapi.KindInferRequest && st.s.sampler.Sample() {
			st.grpcRes = callcap.NewReservation(st.s.budget)
			st.reqScan.Capture(o.DecodeMaxBytes, st.grpcRes.Take)
		}
		st.respScan = scanners.Get().(*inferapi.GRPCScanner)
		st.respScan.Reset(st.route.Reply, o.MaxMessageBytes)
		st.stream = inferapi.WatchStream(st.route, st.start, st.reqScan, st.respScan)
	} else {
		c.Protocol = record.ProtocolHTTP
		st.route = inferapi.HTTPRoute(method, path, o.APIHint)
		if st.route.ReadsBody() && o.CaptureBytes > 0 {
			st.reqCap = callcap.NewPrefix(o.CaptureBytes, st.s.budget)
			st.respCap = callcap.NewPrefix(o.CaptureBytes, st.s.budget)
			st.reqHdr = callcap.DecodeHeaders(func(k string) string { return lookup(h, k) })
		}
	}
	c.API, c.Method, c.Model, c.Version = st.route.API, st.route.Method, st.route.Model, st.route.Version
	if o.Trace != nil {
		if trace == nil {
			trace = http.Header{}
		}
		o.Trace.Start(c, o.Route, trace)
	}
	st.attributes(attrs)
	c.UpstreamStart = st.at(sent)
	if h.GetEndOfStream() {
		st.requestDone(now, sent)
	}
}

// lookup finds one header of a header map (for the few a decoder reads).
func lookup(h *extprocv3.HttpHeaders, key string) string {
	for _, hv := range h.GetHeaders().GetHeaders() {
		if hv.GetKey() == key {
			return headerValue(hv)
		}
	}
	return ""
}

func (st *stream) requestDone(now, sent time.Time) {
	st.reqDone = true
	st.rec.RequestEnd = st.at(now)
	st.rec.UpstreamSent = st.at(sent)
}

func (st *stream) responseHeaders(h *extprocv3.HttpHeaders, attrs map[string]*structpb.Struct, now, sent time.Time) {
	switch {
	case !st.reqHeaders:
		st.s.fault(kindBodyBeforeHeaders, "response_headers before request_headers; answered, call not recorded")
		st.invalid = true
		return
	case st.respHeaders:
		st.s.fault(kindOutOfOrder, "response_headers twice on one stream; answered, call not recorded")
		st.invalid = true
		return
	}
	st.respHeaders = true
	c := st.rec
	c.FirstByte = st.at(now)
	var timing []string
	for _, hv := range h.GetHeaders().GetHeaders() {
		switch hv.GetKey() {
		case ":status":
			st.httpStatus = headerValue(hv)
		case "grpc-status": // a trailers-only response
			st.grpcStatus = headerValue(hv)
		case "content-length":
			st.respLen, _ = strconv.ParseInt(headerValue(hv), 10, 64)
		case "server-timing":
			timing = append(timing, headerValue(hv))
		case "content-type":
			if st.route.Generative() && inferapi.IsEventStream(headerValue(hv)) {
				st.sse = inferapi.NewEventTimer(st.route)
			}
		}
	}
	c.Stages = inferapi.ParseServerTiming(timing, c.Stages)
	if st.route.API == record.APIOpenAI {
		c.Stages = inferapi.ParseTGITimes(func(k string) string { return lookup(h, k) }, c.Stages)
	}
	if st.respCap != nil {
		st.respHdr = callcap.DecodeHeaders(func(k string) string { return lookup(h, k) })
	}
	st.attributes(attrs)
	if h.GetEndOfStream() {
		st.responseDone(now, sent)
	}
}

func (st *stream) trailers(m *corev3.HeaderMap) {
	var timing []string
	for _, hv := range m.GetHeaders() {
		switch hv.GetKey() {
		case "grpc-status":
			st.grpcStatus = headerValue(hv)
		case "server-timing":
			timing = append(timing, headerValue(hv))
		}
	}
	st.rec.Stages = inferapi.ParseServerTiming(timing, st.rec.Stages)
}

func (st *stream) responseDone(now, sent time.Time) {
	st.respDone = true
	st.rec.ResponseEnd = st.at(now)
	st.respAt = sent
}

// feed hands body bytes to the direction's scanner or capture and returns
// how many bytes they are on the wire: in Envoy's GRPC body mode a body is
// one gRPC message without its length prefix, which the scanner (and the
// byte count, to match the sidecar's) gets back, compressed flag included;
// a half-close without a message is no message at all.
func (st *stream) feed(request bool, b *extprocv3.HttpBody) int64 {
	scan, stop, capt, mode := st.reqScan, &st.reqStop, st.reqCap, st.reqMode
	if !request {
		scan, stop, capt, mode = st.respScan, &st.respStop, st.respCap, st.respMode
	}
	p := b.GetBody()
	wire := int64(len(p))
	if mode == BodyGRPC && st.grpc {
		if len(p) == 0 && b.GetEndOfStreamWithoutMessage() {
			return 0
		}
		var prefix [5]byte
		if b.GetGrpcMessageCompressed() {
			prefix[0] = 1
		}
		binary.BigEndian.PutUint32(prefix[1:], uint32(len(p)))
		wire += int64(len(prefix))
		if scan != nil && !*stop {
			if err := scan.Feed(prefix[:]); err != nil {
				*stop = true
				st.s.fault(kindOversizeBody, "gRPC message in the body over max_message_bytes; not scanned further", "limit_bytes", st.s.o.MaxMessageBytes)
			}
		}
	}
	if scan != nil && !*stop {
		if err := scan.Feed(p); err != nil {
			*stop = true
			st.s.fault(kindOversizeBody, "gRPC message in the body over max_message_bytes; not scanned further", "limit_bytes", st.s.o.MaxMessageBytes)
		}
	}
	capt.Write(p)
	return wire
}

// attributes reads the Envoy attributes the record uses.
func (st *stream) attributes(attrs map[string]*structpb.Struct) {
	for _, s := range attrs {
		f := s.GetFields()
		if v, ok := f[attrResponseCode]; ok {
			if n, ok := v.GetKind().(*structpb.Value_NumberValue); ok {
				st.attrHTTP = strconv.Itoa(int(n.NumberValue))
			}
		}
		if v, ok := f[attrGRPCStatus]; ok {
			if n, ok := v.GetKind().(*structpb.Value_NumberValue); ok {
				st.attrGRPC = strconv.Itoa(int(n.NumberValue))
			}
		}
		if v, ok := f[attrUpstreamAddress]; ok {
			if a := v.GetStringValue(); a != "" && len(a) <= maxAddrLen {
				st.rec.UpstreamAddr = a
			}
		}
	}
}

// attrTime reads a timestamp attribute (RFC 3339, as Envoy prints it).
func attrTime(attrs map[string]*structpb.Struct, name string) (time.Time, bool) {
	for _, s := range attrs {
		if v, ok := s.GetFields()[name]; ok {
			if t, err := time.Parse(time.RFC3339Nano, v.GetStringValue()); err == nil {
				return t, true
			}
		}
	}
	return time.Time{}, false
}

// abandon drops the stream's record: Envoy carries on without us.
func (st *stream) abandon() {
	st.invalid = true
	st.finish(time.Now(), true)
}

// finish completes the record and submits it. clean says Envoy half-closed
// the stream (io.EOF) rather than resetting it.
func (st *stream) finish(now time.Time, clean bool) {
	c := st.rec
	if c == nil {
		return // no request headers ever came: nothing to record
	}
	defer st.putScanners()
	if st.invalid {
		st.release()
		return
	}
	if st.observing {
		// Envoy closes an observability-mode stream only
		// deferred_close_timeout (5 s by default) after the call is
		// gone, so the close says nothing of when the call ended: the
		// latest message is the last we know of it.
		now = st.lastAt
	}
	if clean && st.respHeaders && !st.respDone {
		// Envoy sent the response headers and closed: the rest of the
		// response was not for us (a body mode of NONE, trailers skipped).
		st.respDone, st.respAt = true, now
	}
	if st.respDone {
		c.End = st.at(st.respAt)
	} else {
		// The stream ended before the response did: Envoy reset it (the
		// client went away) or closed it early.
		c.End = st.at(now)
		c.ErrorKind = record.ErrClientCancel
	}
	// A body not sent to us, or only its first part (BUFFERED_PARTIAL
	// over its limit: Envoy forwards the rest itself), counts as its
	// content-length announced, once the call completed; a call cut short
	// keeps what was seen.
	if st.reqLen > c.RequestBytes && (!st.reqBody || st.respDone) {
		c.RequestBytes = st.reqLen
	}
	if st.respLen > c.ResponseBytes && (!st.respBody || st.respDone) {
		c.ResponseBytes = st.respLen
	}
	if st.grpc {
		st.reqScan.FillRequest(c)
		if captured := st.reqScan.Captured(); captured != nil && st.grpcRes != nil {
			c.Deferred = callcap.GRPCDecode(captured, st.grpcRes)
		} else {
			st.grpcRes.Release()
		}
		st.respScan.FillResponse(c)
		if st.stream != nil {
			st.stream.Fill(c)
		}
		c.Stream = c.Stream || c.RequestMessages > 1 || c.ResponseMessages > 1 || st.route.Streaming()
		if c.RequestMessages == 0 && !st.reqBody {
			c.RequestMessages = 1 // the body was not sent to us
		}
		if c.ResponseMessages == 0 && !st.respBody && st.respDone {
			c.ResponseMessages = 1
		}
		c.Code = st.grpcCode()
	} else {
		c.RequestMessages, c.ResponseMessages = 1, 1
		c.Code = st.httpCode()
		if st.sse != nil && st.respBody {
			st.sse.Finish(c, c.ErrorKind == record.ErrClientCancel)
		}
		if st.reqCap != nil {
			c.Deferred = callcap.HTTPDecode(st.route, st.reqHdr, st.reqCap, st.respHdr, st.respCap, st.route.Infer && st.s.sampler.Sample())
		}
	}
	if !st.s.o.Pipeline.Submit(c) {
		st.release()
	}
}

// putScanners hands the scanners back once the record has what it needs.
func (st *stream) putScanners() {
	if st.reqScan != nil {
		scanners.Put(st.reqScan)
		st.reqScan = nil
	}
	if st.respScan != nil {
		scanners.Put(st.respScan)
		st.respScan = nil
	}
}

// release gives the captures' budget back when their decode will not run.
func (st *stream) release() {
	st.reqCap.Release()
	st.respCap.Release()
	st.grpcRes.Release()
}

func (st *stream) grpcCode() string {
	if !st.respDone {
		return "CANCELLED"
	}
	v := st.grpcStatus
	if v == "" {
		v = st.attrGRPC
	}
	if v == "" {
		return "UNKNOWN" // trailers not sent to us (response_trailer_mode SKIP)
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return "UNKNOWN"
	}
	return record.GRPCCodeName(n)
}

func (st *stream) httpCode() string {
	if !st.respDone {
		return "499"
	}
	if st.httpStatus != "" {
		return st.httpStatus
	}
	if st.attrHTTP != "" {
		return st.attrHTTP
	}
	return "0"
}
