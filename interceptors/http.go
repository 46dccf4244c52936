package interceptors

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/inferwatch/inferwatch/inferapi"
	"github.com/inferwatch/inferwatch/internal/callcap"
	"github.com/inferwatch/inferwatch/record"
)

// HTTP wraps a handler so each request it serves becomes a record submitted
// to p, without body decode or traces. apiHint is as for the proxy
// ("tfserving" or "kserve_v1"). Recorder.Middleware is the full version.
func HTTP(next http.Handler, p *record.Pipeline, apiHint string) http.Handler {
	m := &middleware{next: next, pipeline: p, apiHint: apiHint}
	return m
}

// Middleware wraps a handler so each request it serves becomes a record:
// the route, model and version from the path; request and response bytes as
// the handler read and wrote them; for infer calls the first CaptureBytes of
// both bodies decoded off the data path with the same decoders as the proxy
// (tensors, batch, the decode phase); Server-Timing the handler set; the
// trace context of the request.
func (r *Recorder) Middleware(next http.Handler) http.Handler {
	return &middleware{next: next, pipeline: r.pipeline, apiHint: r.o.APIHint, rec: r}
}

type middleware struct {
	next     http.Handler
	pipeline *record.Pipeline
	apiHint  string
	rec      *Recorder // nil: no capture, no trace
}

func (m *middleware) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rt := inferapi.HTTPRoute(r.Method, r.URL.Path, m.apiHint)
	c := &record.Call{Start: time.Now(), Protocol: record.ProtocolHTTP, API: rt.API, Method: rt.Method,
		Model: rt.Model, Version: rt.Version, RequestMessages: 1, ResponseMessages: 1}
	var reqCap, respCap *callcap.Prefix
	if m.rec != nil {
		if rt.ReadsBody() && m.rec.o.CaptureBytes > 0 {
			reqCap = callcap.NewPrefix(m.rec.o.CaptureBytes, m.rec.budget)
			respCap = callcap.NewPrefix(m.rec.o.CaptureBytes, m.rec.budget)
		}
		if m.rec.tracer != nil {
			m.rec.traceStart(c, traceHTTP(r.Header))
		}
	}
	body := &countingBody{ReadCloser: r.Body, c: c, capture: reqCap}
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = body
	} else {
		c.RequestEnd = 1
	}
	rw := &recordingWriter{ResponseWriter: w, c: c, capture: respCap, route: rt}
	// A handler that panics (httputil.ReverseProxy does, with
	// http.ErrAbortHandler, when a copy breaks) still gets its record and
	// hands its captures back; the panic goes on to net/http untouched, its
	// stack with it, so it is not recovered here.
	panicked := true
	defer func() { m.finish(c, rw, r, reqCap, respCap, panicked) }()
	m.next.ServeHTTP(rw, r)
	panicked = false
}

// finish completes the record once the handler has returned or panicked,
// and submits it.
func (m *middleware) finish(c *record.Call, rw *recordingWriter, r *http.Request, reqCap, respCap *callcap.Prefix, panicked bool) {
	rt := rw.route
	gone := r.Context().Err() != nil
	if rw.sse != nil {
		// What was written since the last flush goes out as the handler returns.
		rw.sse.Written(since(c))
		rw.sse.Finish(c, gone)
	}
	if c.RequestEnd == 0 {
		c.RequestEnd = since(c) // the handler did not read to the end
	}
	c.End = since(c)
	c.ResponseEnd = c.End
	if rw.status == 0 {
		rw.status = http.StatusOK
		if rw.hijacked && httpguts.HeaderValuesContainsToken(r.Header["Connection"], "upgrade") {
			// The record is the handshake's, as the sidecar's: a session
			// of an hour is not an hour's latency.
			rw.status = http.StatusSwitchingProtocols
			c.End, c.ResponseEnd, c.Stream = rw.hijackedAt, rw.hijackedAt, true
		}
		if c.FirstByte == 0 {
			c.FirstByte = c.End
		}
	}
	c.Code = strconv.Itoa(rw.status)
	if panicked {
		// net/http ends the response unfinished: a broken upstream, as the
		// sidecar would count a server that failed mid-answer, unless the
		// client had gone already.
		c.Code, c.ErrorKind = "500", record.ErrUpstreamUnavailable
		if gone {
			c.Code, c.ErrorKind = "499", record.ErrClientCancel
		}
	}
	c.UpstreamStart, c.UpstreamSent = c.RequestEnd, c.RequestEnd
	c.Stages = inferapi.ParseServerTiming(rw.Header()["Server-Timing"], c.Stages)
	if rt.API == record.APIOpenAI {
		c.Stages = inferapi.ParseTGITimes(rw.Header().Get, c.Stages)
	}
	if reqCap != nil {
		reqHdr := callcap.DecodeHeaders(func(k string) string { return r.Header.Get(k) })
		respHdr := callcap.DecodeHeaders(func(k string) string { return rw.Header().Get(k) })
		c.Deferred = callcap.HTTPDecode(rt, reqHdr, reqCap, respHdr, respCap, rt.Infer && m.rec.decode.Sample())
	}
	if !m.pipeline.Submit(c) {
		reqCap.Release()
		respCap.Release()
	}
}

// traceHTTP copies the trace context headers, so the hook's rewrite does not
// touch the request the handler sees.
func traceHTTP(h http.Header) http.Header {
	out := http.Header{}
	for _, k := range traceKeys {
		ck := http.CanonicalHeaderKey(k)
		if v := h[ck]; len(v) > 0 {
			out[ck] = v
		}
	}
	return out
}

type countingBody struct {
	io.ReadCloser
	c       *record.Call
	capture *callcap.Prefix
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.c.RequestBytes += int64(n)
	b.capture.Write(p[:n])
	if err == io.EOF && b.c.RequestEnd == 0 {
		b.c.RequestEnd = since(b.c)
	}
	return n, err
}

type recordingWriter struct {
	http.ResponseWriter
	c       *record.Call
	status  int
	capture *callcap.Prefix
	route   inferapi.Route
	sse     *inferapi.EventTimer // its answer is an event stream
	// hijacked: the handler took the connection over (Hijack), at
	// hijackedAt; what it wrote there is not counted.
	hijacked   bool
	hijackedAt time.Duration
}

func (w *recordingWriter) WriteHeader(code int) {
	// An informational status (103 Early Hints) goes ahead of the answer,
	// which may follow with any status and Content-Type: it is neither the
	// call's status nor its first byte. 101 is final: the connection
	// switches.
	if informational := code >= 100 && code < 200 && code != http.StatusSwitchingProtocols; w.status == 0 && !informational {
		w.status = code
		w.c.FirstByte = since(w.c)
		if w.route.Generative() && inferapi.IsEventStream(w.Header().Get("Content-Type")) {
			w.sse = inferapi.NewEventTimer(w.route)
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *recordingWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	n, err := w.ResponseWriter.Write(p)
	w.c.ResponseBytes += int64(n)
	w.capture.Write(p[:n])
	if w.sse != nil {
		w.sse.Read(p[:n], since(w.c))
	}
	return n, err
}

// Flush keeps http.Flusher visible to the handler, as streaming handlers
// (server-sent events) assert it; a flush is when written events reach the
// client.
func (w *recordingWriter) Flush() {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	http.NewResponseController(w.ResponseWriter).Flush()
	if w.sse != nil {
		w.sse.Written(since(w.c))
	}
}

// Hijack keeps http.Hijacker visible to the handler, as upgrading handlers
// (WebSocket endpoints) assert it. The status and everything after it go
// over the connection the handler now owns, unseen: the record says 101
// for an upgrade request, ends at the hijack, and counts only what was
// written before.
func (w *recordingWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil {
		w.hijacked, w.hijackedAt = true, since(w.c)
		if w.status == 0 {
			w.c.FirstByte = w.hijackedAt // the handler answers from here on
		}
	}
	return conn, brw, err
}

// Unwrap lets http.ResponseController reach Flush and deadlines.
func (w *recordingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
