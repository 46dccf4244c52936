package tracing

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/inferwatch/inferwatch/record"
	"github.com/inferwatch/inferwatch/sampling"
)

// Sampler is what the tracer asks for decisions; *sampling.Sampler is one.
type Sampler interface {
	Head(k sampling.Key, traceID [16]byte, parent sampling.Parent) sampling.Decision
	Tail(k sampling.Key, model string, total time.Duration, failed bool, headSampled bool) (keep bool, reason string)
	ObserveLatency(model string, total time.Duration)
}

// OTLP protocols for Config.Protocol.
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http/protobuf"
)

// Defaults of Config.
const (
	DefaultKeep          = 200
	DefaultQueueSize     = 2048
	DefaultBatchSize     = 512
	DefaultBatchTimeout  = time.Second
	DefaultExportTimeout = 5 * time.Second
	DefaultServiceName   = "inferwatch"
)

// Config configures a Tracer. Only Sampler is required; with no Endpoint the
// tracer keeps traces in memory only.
type Config struct {
	// Sampler makes the head and tail decisions. Nil keeps every trace,
	// honouring a client's unsampled decision (for tests and demos).
	Sampler Sampler

	// Endpoint is the OTLP receiver: "host:port", or a URL
	// ("http://host:4318/v1/traces", "https://host:4317"). Empty: no export.
	Endpoint string
	// Protocol is ProtocolGRPC (default) or ProtocolHTTP.
	Protocol string
	// Insecure sends clear text to a host:port Endpoint (a URL's scheme
	// decides by itself).
	Insecure bool
	// Headers are sent with every export (e.g. an API key).
	Headers map[string]string

	QueueSize     int           // traces waiting for export, default 2048; more are dropped
	BatchSize     int           // spans per export request, default 512
	BatchTimeout  time.Duration // longest a span waits for its batch to fill, default 1s
	ExportTimeout time.Duration // bound on one export request, default 5s

	// Keep is how many of the last kept traces the tracer holds for the
	// admin API and page, default 200; negative keeps none.
	Keep int

	ServiceName string            // resource service.name, default "inferwatch"
	Resource    map[string]string // more resource attributes (service.instance.id, k8s.pod.name, ...)
	// Upstreams maps a route name to its upstream host:port, for the
	// server.address/server.port of the upstream client span.
	Upstreams map[string]string

	// Host, if set, adds the GPU and kernel facts of each kept call's
	// window to its spans, once the samples covering the call exist
	// (HostSource); HostWait bounds the wait, default DefaultHostWait.
	Host     HostSource
	HostWait time.Duration

	Metrics *metrics.Set // inferwatch_traces_exported_total and friends; nil: a private set
	Logger  *slog.Logger
}

// Tracer propagates trace context on the data path and turns kept call
// records into spans. It is a record.Sink and implements the proxy's
// TraceContext hook.
type Tracer struct {
	sampler   Sampler
	res       *resource.Resource
	upstreams map[string]string
	log       *slog.Logger
	queue     *exportQueue // nil without an endpoint
	store     *store

	// With a HostSource, kept calls wait in settle for their samples.
	host       HostSource
	hostWait   time.Duration
	settle     chan pending
	closing    chan struct{}
	settleDone chan struct{}

	closeOnce sync.Once
	closeErr  error
}

// New builds a Tracer and, with an Endpoint, its exporter; nothing connects
// until the first export. Close flushes and stops it.
func New(c Config) (*Tracer, error) {
	var exp sdktrace.SpanExporter
	if c.Endpoint != "" {
		var err error
		if exp, err = newExporter(c); err != nil {
			return nil, err
		}
	}
	return newTracer(c, exp)
}

// newTracer builds a Tracer around exp (nil: no export).
func newTracer(c Config, exp sdktrace.SpanExporter) (*Tracer, error) {
	if c.Sampler == nil {
		c.Sampler = keepAll{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Metrics == nil {
		c.Metrics = metrics.NewSet()
	}
	if c.Keep == 0 {
		c.Keep = DefaultKeep
	}
	if c.ServiceName == "" {
		c.ServiceName = DefaultServiceName
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", c.ServiceName)}
	for k, v := range c.Resource {
		if k != "service.name" {
			attrs = append(attrs, attribute.String(k, v))
		}
	}
	t := &Tracer{
		sampler:   c.Sampler,
		res:       resource.NewSchemaless(attrs...),
		upstreams: c.Upstreams,
		log:       c.Logger,
		store:     newStore(c.Keep),
	}
	if exp != nil {
		t.queue = newExportQueue(exp, c, t.res, c.Metrics, c.Logger)
	}
	if c.Host != nil {
		t.host, t.hostWait = c.Host, c.HostWait
		if t.hostWait <= 0 {
			t.hostWait = DefaultHostWait
		}
		size := c.QueueSize
		if size <= 0 {
			size = DefaultQueueSize
		}
		t.settle = make(chan pending, size)
		t.closing, t.settleDone = make(chan struct{}), make(chan struct{})
		go t.settleLoop()
	}
	return t, nil
}

// newExporter builds the OTLP exporter for c.Endpoint. Its own retries are
// off: a failed batch is dropped and counted, the queue moves on.
func newExporter(c Config) (sdktrace.SpanExporter, error) {
	url := strings.Contains(c.Endpoint, "://")
	timeout := c.ExportTimeout
	if timeout <= 0 {
		timeout = DefaultExportTimeout
	}
	switch c.Protocol {
	case "", ProtocolGRPC:
		opts := []otlptracegrpc.Option{
			otlptracegrpc.WithTimeout(timeout),
			otlptracegrpc.WithRetry(otlptracegrpc.RetryConfig{Enabled: false}),
		}
		if url {
			opts = append(opts, otlptracegrpc.WithEndpointURL(c.Endpoint))
		} else {
			opts = append(opts, otlptracegrpc.WithEndpoint(c.Endpoint))
			if c.Insecure {
				opts = append(opts, otlptracegrpc.WithInsecure())
			}
		}
		if len(c.Headers) > 0 {
			opts = append(opts, otlptracegrpc.WithHeaders(c.Headers))
		}
		exp, err := otlptracegrpc.New(context.Background(), opts...)
		if err != nil {
			return nil, fmt.Errorf("tracing: OTLP/gRPC exporter for %s: %w", c.Endpoint, err)
		}
		return exp, nil
	case ProtocolHTTP:
		opts := []otlptracehttp.Option{
			otlptracehttp.WithTimeout(timeout),
			otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: false}),
		}
		if url {
			opts = append(opts, otlptracehttp.WithEndpointURL(c.Endpoint))
		} else {
			opts = append(opts, otlptracehttp.WithEndpoint(c.Endpoint))
			if c.Insecure {
				opts = append(opts, otlptracehttp.WithInsecure())
			}
		}
		if len(c.Headers) > 0 {
			opts = append(opts, otlptracehttp.WithHeaders(c.Headers))
		}
		exp, err := otlptracehttp.New(context.Background(), opts...)
		if err != nil {
			return nil, fmt.Errorf("tracing: OTLP/HTTP exporter for %s: %w", c.Endpoint, err)
		}
		return exp, nil
	}
	return nil, fmt.Errorf("tracing: protocol %q: want %q or %q", c.Protocol, ProtocolGRPC, ProtocolHTTP)
}

// Start is the proxy's trace hook (proxy.TraceContext): it runs on the data
// path once per call, after the route is recognised and before the upstream
// request is built. It reads the client's context from h, takes the head
// decision keyed on (route, c.Model), fills c's trace fields and rewrites h
// for the upstream: traceparent names the sidecar's upstream span as the
// parent, tracestate is the sampler's, and B3 headers the client sent are
// rewritten to the same context.
func (t *Tracer) Start(c *record.Call, route string, h http.Header) {
	in, ok := extract(h)
	var parent sampling.Parent
	var flags byte
	if ok {
		c.TraceID = in.traceID
		c.ParentSpanID = in.spanID
		parent = sampling.Parent{Present: in.decided, Sampled: in.sampled, TraceState: in.state}
		if in.random {
			flags |= flagRandom
		}
	} else {
		// The sidecar starts the trace: a random id, so the random flag holds.
		c.TraceID = newTraceID()
		flags |= flagRandom
		if in.decided { // a bare "b3: 0" or "b3: 1"
			parent = sampling.Parent{Present: true, Sampled: in.sampled}
		}
	}
	c.SpanID = newSpanID()
	c.UpstreamSpanID = newSpanID()
	c.TraceRoute, c.TraceModel = route, c.Model
	d := t.sampler.Head(sampling.Key{Route: route, Model: c.Model}, c.TraceID, parent)
	c.TraceSampled, c.TraceProbability, c.TraceState = d.Sampled, d.Probability, d.TraceState
	if d.Sampled {
		flags |= flagSampled
	}
	setHeader(h, hdrTraceparent, formatTraceparent(c.TraceID, c.UpstreamSpanID, flags))
	if d.TraceState != "" {
		setHeader(h, hdrTracestate, d.TraceState)
	} else {
		delete(h, hdrTracestate)
	}
	writeB3(h, in.b3Short, c.TraceID, c.UpstreamSpanID, c.SpanID, d.Sampled)
}

// setHeader sets a header to one value, reusing the request's own
// one-element slice when there is one.
func setHeader(h http.Header, k, v string) {
	if old := h[k]; len(old) == 1 {
		old[0] = v
		return
	}
	h[k] = []string{v}
}

func newTraceID() (id [16]byte) {
	for id == ([16]byte{}) {
		a, b := rand.Uint64(), rand.Uint64()
		for i := range 8 {
			id[i], id[8+i] = byte(a>>(56-8*i)), byte(b>>(56-8*i))
		}
	}
	return id
}

func newSpanID() (id [8]byte) {
	for id == ([8]byte{}) {
		a := rand.Uint64()
		for i := range 8 {
			id[i] = byte(a >> (56 - 8*i))
		}
	}
	return id
}

// Observe is the record.Sink: it runs on the pipeline goroutine for every
// call. It feeds the sampler's latency estimate, asks the tail rules about
// calls the head did not sample, and for kept calls builds the spans, queues
// them for export and remembers the trace.
func (t *Tracer) Observe(c *record.Call) {
	if c.TraceID == ([16]byte{}) {
		return // the call went through a front without the trace hook
	}
	total := c.Total()
	keep, reason := t.sampler.Tail(sampling.Key{Route: c.TraceRoute, Model: c.TraceModel}, c.Model, total, c.Failed(), c.TraceSampled)
	t.sampler.ObserveLatency(c.Model, total)
	if c.TraceSampled {
		reason = ""
	} else if !keep {
		return
	}
	c.TraceKept = true
	if t.host == nil {
		t.emit(c, reason, nil)
		return
	}
	select {
	case t.settle <- pending{c, reason}:
	default: // a backlog: this one joins what has been sampled so far
		t.emit(c, reason, t.host.ForCall(c))
	}
}

// emit builds a kept call's spans, queues them for export and remembers
// the trace.
func (t *Tracer) emit(c *record.Call, reason string, host *record.HostFacts) {
	addr := t.upstreams[c.TraceRoute]
	if c.UpstreamAddr != "" {
		addr = c.UpstreamAddr // learned per call (ext_proc's upstream.address)
	}
	spans := buildSpans(c, host, reason, addr)
	if t.queue != nil {
		t.queue.enqueue(spans)
	}
	if t.store != nil {
		t.store.add(c, reason, spans)
	}
}

// Close joins the calls still waiting for host samples with what has been
// sampled, stops the export queue, sends what it holds until ctx ends, and
// shuts the exporter down. Observe must not be called after Close.
func (t *Tracer) Close(ctx context.Context) error {
	t.closeOnce.Do(func() {
		if t.settle != nil {
			close(t.closing)
			close(t.settle)
			select {
			case <-t.settleDone:
			case <-ctx.Done():
			}
		}
		if t.queue != nil {
			t.closeErr = t.queue.close(ctx)
		}
	})
	return t.closeErr
}

// keepAll is the sampler of a Tracer configured without one.
type keepAll struct{}

func (keepAll) Head(_ sampling.Key, _ [16]byte, p sampling.Parent) sampling.Decision {
	if p.Present {
		return sampling.Decision{Sampled: p.Sampled, TraceState: p.TraceState}
	}
	return sampling.Decision{Sampled: true, Probability: 1}
}

func (keepAll) Tail(sampling.Key, string, time.Duration, bool, bool) (bool, string) {
	return false, ""
}

func (keepAll) ObserveLatency(string, time.Duration) {}
