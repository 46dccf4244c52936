package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inferwatch/inferwatch/inferapi"
	"github.com/inferwatch/inferwatch/proxy/h1"
	"github.com/inferwatch/inferwatch/record"
)

// Options configure a Handler for one listen/upstream pair.
type Options struct {
	Route     string            // name used in logs
	Upstream  string            // host:port
	TLS       bool              // upstream speaks TLS
	Transport http.RoundTripper // to the upstream; see NewTransport
	Pipeline  *record.Pipeline  // where finished records go
	Logger    *slog.Logger

	MaxMessageBytes int64   // largest gRPC message accepted, 0 for no limit
	CaptureBytes    int     // HTTP: body prefix kept for the bounded decode
	CaptureBudget   int64   // bytes all calls' captures (HTTP prefixes, sampled gRPC messages) may hold at once, waiting for their decode; 0: 64 MiB
	DecodeSample    float64 // share of infer calls fully decoded: gRPC's first message unmarshalled, HTTP's captured bodies walked validating every byte
	DecodeMaxBytes  int     // gRPC: largest message captured for that decode
	APIHint         string  // "tfserving" or "kserve_v1" for /v1/models/{m}:predict

	UpstreamRTT func() time.Duration // kernel RTT of the upstream connections, if known

	// Trace, if set, reads and rewrites the trace context (W3C, B3) of every call
	// (see TraceContext): the one change the proxy makes to forwarded bytes.
	Trace TraceContext
}

// Handler proxies every request to one upstream and records each call.
type Handler struct {
	o        Options
	scheme   string
	inflight atomic.Int64
	decodeN  atomic.Uint64
	every    uint64       // decode every n-th infer call; 0 never
	budget   atomic.Int64 // capture bytes left
	tunnels  tunnelSet    // upgraded connections (upgrade.go)
}

// NewHandler returns a Handler; o.Transport and o.Pipeline are required.
func NewHandler(o Options) *Handler {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	h := &Handler{o: o, scheme: "http"}
	if o.TLS {
		h.scheme = "https"
	}
	if o.CaptureBudget <= 0 {
		o.CaptureBudget = 64 << 20
	}
	h.o.CaptureBudget = o.CaptureBudget
	h.budget.Store(o.CaptureBudget)
	if o.DecodeSample > 0 {
		h.every = uint64(1/o.DecodeSample + 0.5)
		if h.every < 1 {
			h.every = 1
		}
	}
	return h
}

// InFlight returns the number of calls being served now.
func (h *Handler) InFlight() int64 { return h.inflight.Load() }

var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// call is what one ServeHTTP holds while serving.
type call struct {
	rec      *record.Call
	route    inferapi.Route
	grpc     bool
	body     *requestBody
	respScan *inferapi.GRPCScanner
	respCap  *capture
	grpcRes  *reservation            // the capture budget a sampled gRPC message holds
	respHdr  http.Header             // the response headers a deferred decode reads
	failed   error                   // upstream broke after the response began
	deadline time.Time               // from grpc-timeout; zero when none
	timeout  time.Duration           // grpc-timeout as sent
	stream   *inferapi.StreamTracker // streams followed message by message only (Route.TracksStream)
	tunnelUp int64                   // bytes the client sent over its upgraded connection
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	h.inflight.Add(1)
	defer h.inflight.Add(-1)

	cl := &call{rec: &record.Call{Start: start}, grpc: isGRPC(r)}
	c := cl.rec
	if cl.grpc {
		c.Protocol = record.ProtocolGRPC
		cl.route = inferapi.GRPCRoute(r.URL.Path)
	} else {
		c.Protocol = record.ProtocolHTTP
		cl.route = inferapi.HTTPRoute(r.Method, r.URL.Path, h.o.APIHint)
	}
	c.API, c.Method, c.Model, c.Version = cl.route.API, cl.route.Method, cl.route.Model, cl.route.Version
	c.Stream = cl.route.Streaming()
	cl.body = &requestBody{src: r.Body, start: start}
	reqKind, respKind := cl.route.Message, cl.route.Reply
	if cl.grpc {
		cl.body.scan = new(inferapi.GRPCScanner)
		cl.body.scan.Reset(reqKind, h.o.MaxMessageBytes)
		if reqKind == inferapi.KindInferRequest && h.sampleDecode() {
			cl.grpcRes = &reservation{budget: &h.budget}
			cl.body.scan.Capture(h.o.DecodeMaxBytes, cl.grpcRes.take)
		}
		cl.respScan = new(inferapi.GRPCScanner)
		cl.respScan.Reset(respKind, h.o.MaxMessageBytes)
		cl.stream = inferapi.WatchStream(cl.route, start, cl.body.scan, cl.respScan)
	} else if cl.route.ReadsBody() && h.o.CaptureBytes > 0 {
		cl.body.capture = &capture{max: h.o.CaptureBytes, budget: &h.budget}
		cl.respCap = &capture{max: h.o.CaptureBytes, budget: &h.budget}
	}

	ctx := r.Context()
	if cl.grpc {
		if d, ok := parseGRPCTimeout(r.Header.Get("Grpc-Timeout")); ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, d)
			defer cancel()
			cl.deadline, cl.timeout = start.Add(d), d
		}
	}
	if h.o.Trace != nil {
		h.o.Trace.Start(c, h.o.Route, r.Header)
	}
	offered := upgradeType(r)
	out, err := h.outgoing(ctx, r, cl.grpc, cl.body, offered)
	if err != nil {
		// The client broke off its own request body: nobody to answer.
		c.ErrorKind, c.Code = record.ErrClientCancel, statusForCancel(false)
		h.finish(cl, r)
		return
	}

	c.UpstreamStart = time.Since(start)
	res, err := h.o.Transport.RoundTrip(out)
	if err != nil {
		h.fail(w, r, ctx, cl, err)
		h.finish(cl, r)
		return
	}
	c.FirstByte = time.Since(start)
	if res.StatusCode < 100 || res.StatusCode > 999 {
		// No status a ResponseWriter takes: relayed, WriteHeader would
		// panic, and the client lose its answer and the call its record.
		res.Body.Close()
		h.fail(w, r, ctx, cl, fmt.Errorf("upstream answered status %d: %w", res.StatusCode, errBadStatus))
		h.finish(cl, r)
		return
	}
	if res.StatusCode == http.StatusSwitchingProtocols {
		h.tunnel(w, cl, res, offered)
		h.finish(cl, r)
		return
	}
	abort := h.relay(w, cl, res)
	h.finish(cl, r)
	if abort {
		// An HTTP response cut off upstream must look cut off to the client
		// too, as httputil.ReverseProxy does it.
		panic(http.ErrAbortHandler)
	}
}

// outgoing builds the upstream request: same method, path, query, headers
// (less hop-by-hop, but for an upgrade's own two; traceparent and
// tracestate as the trace hook set them), host and body; nothing else
// added.
func (h *Handler) outgoing(ctx context.Context, r *http.Request, grpc bool, body *requestBody, offered string) (*http.Request, error) {
	out := r.WithContext(ctx)
	u := *r.URL
	u.Scheme, u.Host = h.scheme, h.o.Upstream
	out.URL = &u
	out.RequestURI = ""
	out.Close = false
	removeHopHeaders(out.Header)
	if offered != "" {
		setUpgrade(out.Header, offered)
	}
	if _, ok := out.Header["User-Agent"]; !ok {
		out.Header["User-Agent"] = []string{""} // keep the transport from adding its own
	}
	switch {
	case r.Body == nil || r.Body == http.NoBody || (r.ContentLength == 0 && !grpc):
		out.Body = nil
		body.markEmpty()
	case !grpc && r.ContentLength > 0 && r.ContentLength <= smallBodyBytes:
		// A small body of known length is read whole first and handed over
		// as an in-memory reader: net/http then writes headers and body in
		// one write instead of flushing the headers and writing the body
		// read by read (a 9 KB JSON request cost four writes).
		// Its buffer is pooled: each reader holds it until closed.
		bb, err := body.readSmall(r.ContentLength)
		if err != nil {
			return nil, err
		}
		out.Body = bb.reader()
		out.GetBody = func() (io.ReadCloser, error) { return bb.reader(), nil }
	default:
		out.Body = body
	}
	return out, nil
}

var errBadStatus = errors.New("status out of range")

// smallBodyBytes is the largest HTTP request body read whole before it is
// forwarded; larger ones stream.
const smallBodyBytes = 64 << 10

// relay copies the response to the client as it arrives. It reports whether
// the handler must abort the client's stream (HTTP cut off mid-body).
func (h *Handler) relay(w http.ResponseWriter, cl *call, res *http.Response) (abort bool) {
	c := cl.rec
	defer res.Body.Close()
	removeHopHeaders(res.Header)
	hdr := w.Header()
	copyHeader(hdr, res.Header)
	if _, ok := hdr["Content-Length"]; !ok {
		// net/http would add a Content-Length the upstream did not send when
		// the whole body fits its buffer; a present but empty key stops that.
		hdr["Content-Length"] = nil
	}
	if _, ok := hdr["Content-Type"]; !ok {
		// Nor a Content-Type sniffed from the body (text/plain for JSON):
		// the upstream sent none, so none goes out.
		hdr["Content-Type"] = nil
	}
	announced := announceTrailers(hdr, res.Trailer)
	c.Stages = inferapi.ParseServerTiming(res.Header["Server-Timing"], c.Stages)
	if cl.route.API == record.APIOpenAI {
		c.Stages = inferapi.ParseTGITimes(res.Header.Get, c.Stages)
	}
	if cl.respCap != nil {
		cl.respHdr = decodeHeaders(res.Header)
	}
	w.WriteHeader(res.StatusCode)

	flusher, _ := w.(http.Flusher)
	tw := &timedWriter{w: w, flusher: flusher}
	stream := h.streaming(cl, res)
	if stream && !(cl.grpc && res.Header.Get("Grpc-Status") != "") {
		// A streaming client may wait for headers before anything else. Not
		// a trailers-only answer (a gRPC status in the headers, no body):
		// flushed, its headers would go out without END_STREAM, and the
		// client would read a stream that ended without trailers.
		tw.Flush()
	}
	var sse *inferapi.EventTimer
	if cl.route.Generative() && inferapi.IsEventStream(res.Header.Get("Content-Type")) {
		sse = inferapi.NewEventTimer(cl.route)
		// After the error kind is settled, whichever way relay returns.
		defer func() { sse.Finish(c, c.ErrorKind == record.ErrClientCancel) }()
	}
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	for {
		n, rerr := res.Body.Read(buf)
		if n > 0 {
			c.ResponseBytes += int64(n)
			if cl.respScan != nil {
				if err := cl.respScan.Feed(buf[:n]); err != nil && cl.failed == nil {
					cl.failed = err
				}
			}
			if cl.respCap != nil {
				cl.respCap.write(buf[:n])
			}
			if sse != nil {
				sse.Read(buf[:n], time.Since(c.Start))
			}
			if _, werr := tw.Write(buf[:n]); werr != nil {
				c.ErrorKind = record.ErrClientCancel
				break
			}
			if stream {
				tw.Flush()
			}
			if sse != nil {
				sse.Written(time.Since(c.Start))
			}
		}
		if rerr == io.EOF {
			c.ResponseEnd = time.Since(c.Start)
			break
		}
		if rerr != nil {
			cl.failed = rerr
			break
		}
		if n == len(buf) && len(buf) < bulkCopyBytes {
			// A full read: a bulk body arriving faster than it is relayed,
			// not an event stream's trickle. Larger reads from here on.
			big := bulkBufs.Get().(*[]byte)
			defer bulkBufs.Put(big)
			buf = *big
		}
	}
	if c.ErrorKind == record.ErrClientCancel {
		c.Egress = tw.blocked
		c.Code = statusForCancel(cl.grpc)
		return false
	}
	if cl.failed != nil {
		kind, gcode, hstatus := classify(res.Request.Context(), cl.failed, nil)
		if kind != record.ErrTooLarge && cl.pastDeadline() {
			kind, gcode, hstatus = record.ErrTimeout, grpcDeadlineExceeded, http.StatusGatewayTimeout
		}
		c.ErrorKind = kind
		if cl.grpc {
			writeGRPCError(w, true, gcode, "inferwatch: upstream response broke: "+cl.failed.Error())
			c.Code = record.GRPCCodeName(gcode)
			c.Egress = tw.blocked
			return false
		}
		c.Code = strconv.Itoa(hstatus)
		c.Egress = tw.blocked
		return true
	}
	copyTrailers(hdr, res.Trailer, announced)
	c.Stages = inferapi.ParseServerTiming(res.Trailer["Server-Timing"], c.Stages)
	if cl.grpc {
		st := res.Trailer.Get("Grpc-Status")
		if st == "" {
			st = res.Header.Get("Grpc-Status") // trailers-only response
		}
		c.Code = grpcCodeName(st)
	} else {
		c.Code = strconv.Itoa(res.StatusCode)
	}
	c.Egress = tw.blocked
	return false
}

// streaming says whether each chunk must reach the client at once rather than
// when the server's write buffer fills: gRPC methods not known to be unary,
// SSE, and HTTP bodies of unknown length.
func (h *Handler) streaming(cl *call, res *http.Response) bool {
	if cl.grpc {
		return !unaryGRPC(cl.route)
	}
	if res.ContentLength == -1 {
		return true
	}
	return inferapi.IsEventStream(res.Header.Get("Content-Type"))
}

// deadlineSlack absorbs the time between the client computing grpc-timeout
// and the proxy reading it: at least 5 ms, and a tenth of the timeout, since
// a loaded machine may read the HEADERS frame tens of milliseconds after it
// arrived, which puts the proxy's deadline that much after the client's.
const deadlineSlack = 5 * time.Millisecond

// nearDeadline reports a call at or past its grpc-timeout (or so close that
// the proxy's late reading of the header explains the difference): whatever
// broke it then (the client's cancel, the upstream's reset, the proxy's own
// timer, whichever came first) it timed out. A client that cancels in the
// last tenth of its own deadline is counted as timed out too.
func nearDeadline(deadline time.Time, timeout time.Duration) bool {
	return !deadline.IsZero() && time.Until(deadline) < max(deadlineSlack, timeout/10)
}

func (cl *call) pastDeadline() bool { return nearDeadline(cl.deadline, cl.timeout) }

// unaryGRPC reports whether a gRPC route is known to be unary: the methods
// of the services GRPCRoute recognises that do not stream (of KServe v2,
// whose other methods are all unary, the unrecognised ones too). Unknown
// services and methods may stream.
func unaryGRPC(rt inferapi.Route) bool {
	switch rt.API {
	case record.APIKServeV2:
		return !rt.Streaming()
	case record.APITFServing, record.APITorchServe:
		return rt.Method != inferapi.MethodUnknown && !rt.Streaming()
	}
	return false
}

// fail answers a call whose upstream exchange failed before any response.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, ctx context.Context, cl *call, err error) {
	c := cl.rec
	cl.body.mu.Lock()
	bodyErr, srcErr := cl.body.err, cl.body.srcErr
	cl.body.mu.Unlock()
	kind, gcode, hstatus := classify(ctx, err, bodyErr)
	if kind == record.ErrUpstreamUnavailable && malformedBody(srcErr) {
		// The client's fault, not the upstream's.
		kind, gcode, hstatus = record.ErrBadRequest, grpcInternal, http.StatusBadRequest
	}
	if kind != record.ErrTooLarge && cl.pastDeadline() {
		kind, gcode, hstatus = record.ErrTimeout, grpcDeadlineExceeded, http.StatusGatewayTimeout
	}
	c.ErrorKind = kind
	if kind == record.ErrClientCancel {
		c.Code = statusForCancel(cl.grpc)
		return // nobody to answer
	}
	msg := "inferwatch: upstream " + h.o.Upstream + ": " + errorText(kind)
	if kind == record.ErrBadRequest {
		msg = "inferwatch: malformed request body"
	}
	h.o.Logger.Debug("upstream call failed", "route", h.o.Route, "path", r.URL.Path, "kind", kind, "err", err)
	if cl.grpc {
		writeGRPCError(w, false, gcode, msg)
		c.Code = record.GRPCCodeName(gcode)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(hstatus)
	io.WriteString(w, msg+"\n")
	c.Code = strconv.Itoa(hstatus)
}

// malformedBody says a read of the client's body failed on its own
// framing (a bad chunk size line): h1.ErrMalformedBody on the frame plane,
// one of the errors of net/http's chunked reader, which are not exported,
// on the stdlib plane. Any other failure (the body closed under a
// transport's read, the connection gone) is not the client's to answer.
func malformedBody(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, h1.ErrMalformedBody) {
		return true
	}
	switch err.Error() {
	case "malformed chunked encoding", "invalid byte in chunk length", "http chunk length too large",
		"empty hex number for chunk length", "chunked encoding contains too much non-data",
		"chunked line ends with bare LF", "invalid CR in chunked line":
		return true
	}
	return false
}

func errorText(k record.ErrorKind) string {
	switch k {
	case record.ErrTooLarge:
		return "message larger than the configured limit"
	case record.ErrTimeout:
		return "deadline exceeded"
	}
	return "unavailable"
}

func statusForCancel(grpc bool) string {
	if grpc {
		return record.GRPCCodeName(grpcCancelled)
	}
	return "499"
}

// classify maps a failure to an error kind and the status a client gets.
func classify(ctx context.Context, err, bodyErr error) (record.ErrorKind, int, int) {
	switch {
	case errors.Is(bodyErr, inferapi.ErrTooLarge) || errors.Is(err, inferapi.ErrTooLarge):
		return record.ErrTooLarge, grpcResourceExhausted, http.StatusRequestEntityTooLarge
	case errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded):
		return record.ErrTimeout, grpcDeadlineExceeded, http.StatusGatewayTimeout
	case errors.Is(ctx.Err(), context.Canceled):
		return record.ErrClientCancel, grpcCancelled, 499
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return record.ErrTimeout, grpcDeadlineExceeded, http.StatusGatewayTimeout
	}
	return record.ErrUpstreamUnavailable, grpcUnavailable, http.StatusBadGateway
}

// finish completes the record from the taps and hands it to the pipeline.
func (h *Handler) finish(cl *call, r *http.Request) {
	c := cl.rec
	if c.End == 0 { // a tunnel's ended at its 101
		c.End = time.Since(c.Start)
	}
	b := cl.body
	b.finish()
	b.release()
	c.RequestBytes = b.bytes + cl.tunnelUp
	c.RequestEnd = b.lastRead
	c.UpstreamSent = b.sent
	if c.UpstreamSent == 0 && b.eof {
		c.UpstreamSent = c.UpstreamStart
	}
	fillGRPC(c, b.scan, cl.respScan, cl.grpcRes)
	if cl.stream != nil {
		cl.stream.Fill(c)
	}
	if !cl.grpc {
		c.RequestMessages, c.ResponseMessages = 1, 1
		if b.capture != nil {
			c.Deferred = deferHTTPDecode(cl.route, decodeHeaders(r.Header), b.capture, cl.respHdr, cl.respCap, cl.route.Infer && h.sampleDecode())
		}
	}
	if h.o.UpstreamRTT != nil {
		c.UpstreamRTT = h.o.UpstreamRTT()
	}
	c.ClientRTT = clientRTT(r.Context())
	if !h.o.Pipeline.Submit(c) {
		b.capture.release() // dropped: its decode will never run
		cl.respCap.release()
		cl.grpcRes.release()
	}
}

// fillGRPC fills a record from a call's gRPC scanners and puts the sampled
// full decode, if a message was captured for it, off the data path.
func fillGRPC(c *record.Call, req, resp *inferapi.GRPCScanner, res *reservation) {
	if req != nil {
		req.FillRequest(c)
		if captured := req.Captured(); captured != nil {
			c.Deferred = deferGRPCDecode(captured, res)
		} else {
			res.release() // a message cut short, compressed or refused
		}
	}
	if resp != nil {
		resp.FillResponse(c)
	}
	c.Stream = c.Stream || c.RequestMessages > 1 || c.ResponseMessages > 1
}

// sampleDecode picks every n-th infer call for a full decode.
func (h *Handler) sampleDecode() bool {
	if h.every == 0 {
		return false
	}
	return h.decodeN.Add(1)%h.every == 0
}
