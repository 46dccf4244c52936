// Package record defines the call record: one value per inference call that
// every front (proxy, ext_proc, interceptors) fills and every sink (metrics,
// window statistics, traces, recent-call views) reads. It is the spine of the
// pipeline, so it holds data and the arithmetic of phases, nothing else.
package record

import "time"

// Protocol values for Call.Protocol.
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http"
)

// API values for Call.API: which inference API the call was recognised as.
const (
	APIKServeV2   = "kserve_v2"
	APIKServeV1   = "kserve_v1"
	APITFServing  = "tfserving"
	APITorchServe = "torchserve"
	APIOpenAI     = "openai"
	APIUnknown    = "unknown"
)

// ErrorKind says why a call failed on the sidecar's side of the wire. A call
// the upstream answered with an error status has no ErrorKind: its Code says it.
type ErrorKind string

// Error kinds, also the `kind` label of inferwatch_errors_total.
const (
	ErrNone                ErrorKind = ""
	ErrUpstreamUnavailable ErrorKind = "upstream_unavailable" // dial refused, connection reset, upstream gone
	ErrTimeout             ErrorKind = "timeout"              // deadline exceeded while waiting on the upstream
	ErrClientCancel        ErrorKind = "client_cancel"        // the client went away or cancelled
	ErrTooLarge            ErrorKind = "too_large"            // a message exceeded the configured limit
	ErrDecode              ErrorKind = "decode_failure"       // payload did not parse; it was still forwarded
	ErrBadRequest          ErrorKind = "bad_request"          // the client's request broke HTTP framing (a malformed chunked body); answered 400
)

// Readiness is a model readiness answer seen on the wire.
type Readiness uint8

// Readiness values.
const (
	ReadyUnknown Readiness = iota
	ReadyYes
	ReadyNo
)

// Tensor describes one input or output tensor. Contents are never held.
type Tensor struct {
	Name     string
	Datatype string
	Shape    []int64
	Bytes    int64 // bytes of tensor data on the wire (raw or typed contents)
}

// Stage is a duration the server reported for its own work on this call.
type Stage struct {
	Name     string        // e.g. "preprocess", "infer", "postprocess"
	Duration time.Duration // as reported
	Source   string        // "server-timing" (HTTP header or gRPC metadata)
}

// MaxTensors bounds how many tensors a record describes; InputCount and
// OutputCount keep the true totals.
const MaxTensors = 16

// Call is the record of one inference call.
//
// Timestamps are monotonic offsets from Start (time.Since(Start)); zero means
// the point was never reached. The offsets, in the order a unary call meets
// them:
//
//	Start ─ RequestEnd ─ UpstreamSent ─ FirstByte ─ ResponseEnd ─ End
//	        (last req    (last req      (first resp  (last resp     (response
//	         byte read)   byte handed    byte from    byte from      complete to
//	                      upstream)      upstream)    upstream)      client)
//
// UpstreamStart is when the request headers were handed to the upstream
// connection; for streaming calls the request may still be flowing after
// FirstByte.
type Call struct {
	Start time.Time // request headers received; carries the monotonic reading

	RequestEnd    time.Duration
	UpstreamStart time.Duration
	UpstreamSent  time.Duration
	FirstByte     time.Duration
	ResponseEnd   time.Duration
	End           time.Duration

	// Decode is the sidecar's own full parse of the payload, when one ran
	// (sampled for gRPC, bounded capture for HTTP); DecodeRan says it did.
	Decode    time.Duration
	DecodeRan bool
	// Egress is the time spent blocked writing the response to the client.
	Egress time.Duration

	Protocol string // ProtocolGRPC or ProtocolHTTP
	API      string // API* constants
	Method   string // gRPC method name or the API's verb ("infer", "predict", "chat_completions", ...)
	Model    string
	Version  string
	Stream   bool // client, server or bidi streaming, or SSE
	// ClientSide: recorded by a client of the server (the gRPC client
	// interceptors, a client's StatsHandler), not in front of it: the call's
	// span is the client's operation, not a server's.
	ClientSide bool

	Code       string    // gRPC status code name ("OK", "UNAVAILABLE") or HTTP status ("200")
	ErrorKind  ErrorKind // sidecar-observed failure, if any
	DecodeFail bool      // the payload did not parse (independent of ErrorKind)

	RequestBytes     int64 // body bytes read from the client
	ResponseBytes    int64 // body bytes read from the upstream
	RequestMessages  int   // gRPC messages (or 1 for an HTTP body)
	ResponseMessages int

	BatchSize   int // leading dimension of the first input, 0 when unknown
	InputCount  int
	OutputCount int
	Inputs      []Tensor // at most MaxTensors
	Outputs     []Tensor // at most MaxTensors

	Stages []Stage // server-reported stages

	// Ready is a gRPC ModelReady call's answer, as the response said it
	// (ReadyUnknown for other calls, or when the answer was not read). An
	// HTTP readiness call answers with its status code instead.
	Ready Readiness

	// UpstreamAddr is the upstream host:port when a front learns it per
	// call (ext_proc: Envoy's upstream.address attribute); empty otherwise.
	UpstreamAddr string

	ClientRTT   time.Duration // kernel's smoothed RTT of the client connection (TCP_INFO), 0 if unknown
	UpstreamRTT time.Duration // the same for the upstream connection

	// Trace context, filled at header time by the front's trace hook (zero
	// when tracing is off). TraceID and SpanID name the sidecar's span for the
	// call; ParentSpanID is the client's span, zero when the sidecar started
	// the trace; UpstreamSpanID is the sidecar's client span towards the
	// upstream, sent to it as the parent in traceparent.
	TraceID        [16]byte
	SpanID         [8]byte
	ParentSpanID   [8]byte
	UpstreamSpanID [8]byte
	TraceSampled   bool // the head decision
	// TraceKept is set by the tracer sink when it keeps the call's trace
	// (head-sampled, or kept by a tail rule); sinks after it may link to it.
	TraceKept  bool
	TraceState string // tracestate as sent upstream
	// TraceRoute and TraceModel are the sampling key the head decision was
	// made on (the model is known at header time only from an HTTP path);
	// TraceProbability is the head probability that decision used.
	TraceRoute       string
	TraceModel       string
	TraceProbability float64

	// LLM holds a generative call's token timing (OpenAI-compatible
	// streams and completions); nil for other calls.
	LLM *LLM
	// StreamRequests are the requests of a ModelStreamInfer or TorchServe
	// StreamPredictions stream with the responses matched to each (at most
	// MaxStreamRequests; the rest are counted in StreamRequestsDropped).
	StreamRequests        []StreamRequest
	StreamRequestsDropped int

	// Deferred is work a front put off the data path (a sampled full decode
	// of a captured payload); the Pipeline runs it before the sinks.
	Deferred func(c *Call)
}

// Phase names, also the `phase` label of inferwatch_phase_duration_seconds.
const (
	PhaseIngress  = "ingress"
	PhaseDecode   = "decode"
	PhaseUpstream = "upstream"
	PhaseTransfer = "transfer"
	PhaseEgress   = "egress"
)

// Phases lists the phase names in pipeline order.
var Phases = [...]string{PhaseIngress, PhaseDecode, PhaseUpstream, PhaseTransfer, PhaseEgress}

// Ingress is headers received until the last request byte was read.
func (c *Call) Ingress() (time.Duration, bool) {
	return c.RequestEnd, c.RequestEnd > 0
}

// Upstream is the request handed over until the first response byte: the
// server's queue and compute as the sidecar sees it. The request counts as
// handed over when its last byte was written upstream; for streams whose
// response began before the request ended, when its headers were.
func (c *Call) Upstream() (time.Duration, bool) {
	return c.SinceHandedOver(c.FirstByte)
}

// SinceHandedOver is the request handed over until `to` (an offset of a
// response event): from the request's last byte written upstream, or from
// its headers when `to` came first.
func (c *Call) SinceHandedOver(to time.Duration) (time.Duration, bool) {
	if to <= 0 {
		return 0, false
	}
	from := c.UpstreamSent
	if from <= 0 || from > to {
		from = c.UpstreamStart
	}
	if from > to {
		return 0, false
	}
	return to - from, true
}

// Transfer is the first to the last response byte from the upstream.
func (c *Call) Transfer() (time.Duration, bool) {
	if c.FirstByte <= 0 || c.ResponseEnd < c.FirstByte {
		return 0, false
	}
	return c.ResponseEnd - c.FirstByte, true
}

// Total is the call as the client's connection sees it at the sidecar.
func (c *Call) Total() time.Duration { return c.End }

// Phase returns the named phase's duration and whether it was measured.
func (c *Call) Phase(name string) (time.Duration, bool) {
	switch name {
	case PhaseIngress:
		return c.Ingress()
	case PhaseDecode:
		return c.Decode, c.DecodeRan
	case PhaseUpstream:
		return c.Upstream()
	case PhaseTransfer:
		return c.Transfer()
	case PhaseEgress:
		return c.Egress, c.End > 0
	}
	return 0, false
}

// AddInput appends an input tensor, keeping at most MaxTensors, and counts it.
func (c *Call) AddInput(t Tensor) {
	c.InputCount++
	if len(c.Inputs) < MaxTensors {
		c.Inputs = append(c.Inputs, t)
	}
}

// AddOutput appends an output tensor, keeping at most MaxTensors, and counts it.
func (c *Call) AddOutput(t Tensor) {
	c.OutputCount++
	if len(c.Outputs) < MaxTensors {
		c.Outputs = append(c.Outputs, t)
	}
}

// Methods of Triton's model repository extension (inferapi's Method values
// for them): calls that load, unload or list models rather than run one.
const (
	MethodRepositoryIndex  = "repository_index"
	MethodRepositoryLoad   = "repository_load"
	MethodRepositoryUnload = "repository_unload"
)

// Control reports whether the call loads, unloads or lists models rather
// than running one. Its Model is the model it loads or unloads, and its
// duration is that model's load time (modelload), not its latency: the
// per-model latency sinks (call metrics, window statistics) keep it out of
// the model's series.
func (c *Call) Control() bool {
	switch c.Method {
	case MethodRepositoryIndex, MethodRepositoryLoad, MethodRepositoryUnload:
		return true
	}
	return false
}

// Failed reports whether the call ended in an error of either side,
// including a generation the upstream failed mid-stream, after its status.
func (c *Call) Failed() bool {
	if c.ErrorKind != ErrNone && c.ErrorKind != ErrDecode {
		return true
	}
	if c.LLM != nil && c.LLM.Error {
		return true
	}
	switch c.Protocol {
	case ProtocolGRPC:
		return c.Code != "OK"
	default:
		return len(c.Code) == 3 && c.Code[0] >= '5'
	}
}

// HostFacts are the GPU and kernel facts of a call's time window for the
// upstream's processes, attributed by overlap with the sampled intervals
// (gpu/, bpf/). They are joined for kept traces only, once the samples
// covering the call exist (tracing.HostSource), and go into the call
// span's attributes. A group's flag says whether its facts were observed at all:
// absent is not zero.
type HostFacts struct {
	GPU              bool    // NVML samples covered the call
	GPUUtil          float64 // the upstream's devices' SM utilisation, 0..1, overlap-weighted mean
	GPUMemoryUsed    uint64  // the largest memory use seen on those devices, bytes
	NeighbourGPUUtil float64 // other processes' SM utilisation on the same devices, 0..1

	CUDA              bool    // CUDA API probes covered the call
	KernelLaunches    float64 // launches in the window (estimated when duty-cycled)
	LaunchesEstimated bool
	CopyBytes         float64 // host<->device bytes copied
	SyncWait          time.Duration

	Sched         bool          // scheduler probes covered the call
	RunqueueDelay time.Duration // upstream threads' time runnable but waiting for a CPU
	OffCPU        time.Duration
	Throttled     time.Duration // CFS throttling of the upstream's cgroup
	Coverage      float64       // share of the window the samples covered, 0..1
}
