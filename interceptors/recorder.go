package interceptors

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/inferwatch/inferwatch/admin"
	"github.com/inferwatch/inferwatch/alerting"
	"github.com/inferwatch/inferwatch/internal/callcap"
	"github.com/inferwatch/inferwatch/metricset"
	"github.com/inferwatch/inferwatch/modelload"
	"github.com/inferwatch/inferwatch/record"
	"github.com/inferwatch/inferwatch/sampling"
	"github.com/inferwatch/inferwatch/tracing"
	"github.com/inferwatch/inferwatch/windowstats"
)

// DefaultRoute is the route name in-process records carry.
const DefaultRoute = "inprocess"

// Options configure New. The zero value builds the embedded default: metrics,
// window statistics with the seed's alert rules, and traces kept in memory.
type Options struct {
	Route   string // route name of the records and traces; default "inprocess"
	Logger  *slog.Logger
	APIHint string // "tfserving" or "kserve_v1" for HTTP /v1/models/{m}:predict

	MaxModels     int           // distinct model/version label pairs; default 100
	QueueSize     int           // records waiting for the sinks; default 8192, more are dropped and counted
	Window        time.Duration // window statistics; default 10s
	Rules         alerting.Config
	Notifiers     []alerting.Notifier
	CaptureBytes  int   // HTTP: body prefix kept for the bounded decode; default 1 MiB, negative none
	CaptureBudget int64 // bytes all captures may hold at once; default 64 MiB
	// DecodeSample is the share of HTTP infer calls whose captured bodies
	// are validated byte by byte, timed as the decode phase; the others'
	// tensor data is passed over by its brackets, as the sidecar does.
	// Default 0.01; negative: never.
	DecodeSample float64

	NoTracing            bool
	TraceTargetPerSecond float64           // head-sampled traces per second per route/model; default 100
	OTLPEndpoint         string            // empty keeps traces in memory
	OTLPProtocol         string            // tracing.ProtocolGRPC (default) or tracing.ProtocolHTTP
	Resource             map[string]string // more trace resource attributes

	// Sinks receive every record after the built-in ones.
	Sinks []record.Sink
}

// Recorder is one assembled pipeline — metrics, window statistics and
// alerts, traces — and the fronts that feed it in-process: gRPC interceptors
// (server and client, unary and stream), a stats handler and HTTP middleware.
type Recorder struct {
	o        Options
	metrics  *metricset.Set
	engine   *alerting.Engine
	sampler  *sampling.Sampler // nil without tracing
	tracer   *tracing.Tracer   // nil without tracing
	pipeline *record.Pipeline
	budget   *callcap.Budget
	decode   *callcap.Sampler

	mu     sync.Mutex
	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed bool
}

// New assembles the pipeline. Start runs its clocks (window closes, sampler
// updates); Close delivers what is queued and stops it.
func New(o Options) (*Recorder, error) {
	if o.Route == "" {
		o.Route = DefaultRoute
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.QueueSize <= 0 {
		o.QueueSize = 8192
	}
	if o.Window <= 0 {
		o.Window = 10 * time.Second
	}
	if o.CaptureBytes == 0 {
		o.CaptureBytes = 1 << 20
	}
	if o.DecodeSample == 0 {
		o.DecodeSample = 0.01
	}
	r := &Recorder{o: o, budget: callcap.NewBudget(o.CaptureBudget), decode: callcap.NewSampler(max(o.DecodeSample, 0))}
	r.metrics = metricset.New(metricset.Options{MaxModels: o.MaxModels})
	for _, h := range []map[string]string{alerting.MetricHelp(), sampling.MetricHelp(), tracing.MetricHelp(), modelload.MetricHelp()} {
		r.metrics.AddHelp(h)
	}
	eng, err := alerting.NewEngine(alerting.Options{
		Stats:     windowstats.Options{Window: o.Window, MaxModels: o.MaxModels},
		Config:    o.Rules,
		Metrics:   r.metrics.Metrics(),
		Notifiers: o.Notifiers,
	})
	if err != nil {
		return nil, fmt.Errorf("interceptors: alert engine: %w", err)
	}
	r.engine = eng
	sinks := record.Sinks{r.metrics, modelload.New(r.metrics)} // model loads and cold calls (seen by ext_proc)
	if !o.NoTracing {
		smp, err := sampling.New(sampling.Config{TargetPerSecond: o.TraceTargetPerSecond, Metrics: r.metrics.Metrics()})
		if err != nil {
			return nil, fmt.Errorf("interceptors: trace sampler: %w", err)
		}
		tr, err := tracing.New(tracing.Config{Sampler: smp, Endpoint: o.OTLPEndpoint, Protocol: o.OTLPProtocol,
			Resource: o.Resource, Metrics: r.metrics.Metrics(), Logger: o.Logger})
		if err != nil {
			return nil, fmt.Errorf("interceptors: tracer: %w", err)
		}
		r.sampler, r.tracer = smp, tr
		sinks = append(sinks, tr)
	}
	sinks = append(sinks, eng)
	sinks = append(sinks, o.Sinks...)
	r.pipeline = record.NewPipeline(o.QueueSize, sinks, r.metrics.RecordDropped)
	return r, nil
}

// Pipeline is where the fronts submit records; other fronts (the ext_proc
// server) may submit to it too.
func (r *Recorder) Pipeline() *record.Pipeline { return r.pipeline }

// Metrics is the metric set (/metrics); other packages register theirs on
// Metrics().Metrics().
func (r *Recorder) Metrics() *metricset.Set { return r.metrics }

// Engine is the window statistics and alert rules.
func (r *Recorder) Engine() *alerting.Engine { return r.engine }

// Tracer is the tracer, nil with NoTracing. It is also the trace hook
// fronts call at header time.
func (r *Recorder) Tracer() *tracing.Tracer { return r.tracer }

// Set is the underlying metrics set, for other packages' own metrics.
func (r *Recorder) Set() *metrics.Set { return r.metrics.Metrics() }

// Admin returns the admin endpoints over this pipeline: /metrics, /healthz,
// /readyz (ready while not closed), /api/v1/stats, /api/v1/alerts and, with
// tracing, /api/v1/traces and /traces.
func (r *Recorder) Admin() *admin.Server {
	a := admin.New(func(w io.Writer) {
		r.metrics.WritePrometheus(w)
		metrics.WriteProcessMetrics(w)
	}, func() (bool, []string) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.closed {
			return false, []string{"closed"}
		}
		return true, nil
	})
	a.HandleJSON("/api/v1/stats", func(*http.Request) any { return r.engine.Stats() })
	a.HandleJSON("/api/v1/alerts", func(*http.Request) any { return r.engine.Alerts() })
	if r.tracer != nil {
		a.Handle("GET /api/v1/traces", http.HandlerFunc(r.tracer.HandleTraces))
		a.Handle("GET /traces", http.HandlerFunc(r.tracer.HandlePage))
	}
	return a
}

// Start runs the engine's window clock and the sampler until Close or ctx ends.
func (r *Recorder) Start(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cancel != nil || r.closed {
		return
	}
	ctx, r.cancel = context.WithCancel(ctx)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.engine.Run(ctx)
	}()
	if r.sampler != nil {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.sampler.Run(ctx)
		}()
	}
}

// Close delivers the queued records, flushes traces within ctx and stops.
func (r *Recorder) Close(ctx context.Context) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	cancel := r.cancel
	r.mu.Unlock()
	r.pipeline.Close()
	var err error
	if r.tracer != nil {
		if err = r.tracer.Close(ctx); err != nil {
			err = fmt.Errorf("interceptors: flush traces: %w", err)
		}
	}
	if cancel != nil {
		cancel()
	}
	r.wg.Wait()
	return err
}

// traceStart runs the trace hook, if tracing is on.
func (r *Recorder) traceStart(c *record.Call, h http.Header) {
	if r.tracer != nil {
		r.tracer.Start(c, r.o.Route, h)
	}
}
