package tracing

import (
	"net"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/inferwatch/inferwatch/record"
	"github.com/inferwatch/inferwatch/sampling"
)

// maxStageSpans bounds the server-reported stage spans of one call.
const maxStageSpans = 32

// Attribute keys of our own.
const (
	attrRoute         = "inference.route"
	attrModel         = "inference.model"
	attrVersion       = "inference.version"
	attrAPI           = "inference.api"
	attrMethod        = "inference.method"
	attrProtocol      = "inference.protocol"
	attrStream        = "inference.stream"
	attrBatch         = "inference.batch_size"
	attrInputCount    = "inference.input_count"
	attrOutputCount   = "inference.output_count"
	attrInputs        = "inference.inputs"
	attrOutputs       = "inference.outputs"
	attrRequestBytes  = "inference.request_bytes"
	attrResponseBytes = "inference.response_bytes"
	attrRequestMsgs   = "inference.request_messages"
	attrResponseMsgs  = "inference.response_messages"
	attrErrorKind     = "inference.error_kind"
	attrDecodeFailed  = "inference.decode_failed"
	attrClientRTT     = "inference.client_rtt_ms"
	attrUpstreamRTT   = "inference.upstream_rtt_ms"
	attrDeferred      = "inference.deferred"
	attrStageSource   = "inference.stage.source"
	attrStageReported = "inference.stage.reported_ms"
	attrUpstreamPhase = "inference.phase.upstream_ms"
	attrTail          = sampling.TailAttribute
	attrProbability   = "sampling.head_probability"
)

// spanData is one span as the tracer builds it: what the exporter reads
// (through readOnly) and what the in-memory store keeps.
type spanData struct {
	name   string
	id     [8]byte
	parent [8]byte // zero: a root
	kind   trace.SpanKind
	start  time.Time
	end    time.Time
	attrs  []attribute.KeyValue
	status codes.Code
	desc   string
	events []sdktrace.Event
}

// callSpans is the spans of one call, the call span first, with what the
// trace's context and export need.
type callSpans struct {
	traceID    [16]byte
	flags      trace.TraceFlags
	state      trace.TraceState
	remote     bool // the call span's parent is the client's
	upstreamID [8]byte
	spans      []spanData
}

// grpcNames maps a recognised gRPC call's API and method back to the
// service and method on the wire, for span names and rpc.* attributes (the
// record keeps no path, and each pair fixes both).
var grpcNames = map[[2]string][2]string{
	{record.APIKServeV2, "infer"}:                       {kserveService, "ModelInfer"},
	{record.APIKServeV2, "stream_infer"}:                {kserveService, "ModelStreamInfer"},
	{record.APIKServeV2, "model_metadata"}:              {kserveService, "ModelMetadata"},
	{record.APIKServeV2, "model_ready"}:                 {kserveService, "ModelReady"},
	{record.APIKServeV2, "server_live"}:                 {kserveService, "ServerLive"},
	{record.APIKServeV2, "server_ready"}:                {kserveService, "ServerReady"},
	{record.APIKServeV2, "server_metadata"}:             {kserveService, "ServerMetadata"},
	{record.APIKServeV2, "statistics"}:                  {kserveService, "ModelStatistics"},
	{record.APIKServeV2, record.MethodRepositoryIndex}:  {kserveService, "RepositoryIndex"},
	{record.APIKServeV2, record.MethodRepositoryLoad}:   {kserveService, "RepositoryModelLoad"},
	{record.APIKServeV2, record.MethodRepositoryUnload}: {kserveService, "RepositoryModelUnload"},

	{record.APITFServing, "predict"}:         {tfPredictionService, "Predict"},
	{record.APITFServing, "classify"}:        {tfPredictionService, "Classify"},
	{record.APITFServing, "regress"}:         {tfPredictionService, "Regress"},
	{record.APITFServing, "multi_inference"}: {tfPredictionService, "MultiInference"},
	{record.APITFServing, "model_metadata"}:  {tfPredictionService, "GetModelMetadata"},
	{record.APITFServing, "model_ready"}:     {"tensorflow.serving.ModelService", "GetModelStatus"},

	{record.APITorchServe, "predict"}:                     {tsInferenceService, "Predictions"},
	{record.APITorchServe, "health"}:                      {tsInferenceService, "Ping"},
	{record.APITorchServe, "model_metadata"}:              {tsManagementService, "DescribeModel"},
	{record.APITorchServe, record.MethodRepositoryUnload}: {tsManagementService, "UnregisterModel"},
	// stream_predict is StreamPredictions or StreamPredictions2: no method.
	{record.APITorchServe, "stream_predict"}: {tsInferenceService, ""},
}

const (
	kserveService       = "inference.GRPCInferenceService"
	tfPredictionService = "tensorflow.serving.PredictionService"
	tsInferenceService  = "org.pytorch.serve.grpc.inference.InferenceAPIsService"
	tsManagementService = "org.pytorch.serve.grpc.management.ManagementAPIsService"
)

// httpRoute derives the HTTP method and route template of a recognised HTTP
// call from its API and method: the record keeps no path, and the route
// fixes both for every recognised form. ok is false for unknown calls.
func httpRoute(c *record.Call) (method, route string, ok bool) {
	ver := func(s string) string {
		if c.Version != "" {
			return s
		}
		return ""
	}
	switch c.API {
	case record.APIKServeV2:
		switch c.Method {
		case "infer", "generate", "generate_stream":
			return "POST", "/v2/models/{model}" + ver("/versions/{version}") + "/" + c.Method, true
		case "model_metadata":
			return "GET", "/v2/models/{model}" + ver("/versions/{version}"), true
		case "model_ready":
			return "GET", "/v2/models/{model}" + ver("/versions/{version}") + "/ready", true
		case "statistics":
			if c.Model == "" {
				return "GET", "/v2/models/stats", true
			}
			return "GET", "/v2/models/{model}" + ver("/versions/{version}") + "/stats", true
		case "server_live":
			return "GET", "/v2/health/live", true
		case "server_ready":
			return "GET", "/v2/health/ready", true
		case "server_metadata":
			return "GET", "/v2", true
		}
	case record.APIKServeV1, record.APITFServing:
		base := "/v1/models/{model}" + ver("/versions/{version}")
		switch c.Method {
		case "predict", "explain", "classify", "regress":
			return "POST", base + ":" + c.Method, true
		case "model_ready":
			return "GET", base, true
		case "model_metadata":
			return "GET", base + "/metadata", true
		}
	case record.APITorchServe:
		switch c.Method {
		case "predict":
			return "POST", "/predictions/{model}" + ver("/{version}"), true
		case "explain":
			return "POST", "/explanations/{model}" + ver("/{version}"), true
		case "health":
			return "GET", "/ping", true
		}
	case record.APIOpenAI:
		switch c.Method {
		case "completions":
			return "POST", "/v1/completions", true
		case "chat_completions":
			return "POST", "/v1/chat/completions", true
		case "embeddings":
			return "POST", "/v1/embeddings", true
		case "responses":
			return "POST", "/v1/responses", true
		}
	}
	return "", "", false
}

// callName names the call span: "inference ModelInfer mnist-mlp" for gRPC,
// "POST /v2/models/{model}/infer" for HTTP (OTel's "{method} {route}").
func callName(c *record.Call) string {
	if c.Protocol == record.ProtocolGRPC {
		m := grpcNames[[2]string{c.API, c.Method}][1]
		if m == "" {
			m = c.Method
		}
		if c.Model != "" {
			return "inference " + m + " " + c.Model
		}
		return "inference " + m
	}
	if method, route, ok := httpRoute(c); ok {
		return method + " " + route
	}
	return "HTTP"
}

// tensorStrings describes tensors as "name DTYPE [d0,d1]", never contents.
func tensorStrings(ts []record.Tensor) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		var b strings.Builder
		b.WriteString(t.Name)
		b.WriteByte(' ')
		b.WriteString(t.Datatype)
		b.WriteString(" [")
		for j, d := range t.Shape {
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.FormatInt(d, 10))
		}
		b.WriteByte(']')
		out[i] = b.String()
	}
	return out
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// callAttributes are the call span's attributes: OTel semantic conventions
// for rpc.* / http.*, ours under inference.*.
func callAttributes(c *record.Call, host *record.HostFacts, tail string) []attribute.KeyValue {
	a := make([]attribute.KeyValue, 0, 32)
	if c.Protocol == record.ProtocolGRPC {
		a = append(a, attribute.String("rpc.system", "grpc"))
		if n, ok := grpcNames[[2]string{c.API, c.Method}]; ok {
			a = append(a, attribute.String("rpc.service", n[0]))
			if n[1] != "" {
				a = append(a, attribute.String("rpc.method", n[1]))
			}
		} else if c.API == record.APIKServeV2 {
			a = append(a, attribute.String("rpc.service", kserveService))
		}
		if n, ok := record.GRPCCodeNumber(c.Code); ok {
			a = append(a, attribute.Int("rpc.grpc.status_code", n))
		}
	} else {
		if method, route, ok := httpRoute(c); ok {
			a = append(a, attribute.String("http.request.method", method), attribute.String("http.route", route))
		}
		if n, err := strconv.Atoi(c.Code); err == nil {
			a = append(a, attribute.Int("http.response.status_code", n))
		}
	}
	if et, ok := callError(c); ok {
		a = append(a, attribute.String("error.type", et))
	}
	a = append(a,
		attribute.String(attrRoute, c.TraceRoute),
		attribute.String(attrAPI, c.API),
		attribute.String(attrMethod, c.Method),
		attribute.String(attrProtocol, c.Protocol),
	)
	if c.Model != "" {
		a = append(a, attribute.String(attrModel, c.Model))
	}
	if c.Version != "" {
		a = append(a, attribute.String(attrVersion, c.Version))
	}
	if c.Stream {
		a = append(a, attribute.Bool(attrStream, true))
	}
	if c.BatchSize > 0 {
		a = append(a, attribute.Int(attrBatch, c.BatchSize))
	}
	if c.InputCount > 0 || c.OutputCount > 0 {
		a = append(a, attribute.Int(attrInputCount, c.InputCount), attribute.Int(attrOutputCount, c.OutputCount))
	}
	if len(c.Inputs) > 0 {
		a = append(a, attribute.StringSlice(attrInputs, tensorStrings(c.Inputs)))
	}
	if len(c.Outputs) > 0 {
		a = append(a, attribute.StringSlice(attrOutputs, tensorStrings(c.Outputs)))
	}
	a = append(a,
		attribute.Int64(attrRequestBytes, c.RequestBytes),
		attribute.Int64(attrResponseBytes, c.ResponseBytes),
		attribute.Int(attrRequestMsgs, c.RequestMessages),
		attribute.Int(attrResponseMsgs, c.ResponseMessages),
	)
	if c.ErrorKind != record.ErrNone {
		a = append(a, attribute.String(attrErrorKind, string(c.ErrorKind)))
	}
	if c.DecodeFail {
		a = append(a, attribute.Bool(attrDecodeFailed, true))
	}
	if c.ClientRTT > 0 {
		a = append(a, attribute.Float64(attrClientRTT, ms(c.ClientRTT)))
	}
	if c.UpstreamRTT > 0 {
		a = append(a, attribute.Float64(attrUpstreamRTT, ms(c.UpstreamRTT)))
	}
	a = llmAttributes(a, c)
	if len(c.StreamRequests) > 0 {
		a = append(a, attribute.Int(attrStreamRequests, len(c.StreamRequests)+c.StreamRequestsDropped))
	}
	a = appendHost(a, host)
	if tail != "" {
		a = append(a, attribute.String(attrTail, tail))
	} else if c.TraceProbability > 0 {
		a = append(a, attribute.Float64(attrProbability, c.TraceProbability))
	}
	return a
}

// appendHost adds the GPU and kernel facts of the call's window; a group
// that was not observed adds nothing (absent, not zero).
func appendHost(a []attribute.KeyValue, h *record.HostFacts) []attribute.KeyValue {
	if h == nil {
		return a
	}
	if h.GPU {
		a = append(a,
			attribute.Float64("inference.gpu.utilization", h.GPUUtil),
			attribute.Float64("inference.gpu.neighbour_utilization", h.NeighbourGPUUtil),
			attribute.Int64("inference.gpu.memory_used_bytes", int64(h.GPUMemoryUsed)))
	}
	if h.CUDA {
		a = append(a,
			attribute.Float64("inference.cuda.kernel_launches", h.KernelLaunches),
			attribute.Bool("inference.cuda.launches_estimated", h.LaunchesEstimated),
			attribute.Float64("inference.cuda.copy_bytes", h.CopyBytes),
			attribute.Float64("inference.cuda.sync_wait_ms", ms(h.SyncWait)))
	}
	if h.Sched {
		a = append(a,
			attribute.Float64("inference.sched.runqueue_delay_ms", ms(h.RunqueueDelay)),
			attribute.Float64("inference.sched.offcpu_ms", ms(h.OffCPU)),
			attribute.Float64("inference.sched.throttled_ms", ms(h.Throttled)))
	}
	return append(a, attribute.Float64("inference.host.coverage", h.Coverage))
}

// clampSpan keeps [from, to] inside [lo, hi] and ordered.
func clampSpan(from, to, lo, hi time.Duration) (time.Duration, time.Duration) {
	from = min(max(from, lo), hi)
	to = min(max(to, from), hi)
	return from, to
}

// buildSpans lays out the spans of one call on its measured timeline:
// every timestamp is c.Start plus a recorded offset.
//
//   - the call (SERVER): 0 to End; its parent is the client's span.
//   - ingress: 0 to RequestEnd.
//   - upstream (CLIENT, id UpstreamSpanID, the parent the upstream was
//     given): from UpstreamStart, when the request headers were handed to the
//     upstream connection and the upstream could begin its own span, to
//     FirstByte. The upstream phase proper starts later, when the last
//     request byte was sent (attribute inference.phase.upstream_ms).
//   - server-reported stages, children of upstream: back to back in reported
//     order from the upstream phase's start, cut at FirstByte.
//   - transfer: FirstByte to ResponseEnd.
//   - egress: the time blocked writing to the client, accumulated over the
//     response; placed ending at the end of the call.
//   - decode: it ran after the call on the pipeline goroutine, so it is
//     placed right after the call's end with its measured duration
//     (inference.deferred=true), outside its parent's interval.
//
// Children are clamped into the call's interval (decode excepted).
func buildSpans(c *record.Call, host *record.HostFacts, tail, upstreamAddr string) *callSpans {
	cs := &callSpans{traceID: c.TraceID, upstreamID: c.UpstreamSpanID, remote: c.ParentSpanID != [8]byte{}}
	cs.flags = trace.TraceFlags(0).WithSampled(true)
	state := c.TraceState
	if tail != "" {
		// Kept by the tail rules only: without the head's threshold, so a
		// backend does not count it with the head's adjusted count.
		state = dropThreshold(state)
	}
	if ts, err := trace.ParseTraceState(state); err == nil {
		cs.state = ts
	}
	at := func(d time.Duration) time.Time { return c.Start.Add(d) }
	end := max(c.End, 0)
	status, desc := codes.Unset, ""
	if _, ok := callError(c); ok {
		status, desc = codes.Error, c.Code
		if c.ErrorKind != record.ErrNone {
			desc = string(c.ErrorKind) + " " + c.Code
		}
	}
	n := 6 + min(len(c.Stages), maxStageSpans)
	cs.spans = make([]spanData, 0, n)
	cs.spans = append(cs.spans, spanData{
		name: callName(c), id: c.SpanID, parent: c.ParentSpanID, kind: callKind(c),
		start: c.Start, end: at(end), attrs: callAttributes(c, host, tail), status: status, desc: desc,
		events: llmEvents(c),
	})
	child := func(name string, id [8]byte, kind trace.SpanKind, from, to time.Duration, attrs ...attribute.KeyValue) {
		from, to = clampSpan(from, to, 0, end)
		if id == ([8]byte{}) {
			id = newSpanID()
		}
		cs.spans = append(cs.spans, spanData{name: name, id: id, parent: c.SpanID, kind: kind,
			start: at(from), end: at(to), attrs: attrs})
	}
	if d, ok := c.Ingress(); ok {
		child(record.PhaseIngress, [8]byte{}, trace.SpanKindInternal, 0, d)
	}
	if c.FirstByte > 0 || c.UpstreamStart > 0 {
		up := c.FirstByte
		if up <= 0 {
			up = end // no response: the upstream exchange failed at End
		}
		var attrs []attribute.KeyValue
		if upstreamAddr != "" {
			if host, port, err := net.SplitHostPort(upstreamAddr); err == nil {
				attrs = append(attrs, attribute.String("server.address", host))
				if p, err := strconv.Atoi(port); err == nil {
					attrs = append(attrs, attribute.Int("server.port", p))
				}
			}
		}
		if c.Protocol == record.ProtocolGRPC {
			attrs = append(attrs, attribute.String("rpc.system", "grpc"))
		}
		phaseFrom := c.UpstreamStart
		if d, ok := c.Upstream(); ok {
			phaseFrom = c.FirstByte - d
			attrs = append(attrs, attribute.Float64(attrUpstreamPhase, ms(d)))
		}
		et, failed := upstreamError(c)
		if failed {
			attrs = append(attrs, attribute.String("error.type", et))
		}
		upIdx := len(cs.spans)
		child(record.PhaseUpstream, c.UpstreamSpanID, trace.SpanKindClient, c.UpstreamStart, up, attrs...)
		if failed {
			cs.spans[upIdx].status, cs.spans[upIdx].desc = codes.Error, et
		}
		cs.addStages(c, phaseFrom, up, end)
	}
	if d, ok := c.Transfer(); ok {
		child(record.PhaseTransfer, [8]byte{}, trace.SpanKindInternal, c.FirstByte, c.FirstByte+d)
	}
	if c.FirstByte > 0 && c.End > 0 {
		child(record.PhaseEgress, [8]byte{}, trace.SpanKindInternal, end-c.Egress, end)
	}
	if c.DecodeRan {
		cs.spans = append(cs.spans, spanData{name: record.PhaseDecode, id: newSpanID(), parent: c.SpanID,
			kind: trace.SpanKindInternal, start: at(end), end: at(end + max(c.Decode, 0)),
			attrs: []attribute.KeyValue{attribute.Bool(attrDeferred, true)}})
	}
	cs.validUTF8()
	return cs
}

// validUTF8 replaces the bytes that are not UTF-8 in the spans' strings with
// U+FFFD. OTLP carries names, descriptions and attribute values as protobuf
// strings, which must be valid UTF-8: one bad byte fails the marshalling of
// a whole export request, and every trace in the batch is dropped with it.
// Request-derived strings can hold anything (a model name percent-decoded
// from the path, "%ff").
func (cs *callSpans) validUTF8() {
	for i := range cs.spans {
		s := &cs.spans[i]
		s.name, s.desc = validString(s.name), validString(s.desc)
		validAttrs(s.attrs)
		for j := range s.events {
			s.events[j].Name = validString(s.events[j].Name)
			validAttrs(s.events[j].Attributes)
		}
	}
}

func validString(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// validAttrs makes the string values of a valid UTF-8 in place.
func validAttrs(a []attribute.KeyValue) {
	for i, kv := range a {
		switch kv.Value.Type() {
		case attribute.STRING:
			if v := kv.Value.AsString(); !utf8.ValidString(v) {
				a[i] = attribute.String(string(kv.Key), validString(v))
			}
		case attribute.STRINGSLICE:
			vs := kv.Value.AsStringSlice()
			bad := false
			for j, v := range vs {
				if !utf8.ValidString(v) {
					vs[j], bad = validString(v), true
				}
			}
			if bad {
				a[i] = attribute.StringSlice(string(kv.Key), vs)
			}
		}
	}
}

// addStages lays the server-reported stages on [from, to] of the upstream
// span, back to back in reported order; a stage past to is cut there, and
// one that would start past it is left out (its reported duration stays in
// inference.stage.reported_ms of the stages shown).
func (cs *callSpans) addStages(c *record.Call, from, to, end time.Duration) {
	from, to = clampSpan(from, to, 0, end)
	at := from
	for i, s := range c.Stages {
		if i == maxStageSpans || at >= to && i > 0 {
			break
		}
		e := min(at+max(s.Duration, 0), to)
		cs.spans = append(cs.spans, spanData{
			name: s.Name, id: newSpanID(), parent: c.UpstreamSpanID, kind: trace.SpanKindInternal,
			start: c.Start.Add(at), end: c.Start.Add(e),
			attrs: []attribute.KeyValue{
				attribute.String(attrStageSource, s.Source),
				attribute.Float64(attrStageReported, ms(s.Duration)),
			},
		})
		at = e
	}
}

// dropThreshold removes the th sub-key from the "ot" member of a
// tracestate, leaving the rest as it was.
func dropThreshold(ts string) string {
	if !strings.Contains(ts, "th:") {
		return ts
	}
	members := strings.Split(ts, ",")
	out := members[:0]
	for _, m := range members {
		k, v, ok := strings.Cut(strings.TrimSpace(m), "=")
		if !ok || k != "ot" {
			out = append(out, m)
			continue
		}
		var keep []string
		for _, sub := range strings.Split(v, ";") {
			if !strings.HasPrefix(sub, "th:") {
				keep = append(keep, sub)
			}
		}
		if len(keep) > 0 {
			out = append(out, "ot="+strings.Join(keep, ";"))
		}
	}
	return strings.Join(out, ",")
}

var scope = instrumentation.Scope{Name: "github.com/inferwatch/inferwatch/tracing"}

// readOnly presents one spanData to an sdktrace.SpanExporter. Embedding the
// interface satisfies its unexported method; every method is defined here.
type readOnly struct {
	sdktrace.ReadOnlySpan
	cs  *callSpans
	s   *spanData
	res *resource.Resource
}

func (r readOnly) Name() string { return r.s.name }

func (r readOnly) SpanContext() trace.SpanContext {
	return trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: r.cs.traceID, SpanID: r.s.id, TraceFlags: r.cs.flags, TraceState: r.cs.state,
	})
}

func (r readOnly) Parent() trace.SpanContext {
	if r.s.parent == ([8]byte{}) {
		return trace.SpanContext{}
	}
	return trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: r.cs.traceID, SpanID: r.s.parent, TraceFlags: r.cs.flags,
		Remote: r.cs.remote && r.s == &r.cs.spans[0], // only the call span's parent is the client's
	})
}

func (r readOnly) SpanKind() trace.SpanKind         { return r.s.kind }
func (r readOnly) StartTime() time.Time             { return r.s.start }
func (r readOnly) EndTime() time.Time               { return r.s.end }
func (r readOnly) Attributes() []attribute.KeyValue { return r.s.attrs }
func (r readOnly) Links() []sdktrace.Link           { return nil }
func (r readOnly) Events() []sdktrace.Event         { return r.s.events }
func (r readOnly) Status() sdktrace.Status {
	return sdktrace.Status{Code: r.s.status, Description: r.s.desc}
}
func (r readOnly) InstrumentationScope() instrumentation.Scope { return scope }

// InstrumentationLibrary is the deprecated twin of InstrumentationScope that
// sdktrace.ReadOnlySpan still requires.
//
//lint:ignore SA1019 required by sdktrace.ReadOnlySpan
func (r readOnly) InstrumentationLibrary() instrumentation.Library { return scope }
func (r readOnly) Resource() *resource.Resource                    { return r.res }
func (r readOnly) DroppedAttributes() int                          { return 0 }
func (r readOnly) DroppedLinks() int                               { return 0 }
func (r readOnly) DroppedEvents() int                              { return 0 }
func (r readOnly) ChildSpanCount() int                             { return 0 }

// errStream is the error.type of a generation the upstream failed after
// its status had gone out (an error event in the stream).
const errStream = "stream_error"

// serverError says whether the call span, a server span, is in error, and
// its error.type, by OpenTelemetry's conventions: a gRPC server is in error
// for UNKNOWN, DEADLINE_EXCEEDED, UNIMPLEMENTED, INTERNAL, UNAVAILABLE and
// DATA_LOSS, an HTTP server for 5xx; a client's mistake (NOT_FOUND, 400),
// its cancel, or the sidecar's size limit is not the server failing, and
// marking those red would count them in a backend's server error rate.
// (record.Call.Failed, wider, still decides tail sampling and /traces.)
func serverError(c *record.Call) (string, bool) {
	if c.ErrorKind == record.ErrUpstreamUnavailable || c.ErrorKind == record.ErrTimeout {
		return string(c.ErrorKind), true
	}
	if c.LLM != nil && c.LLM.Error {
		return errStream, true
	}
	if c.Protocol == record.ProtocolGRPC {
		switch c.Code {
		case "UNKNOWN", "DEADLINE_EXCEEDED", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS":
			return c.Code, true
		}
		return "", false
	}
	if len(c.Code) == 3 && c.Code[0] == '5' {
		return c.Code, true
	}
	return "", false
}

// callKind is the call span's kind: a server's in front of a server; the
// client's own operation (internal) for a record a client made, whose
// upstream child is the client span the server's span descends from.
func callKind(c *record.Call) trace.SpanKind {
	if c.ClientSide {
		return trace.SpanKindInternal
	}
	return trace.SpanKindServer
}

// callError is the call span's error: serverError in front of a server;
// for a record a client made, a client's (upstreamError, and the client's
// own cancel or deadline too: the semantic conventions make every gRPC
// code but OK a client span's error).
func callError(c *record.Call) (string, bool) {
	if !c.ClientSide {
		return serverError(c)
	}
	if c.Protocol == record.ProtocolGRPC && c.Code != "" && c.Code != "OK" {
		if c.ErrorKind == record.ErrUpstreamUnavailable || c.ErrorKind == record.ErrTimeout {
			return string(c.ErrorKind), true
		}
		return c.Code, true
	}
	return upstreamError(c)
}

// upstreamError is serverError for the upstream span, the sidecar's client
// call: in error for whatever failure the upstream answered (any gRPC code
// but OK, HTTP 4xx and 5xx) or the exchange itself failing; not when the
// code is the client's cancel or the sidecar's own limit.
func upstreamError(c *record.Call) (string, bool) {
	switch c.ErrorKind {
	case record.ErrUpstreamUnavailable, record.ErrTimeout:
		return string(c.ErrorKind), true
	case record.ErrNone, record.ErrDecode:
	default:
		return "", false
	}
	if c.LLM != nil && c.LLM.Error {
		return errStream, true
	}
	if c.Protocol == record.ProtocolGRPC {
		return c.Code, c.Code != "" && c.Code != "OK"
	}
	return c.Code, len(c.Code) == 3 && c.Code[0] >= '4'
}
