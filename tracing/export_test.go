package tracing

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/VictoriaMetrics/metrics"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	collpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	"github.com/inferwatch/inferwatch/internal/exposition"
	"github.com/inferwatch/inferwatch/record"
)

// metricValue reads one sample of a metrics.Set by its full name; 0 when
// absent.
func metricValue(t testing.TB, set *metrics.Set, name string) float64 {
	t.Helper()
	var b bytes.Buffer
	set.WritePrometheus(&b)
	p, err := exposition.Parse(b.String())
	if err != nil {
		t.Fatal(err)
	}
	v, _ := p.Value(name)
	return v
}

func TestExportSpans(t *testing.T) {
	var got tracetest.SpanStubs
	exp := exporterFunc(func(_ context.Context, s []sdktrace.ReadOnlySpan) error {
		got = append(got, tracetest.SpanStubsFromReadOnlySpans(s)...)
		return nil
	})
	set := metrics.NewSet()
	tr, err := newTracer(Config{Sampler: &fakeSampler{}, Metrics: set, BatchTimeout: 10 * time.Millisecond,
		ServiceName: "sidecar-a", Resource: map[string]string{"k8s.pod.name": "p-1"}}, exp)
	if err != nil {
		t.Fatal(err)
	}
	c := seedCall()
	tr.Observe(c)
	if err := tr.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(got) != 9 {
		t.Fatalf("exported %d spans, want 9: %v", len(got), got)
	}
	call := got[0]
	if call.SpanContext.TraceID() != c.TraceID || call.SpanContext.SpanID() != c.SpanID ||
		call.Parent.SpanID() != c.ParentSpanID || !call.Parent.IsRemote() || !call.SpanContext.IsSampled() {
		t.Errorf("call span context %+v parent %+v", call.SpanContext, call.Parent)
	}
	if !call.StartTime.Equal(c.Start) || !call.EndTime.Equal(c.Start.Add(c.End)) {
		t.Errorf("call span times %v %v", call.StartTime, call.EndTime)
	}
	if call.SpanContext.TraceState().Get("ot") != "th:e666666666666" {
		t.Errorf("tracestate %q", call.SpanContext.TraceState())
	}
	var svc, pod string
	for _, kv := range call.Resource.Attributes() {
		switch kv.Key {
		case "service.name":
			svc = kv.Value.AsString()
		case "k8s.pod.name":
			pod = kv.Value.AsString()
		}
	}
	if svc != "sidecar-a" || pod != "p-1" {
		t.Errorf("resource %v", call.Resource)
	}
	for _, s := range got[1:] {
		if s.Parent.IsRemote() || s.Parent.TraceID() != c.TraceID {
			t.Errorf("%s: parent %+v", s.Name, s.Parent)
		}
	}
	if metricValue(t, set, "inferwatch_traces_exported_total") != 1 || metricValue(t, set, "inferwatch_trace_spans_exported_total") != 9 {
		var b bytes.Buffer
		set.WritePrometheus(&b)
		t.Errorf("metrics:\n%s", b.String())
	}
}

func TestExportBatches(t *testing.T) {
	var batches []int
	exp := exporterFunc(func(_ context.Context, s []sdktrace.ReadOnlySpan) error {
		batches = append(batches, len(s))
		return nil
	})
	tr, _ := newTracer(Config{Sampler: &fakeSampler{}, BatchSize: 20, BatchTimeout: time.Hour}, exp)
	for range 5 {
		tr.Observe(seedCall()) // 9 spans each
	}
	tr.Close(context.Background())
	// 9+9+9 = 27 >= 20: one batch; the last 18 flushed by Close. A trace is
	// never split.
	if len(batches) != 2 || batches[0] != 27 || batches[1] != 18 {
		t.Errorf("batches %v, want [27 18]", batches)
	}
}

// exporterFunc is a SpanExporter from a function.
type exporterFunc func(context.Context, []sdktrace.ReadOnlySpan) error

func (f exporterFunc) ExportSpans(ctx context.Context, s []sdktrace.ReadOnlySpan) error {
	return f(ctx, s)
}
func (exporterFunc) Shutdown(context.Context) error { return nil }

// TestExportSlowBackend: a backend that never answers. Observe never waits,
// the queue stays within its bound, drops are counted, and every trace is
// accounted for as exported or dropped.
func TestExportSlowBackend(t *testing.T) {
	var calls atomic.Int32
	exp := exporterFunc(func(ctx context.Context, _ []sdktrace.ReadOnlySpan) error {
		calls.Add(1)
		<-ctx.Done()
		return ctx.Err()
	})
	set := metrics.NewSet()
	const queue, n = 16, 5000
	tr, _ := newTracer(Config{Sampler: &fakeSampler{}, Metrics: set, QueueSize: queue, BatchSize: 64,
		BatchTimeout: 5 * time.Millisecond, ExportTimeout: 50 * time.Millisecond, Keep: -1, Logger: discardLogger}, exp)
	c := seedCall()
	var worst time.Duration
	start := time.Now()
	for range n {
		t0 := time.Now()
		tr.Observe(c)
		worst = max(worst, time.Since(t0))
		if l := len(tr.queue.ch); l > queue {
			t.Fatalf("queue holds %d > %d", l, queue)
		}
	}
	took := time.Since(start)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	tr.Close(ctx)
	full := metricValue(t, set, `inferwatch_traces_dropped_total{reason="queue_full"}`)
	failed := metricValue(t, set, `inferwatch_traces_dropped_total{reason="export_failed"}`)
	shut := metricValue(t, set, `inferwatch_traces_dropped_total{reason="shutdown"}`)
	exported := metricValue(t, set, "inferwatch_traces_exported_total")
	t.Logf("%d traces in %v (worst Observe %v): dropped queue_full=%v export_failed=%v shutdown=%v, exported=%v, %d export calls",
		n, took, worst, full, failed, shut, exported, calls.Load())
	if full < n-2*queue-64 {
		t.Errorf("queue_full drops %v, want nearly all of %d", full, n)
	}
	if full+failed+shut+exported != n {
		t.Errorf("accounted for %v of %d traces", full+failed+shut+exported, n)
	}
	// An Observe that waited on the stuck backend instead of dropping
	// would leave the queue_full count near zero (checked above); how long
	// the slowest call took is the machine's scheduling, only logged.
}

func TestHandlers(t *testing.T) {
	tr, _ := newTracer(Config{Sampler: &fakeSampler{tail: map[string]string{"resnet50": "slow"}}}, nil)
	for _, c := range []*record.Call{seedCall(), slowHTTPCall(), failedCall()} {
		tr.Observe(c)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/api/v1/traces", tr.HandleTraces)
	mux.HandleFunc("/traces", tr.HandlePage)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	res, err := http.Get(srv.URL + "/traces?limit=1")
	if err != nil {
		t.Fatal(err)
	}
	var page bytes.Buffer
	page.ReadFrom(res.Body)
	res.Body.Close()
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") ||
		!strings.HasPrefix(page.String(), "trace 5b8efff798038103d269b633813fc60c") || strings.Count(page.String(), "\ntrace ") != 0 {
		t.Errorf("page (%s):\n%s", ct, page.String())
	}
	if res, _ := http.Get(srv.URL + "/api/v1/traces?limit=x"); res.StatusCode != http.StatusBadRequest {
		t.Errorf("bad limit: %s", res.Status)
	}

	// The CLI: fetch the JSON and render it as the page does.
	var cli bytes.Buffer
	if err := FetchAndRender(strings.TrimPrefix(srv.URL, "http://"), &cli, 0); err != nil {
		t.Fatal(err)
	}
	var direct bytes.Buffer
	Render(&direct, tr.Traces(0, ""))
	if cli.String() != direct.String() {
		t.Errorf("CLI rendering differs:\n%s\nwant:\n%s", cli.String(), direct.String())
	}
	if err := FetchAndRender(srv.URL+"/nothing-here", &cli, 1); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("FetchAndRender from a wrong URL: %v", err)
	}
	tid := hex.EncodeToString(seedCall().TraceID[:])
	if !strings.Contains(cli.String(), tid) {
		t.Errorf("CLI output lacks %s", tid)
	}
}

// TestExportRecovers: after failures the queue pauses, then exports again
// once the backend answers; what waited in the queue meanwhile is sent.
func TestExportRecovers(t *testing.T) {
	var calls atomic.Int32
	exp := exporterFunc(func(context.Context, []sdktrace.ReadOnlySpan) error {
		if calls.Add(1) <= 2 {
			return errors.New("backend down")
		}
		return nil
	})
	set := metrics.NewSet()
	tr, _ := newTracer(Config{Sampler: &fakeSampler{}, Metrics: set, BatchTimeout: time.Millisecond, Logger: discardLogger}, exp)
	defer tr.Close(context.Background())
	c := seedCall()
	deadline := time.Now().Add(5 * time.Second)
	for metricValue(t, set, "inferwatch_traces_exported_total") == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("nothing exported after the backend came back; %d export calls", calls.Load())
		}
		tr.Observe(c)
		time.Sleep(20 * time.Millisecond)
	}
	failed := metricValue(t, set, `inferwatch_traces_dropped_total{reason="export_failed"}`)
	if calls.Load() < 3 || failed < 2 {
		t.Errorf("%d export calls, %v traces failed", calls.Load(), failed)
	}
	// Paused 100ms then 200ms: the traces observed meanwhile waited in the
	// queue and went out with the first successful batch.
	if got := metricValue(t, set, "inferwatch_traces_exported_total"); got < 5 {
		t.Errorf("first successful batch carried %v traces, want the ones queued during the pauses", got)
	}
}

// otlpReceiver is an in-process OTLP/gRPC trace receiver that keeps the
// span names and string attribute values it was sent.
type otlpReceiver struct {
	collpb.UnimplementedTraceServiceServer
	spans   atomic.Int64
	strings chan string
}

func (o *otlpReceiver) Export(_ context.Context, r *collpb.ExportTraceServiceRequest) (*collpb.ExportTraceServiceResponse, error) {
	for _, rs := range r.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				o.spans.Add(1)
				o.strings <- s.Name
				for _, kv := range s.Attributes {
					if v := kv.GetValue().GetStringValue(); v != "" {
						o.strings <- v
					}
				}
			}
		}
	}
	return &collpb.ExportTraceServiceResponse{}, nil
}

// TestExportInvalidUTF8: a request-derived string that is not UTF-8 (a
// percent-decoded model name, "%ff") must not fail the OTLP export, which
// marshals strings as protobuf strings that must be valid UTF-8. It did:
// the whole batch, the other calls' traces with it, was dropped.
func TestExportInvalidUTF8(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	recv := &otlpReceiver{strings: make(chan string, 1024)}
	srv := grpc.NewServer()
	collpb.RegisterTraceServiceServer(srv, recv)
	go srv.Serve(l)
	defer srv.Stop()

	set := metrics.NewSet()
	tr, err := New(Config{Sampler: &fakeSampler{}, Endpoint: l.Addr().String(), Insecure: true, Metrics: set,
		BatchTimeout: 10 * time.Millisecond, Logger: discardLogger})
	if err != nil {
		t.Fatal(err)
	}
	good, bad := seedCall(), seedCall()
	bad.TraceID[0] ^= 0xff
	bad.Model, bad.Version = "mnist\xff", "1\xc3"
	bad.Inputs[0].Name = "in\xfe"
	tr.Observe(good)
	tr.Observe(bad)
	if err := tr.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	close(recv.strings)
	for s := range recv.strings {
		if !utf8.ValidString(s) {
			t.Errorf("exported a string that is not UTF-8: %q", s)
		}
	}
	if got := recv.spans.Load(); got != 18 {
		t.Errorf("receiver got %d spans, want 18 (two calls of 9); export_failed=%v", got,
			metricValue(t, set, `inferwatch_traces_dropped_total{reason="export_failed"}`))
	}
}
