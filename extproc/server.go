package extproc

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/inferwatch/inferwatch/internal/callcap"
	"github.com/inferwatch/inferwatch/record"
)

// TraceHook reads the trace context of a call's request headers and fills
// the record's trace fields (tracing.Tracer is one). Any rewrite it makes to
// h stays with us: ext_proc observes, Envoy forwards the headers unchanged.
type TraceHook interface {
	Start(c *record.Call, route string, h http.Header)
}

// BodyMode is how Envoy sends bodies when its first message does not say
// (protocol_config, which older Envoy releases do not send).
type BodyMode int

// Body modes that change what an answer must carry.
const (
	// BodyBuffered covers NONE, STREAMED, BUFFERED and BUFFERED_PARTIAL: a
	// body message is answered with an empty BodyResponse.
	BodyBuffered BodyMode = iota
	// BodyFullDuplex is FULL_DUPLEX_STREAMED: each body chunk is answered
	// with the same bytes in a StreamedBodyResponse, which Envoy forwards.
	BodyFullDuplex
	// BodyGRPC is Envoy's GRPC mode (in the API of go-control-plane
	// v1.40.0, not yet implemented in Envoy): each body message is one gRPC
	// message without its 5-byte prefix, answered like FULL_DUPLEX_STREAMED.
	BodyGRPC
)

// Defaults of Options.
const (
	DefaultRoute        = "extproc"
	DefaultMaxRecvBytes = 64 << 20
)

// Options configure a Server. Pipeline is required.
type Options struct {
	Pipeline *record.Pipeline
	Trace    TraceHook // nil: no trace context read
	Route    string    // the route name records and traces carry; default "extproc"
	Logger   *slog.Logger
	Metrics  *metrics.Set // inferwatch_extproc_errors_total goes here; nil: a private set

	MaxMessageBytes int64   // gRPC: a message declaring more is not scanned further (0: no limit)
	CaptureBytes    int     // HTTP: body prefix kept for the bounded decode (0: none)
	CaptureBudget   int64   // bytes all captures may hold at once; 0: 64 MiB
	DecodeSample    float64 // share of infer calls fully decoded: gRPC's first message unmarshalled, HTTP's captured bodies walked validating every byte
	DecodeMaxBytes  int     // gRPC: largest message captured for that decode
	APIHint         string  // "tfserving" or "kserve_v1" for /v1/models/{m}:predict

	// BodyMode applies to both directions when Envoy's first message has
	// no protocol_config; it must match the filter's processing_mode.
	BodyMode BodyMode
	// MaxRecvBytes bounds one ProcessingRequest (ServerOptions); default
	// 64 MiB. A larger one ends its stream with RESOURCE_EXHAUSTED, counted.
	MaxRecvBytes int
}

// Server is the ExternalProcessor service.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer
	o       Options
	budget  *callcap.Budget
	sampler *callcap.Sampler
	faults  [numKinds]fault
	streams atomic.Int64
}

// New returns a Server feeding o.Pipeline.
func New(o Options) (*Server, error) {
	if o.Pipeline == nil {
		return nil, errors.New("extproc: Options.Pipeline is required")
	}
	if o.Route == "" {
		o.Route = DefaultRoute
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Metrics == nil {
		o.Metrics = metrics.NewSet()
	}
	if o.MaxRecvBytes <= 0 {
		o.MaxRecvBytes = DefaultMaxRecvBytes
	}
	s := &Server{o: o, budget: callcap.NewBudget(o.CaptureBudget), sampler: callcap.NewSampler(o.DecodeSample)}
	for k := range s.faults {
		s.faults[k].counter = o.Metrics.GetOrCreateCounter(fmt.Sprintf(`inferwatch_extproc_errors_total{kind=%q}`, kindNames[k]))
	}
	return s, nil
}

// ServerOptions are the grpc.Server options the service needs: the receive
// limit of one message.
func (s *Server) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.MaxRecvMsgSize(s.o.MaxRecvBytes)}
}

// Register adds the service to g.
func (s *Server) Register(g *grpc.Server) { extprocv3.RegisterExternalProcessorServer(g, s) }

// Streams returns the number of ext_proc streams open now.
func (s *Server) Streams() int64 { return s.streams.Load() }

// Errors returns how many errors of the named kind were counted.
func (s *Server) Errors(kind string) uint64 {
	for k, n := range kindNames {
		if n == kind {
			return s.faults[k].counter.Get()
		}
	}
	return 0
}

// The answers of the ordinary mode: they never change, so one of each is
// shared by every stream (marshalling does not write to a message).
var (
	answerRequestHeaders = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{
		RequestHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{}}}}
	answerResponseHeaders = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
		ResponseHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{}}}}
	answerRequestBody = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
		RequestBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{}}}}
	answerResponseBody = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
		ResponseBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{}}}}
	answerRequestTrailers = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{
		RequestTrailers: &extprocv3.TrailersResponse{}}}
	answerResponseTrailers = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{
		ResponseTrailers: &extprocv3.TrailersResponse{}}}
)

// streamedBody is the full-duplex answer to a body chunk: the same bytes.
// In the GRPC mode a message's compressed flag and a half-close without a
// message go back too: without them the data plane would send compressed
// bytes as an uncompressed message, or an empty message nobody sent.
func streamedBody(b *extprocv3.HttpBody) *extprocv3.CommonResponse {
	return &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
		Mutation: &extprocv3.BodyMutation_StreamedResponse{StreamedResponse: &extprocv3.StreamedBodyResponse{
			Body: b.GetBody(), EndOfStream: b.GetEndOfStream(),
			GrpcMessageCompressed:     b.GetGrpcMessageCompressed(),
			EndOfStreamWithoutMessage: b.GetEndOfStreamWithoutMessage()}}}}
}

// answer returns the response a message needs in the ordinary mode; nil for
// a message kind this version does not know.
func (st *stream) answer(req *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
	switch r := req.Request.(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return answerRequestHeaders
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return answerResponseHeaders
	case *extprocv3.ProcessingRequest_RequestBody:
		if st.reqMode != BodyBuffered {
			return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
				RequestBody: &extprocv3.BodyResponse{Response: streamedBody(r.RequestBody)}}}
		}
		return answerRequestBody
	case *extprocv3.ProcessingRequest_ResponseBody:
		if st.respMode != BodyBuffered {
			return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
				ResponseBody: &extprocv3.BodyResponse{Response: streamedBody(r.ResponseBody)}}}
		}
		return answerResponseBody
	case *extprocv3.ProcessingRequest_RequestTrailers:
		return answerRequestTrailers
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		return answerResponseTrailers
	}
	return nil
}

// Process serves one ext_proc stream: one HTTP request and its response.
func (s *Server) Process(ps extprocv3.ExternalProcessor_ProcessServer) error {
	s.streams.Add(1)
	defer s.streams.Add(-1)
	st := newStream(s)
	for {
		req, err := ps.Recv()
		now := time.Now()
		if err != nil {
			return st.closed(err, now)
		}
		if st.first {
			st.first = false
			st.modes(req.GetProtocolConfig())
		}
		resp := st.answer(req)
		if resp == nil {
			// A message kind newer than our API: we cannot answer it in
			// kind, so we close cleanly and Envoy carries on without us.
			s.fault(kindUnknownMessage, "unknown ext_proc message kind; stream closed, Envoy continues without it",
				"unknown_bytes", len(req.ProtoReflect().GetUnknown()))
			st.abandon()
			return nil
		}
		sent := now
		if !req.GetObservabilityMode() {
			if err := ps.Send(resp); err != nil {
				return st.closed(err, time.Now())
			}
			sent = time.Now()
		}
		st.observe(req, now, sent)
	}
}

// closed finishes the stream when Recv or Send failed; io.EOF is Envoy's
// clean half-close.
func (st *stream) closed(err error, now time.Time) error {
	s := st.s
	switch {
	case errors.Is(err, io.EOF):
		st.finish(now, true)
		return nil
	case status.Code(err) == codes.ResourceExhausted:
		s.fault(kindOversizeMessage, "ext_proc message over the receive limit; stream ended, call not recorded", "limit_bytes", s.o.MaxRecvBytes, "err", err)
		st.invalid = true
		st.finish(now, false)
		return fmt.Errorf("extproc: receive: %w", err)
	case status.Code(err) == codes.Canceled || status.Code(err) == codes.DeadlineExceeded:
		st.finish(now, false) // Envoy reset the stream: the call broke off
		return nil
	}
	s.fault(kindStream, "ext_proc stream failed; call not recorded", "err", err)
	st.invalid = true
	st.finish(now, false)
	return fmt.Errorf("extproc: stream: %w", err)
}

// modes takes the body modes Envoy announced.
func (st *stream) modes(pc *extprocv3.ProtocolConfiguration) {
	if pc == nil {
		return
	}
	st.reqMode = modeOf(pc.GetRequestBodyMode())
	st.respMode = modeOf(pc.GetResponseBodyMode())
}

func modeOf(m filterv3.ProcessingMode_BodySendMode) BodyMode {
	switch m {
	case filterv3.ProcessingMode_FULL_DUPLEX_STREAMED:
		return BodyFullDuplex
	case filterv3.ProcessingMode_GRPC:
		return BodyGRPC
	}
	return BodyBuffered
}

// headerValue is a header's value as Envoy sends it: raw_value, else value.
func headerValue(h *corev3.HeaderValue) string {
	if rv := h.GetRawValue(); len(rv) > 0 {
		return string(rv)
	}
	return h.GetValue()
}
