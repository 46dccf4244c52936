package interceptors

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/inferwatch/inferwatch/inferapi"
	"github.com/inferwatch/inferwatch/proto/inference"
	"github.com/inferwatch/inferwatch/record"
)

// grpcFrame is the length prefix of each gRPC message on the wire.
const grpcFrame = 5

// wireLen is a message's length on the wire, uncompressed: what the sidecar
// counts for the same message.
func wireLen(m any) int64 {
	if pm, ok := m.(proto.Message); ok {
		return int64(proto.Size(pm)) + grpcFrame
	}
	return 0
}

// since is the offset of now in c, at least 1 (reached).
func since(c *record.Call) time.Duration {
	if d := time.Since(c.Start); d > 0 {
		return d
	}
	return 1
}

// traceKeys are the metadata keys the trace hook reads.
var traceKeys = [...]string{"traceparent", "tracestate", "b3", "x-b3-traceid", "x-b3-spanid", "x-b3-parentspanid", "x-b3-sampled", "x-b3-flags"}

// traceHeader copies the trace context keys of md into an http.Header.
func traceHeader(md metadata.MD) http.Header {
	h := http.Header{}
	for _, k := range traceKeys {
		if v := md[k]; len(v) > 0 {
			h[http.CanonicalHeaderKey(k)] = v
		}
	}
	return h
}

// begin starts a gRPC record of fullMethod; the route says what its
// messages are.
func (r *Recorder) begin(fullMethod string) (*record.Call, inferapi.Route) {
	rt := inferapi.GRPCRoute(fullMethod)
	return &record.Call{Start: time.Now(), Protocol: record.ProtocolGRPC, API: rt.API, Method: rt.Method,
		Model: rt.Model, Version: rt.Version, Stream: rt.Streaming()}, rt
}

// request counts one request message and, for the first, reads what it
// says (rt.Message): model, version, tensors.
func request(c *record.Call, rt inferapi.Route, m any) {
	c.RequestMessages++
	c.RequestBytes += wireLen(m)
	if c.RequestMessages == 1 {
		fillFirst(c, rt.Message, m)
	}
}

// response counts one response message and, for the first, reads what it
// says (rt.Reply): tensors, readiness.
func response(c *record.Call, rt inferapi.Route, m any) {
	c.ResponseMessages++
	c.ResponseBytes += wireLen(m)
	if c.ResponseMessages == 1 {
		fillFirst(c, rt.Reply, m)
	}
}

// errorKind is the kind of failure a call that ended with code was, seen
// from a client or a server (whose context ended: ctxDone).
func errorKind(code string, client, ctxDone bool) record.ErrorKind {
	switch code {
	case "CANCELLED":
		if client || ctxDone {
			return record.ErrClientCancel
		}
	case "DEADLINE_EXCEEDED":
		return record.ErrTimeout
	case "UNAVAILABLE":
		if client {
			return record.ErrUpstreamUnavailable
		}
	}
	return record.ErrNone
}

// end fills the status and submits the record.
func (r *Recorder) end(ctx context.Context, c *record.Call, err error, client bool) {
	if c.End == 0 {
		c.End = since(c)
	}
	if c.ResponseEnd == 0 {
		c.ResponseEnd = c.End
	}
	c.Code = grpcCode(err)
	c.ErrorKind = errorKind(c.Code, client, ctx.Err() != nil)
	c.Stream = c.Stream || c.RequestMessages > 1 || c.ResponseMessages > 1
	r.pipeline.Submit(c)
}

// UnaryServerInterceptor records every unary call a grpc-go server serves.
// The request was received and decoded before an interceptor runs, so the
// record starts there: upstream is the handler's time, the rest of the
// phases are the server's own (no network share).
func (r *Recorder) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		c, rt := r.begin(info.FullMethod)
		request(c, rt, req)
		c.RequestEnd, c.UpstreamStart, c.UpstreamSent = 1, 1, 1
		r.serverTrace(ctx, c)
		defer r.endOnPanic(ctx, c)
		resp, err := handler(ctx, req)
		c.FirstByte = since(c)
		c.ResponseEnd, c.End = c.FirstByte, c.FirstByte
		if err == nil {
			response(c, rt, resp)
		}
		r.end(ctx, c, err, false)
		return resp, err
	}
}

// errPanicked is how a call whose handler panicked is recorded: INTERNAL, as
// recovery interceptors answer it.
var errPanicked = status.Error(codes.Internal, "handler panicked")

// endOnPanic, deferred before a handler runs, records a call whose handler
// panicked (end never ran). The panic goes on untouched, its stack with it,
// to whatever recovers it, so it is not recovered here.
func (r *Recorder) endOnPanic(ctx context.Context, c *record.Call) {
	if c.Code == "" {
		r.end(ctx, c, errPanicked, false)
	}
}

func (r *Recorder) serverTrace(ctx context.Context, c *record.Call) {
	if r.tracer == nil {
		return
	}
	md, _ := metadata.FromIncomingContext(ctx)
	r.traceStart(c, traceHeader(md))
}

// StreamServerInterceptor records every streaming call a grpc-go server
// serves: messages and bytes each way, the first request's tensors, first
// response message, last message.
func (r *Recorder) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		c, rt := r.begin(info.FullMethod)
		c.Stream = true
		c.UpstreamStart = 1
		r.serverTrace(ss.Context(), c)
		w := &serverStream{ServerStream: ss, c: c, rt: rt, t: trackStream(c, rt)}
		defer r.endOnPanic(ss.Context(), c)
		err := handler(srv, w)
		if c.RequestEnd == 0 {
			c.RequestEnd = since(c) // the handler returned before reading to the end
		}
		c.UpstreamSent = c.RequestEnd
		if w.t != nil {
			w.t.Fill(c)
		}
		r.end(ss.Context(), c, err, false)
		return err
	}
}

type serverStream struct {
	grpc.ServerStream
	c  *record.Call
	rt inferapi.Route
	t  *inferapi.StreamTracker // streams followed message by message only (Route.TracksStream)
}

// trackStream follows a stream's requests and the responses to each, as
// the sidecar does from the bytes, for the routes it follows
// (inferapi.Route.TracksStream); nil for other calls.
func trackStream(c *record.Call, rt inferapi.Route) *inferapi.StreamTracker {
	return inferapi.NewStreamTracker(rt, c.Start)
}

func trackRequest(t *inferapi.StreamTracker, m any) {
	if t == nil {
		return
	}
	switch mr := m.(type) {
	case *inference.ModelInferRequest:
		t.Request(mr.GetId())
	case proto.Message: // TorchServe's PredictionsRequest
		if msg := mr.ProtoReflect(); msg != nil && msg.IsValid() {
			t.Request(text(msg, tsRequestSeqID))
		} else {
			t.Request("")
		}
	}
}

func trackResponse(t *inferapi.StreamTracker, m any) {
	if t == nil {
		return
	}
	switch mr := m.(type) {
	case *inference.ModelStreamInferResponse:
		ir := mr.GetInferResponse()
		t.Response(ir.GetId(), ir.GetParameters()[inferapi.FinalResponseParam].GetBoolParam(), mr.GetErrorMessage() != "")
	case proto.Message: // TorchServe's PredictionResponse: no final flag
		id, failed := "", false
		if msg := mr.ProtoReflect(); msg != nil && msg.IsValid() {
			id = text(msg, tsResponseSeqID)
			if st := subMessage(msg, tsStatus); st != nil {
				if fd := singular(st, statusCode, protoreflect.Int32Kind); fd != nil {
					failed = st.Get(fd).Int() != 0
				}
			}
		}
		t.Response(id, false, failed)
	}
}

func (s *serverStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	switch {
	case err == nil:
		request(s.c, s.rt, m)
		trackRequest(s.t, m)
	case errors.Is(err, io.EOF):
		s.c.RequestEnd = since(s.c)
	}
	return err
}

func (s *serverStream) SendMsg(m any) error {
	if s.c.FirstByte == 0 {
		s.c.FirstByte = since(s.c)
	}
	err := s.ServerStream.SendMsg(m)
	if err == nil {
		response(s.c, s.rt, m)
		trackResponse(s.t, m)
		s.c.ResponseEnd = since(s.c)
	}
	return err
}

// clientTrace runs the trace hook on the outgoing metadata and sends the
// resulting context to the server: traceparent names the client's span
// towards the server as the parent, as the sidecar does upstream.
func (r *Recorder) clientTrace(ctx context.Context, c *record.Call) context.Context {
	if r.tracer == nil {
		return ctx
	}
	md, ok := metadata.FromOutgoingContext(ctx) // a copy
	if !ok {
		md = metadata.MD{}
	}
	h := traceHeader(md)
	r.traceStart(c, h)
	for _, k := range traceKeys {
		if v := h[http.CanonicalHeaderKey(k)]; len(v) > 0 {
			md.Set(k, v...)
		} else {
			delete(md, k)
		}
	}
	return metadata.NewOutgoingContext(ctx, md)
}

// UnaryClientInterceptor records every unary call a grpc-go client makes:
// upstream is the call as the client sees it (network, both serializations
// and the server), and the trace context goes out in the metadata.
func (r *Recorder) UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		c, rt := r.begin(method)
		c.ClientSide = true
		request(c, rt, req)
		c.RequestEnd, c.UpstreamStart, c.UpstreamSent = 1, 1, 1
		ctx = r.clientTrace(ctx, c)
		err := invoker(ctx, method, req, reply, cc, opts...)
		c.FirstByte = since(c)
		c.ResponseEnd, c.End = c.FirstByte, c.FirstByte
		if err == nil {
			response(c, rt, reply)
		}
		r.end(ctx, c, err, true)
		return err
	}
}

// StreamClientInterceptor records every streaming call a grpc-go client
// makes. The record is submitted when the stream ends as the client sees it:
// RecvMsg returned io.EOF or an error, the one response of a stream without
// server streaming arrived, or the call's context ended (a caller may cancel
// instead of draining the stream, as gRPC allows).
func (r *Recorder) StreamClientInterceptor() grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		c, rt := r.begin(method)
		c.Stream, c.ClientSide = true, true
		c.UpstreamStart = 1
		ctx = r.clientTrace(ctx, c)
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			r.end(ctx, c, err, true)
			return nil, err
		}
		s := &clientStream{ClientStream: cs, r: r, c: c, rt: rt, ctx: ctx, t: trackStream(c, rt), oneResponse: !desc.ServerStreams}
		s.mu.Lock()
		s.stop = context.AfterFunc(ctx, s.cancelled)
		s.mu.Unlock()
		return s, nil
	}
}

type clientStream struct {
	grpc.ClientStream
	r   *Recorder
	c   *record.Call
	rt  inferapi.Route
	ctx context.Context
	t   *inferapi.StreamTracker // streams followed message by message only (Route.TracksStream)
	// oneResponse: the method does not stream responses; grpc-go ends the
	// call when RecvMsg returns its one response, and a caller (generated
	// CloseAndRecv) calls RecvMsg no more.
	oneResponse bool

	// mu guards the record and done: SendMsg and RecvMsg may run on two
	// goroutines, and the context's end on a third (stop's).
	mu   sync.Mutex
	done bool        // the record was submitted
	stop func() bool // unregisters cancelled
}

func (s *clientStream) SendMsg(m any) error {
	err := s.ClientStream.SendMsg(m)
	if err == nil {
		s.mu.Lock()
		if !s.done {
			request(s.c, s.rt, m)
			trackRequest(s.t, m)
		}
		s.mu.Unlock()
	}
	return err
}

func (s *clientStream) CloseSend() error {
	err := s.ClientStream.CloseSend()
	s.mu.Lock()
	if !s.done {
		s.c.RequestEnd = since(s.c)
		s.c.UpstreamSent = s.c.RequestEnd
	}
	s.mu.Unlock()
	return err
}

func (s *clientStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return err
	}
	now := since(s.c)
	if err == nil {
		if s.c.FirstByte == 0 {
			s.c.FirstByte = now
		}
		response(s.c, s.rt, m)
		trackResponse(s.t, m)
		s.c.ResponseEnd = now
		if s.oneResponse {
			s.finish(now, nil)
		}
		return nil
	}
	if errors.Is(err, io.EOF) {
		s.finish(now, nil) // the server ended the call with OK
	} else {
		s.finish(now, err)
	}
	return err
}

// cancelled ends the record when the call's context ends before the stream
// did as the caller saw it: the caller cancelled rather than drained it.
func (s *clientStream) cancelled() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.done {
		s.finish(since(s.c), s.ctx.Err())
	}
}

// finish completes and submits the record, at now, with the call's error
// (nil: OK). Called with mu held, once.
func (s *clientStream) finish(now time.Duration, err error) {
	s.done = true
	if s.stop != nil {
		s.stop()
	}
	if s.c.FirstByte == 0 {
		s.c.FirstByte = now
	}
	s.c.End = now
	if s.c.RequestEnd == 0 {
		s.c.RequestEnd = now
		s.c.UpstreamSent = now
	}
	if s.t != nil {
		s.t.Fill(s.c)
	}
	s.r.end(s.ctx, s.c, err, true)
}

// StatsHandler returns a grpc-go stats.Handler over this pipeline, an
// alternative to the interceptors that also sees wire lengths and
// grpc-go's own receive and send times (install one or the other).
func (r *Recorder) StatsHandler() *StatsHandler { return NewStatsHandler(r.pipeline) }
