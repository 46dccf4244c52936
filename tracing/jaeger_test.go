package tracing

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/inferwatch/inferwatch/internal/testenv"
	"github.com/inferwatch/inferwatch/proto/inference"
	"github.com/inferwatch/inferwatch/sampling"
)

// jaeger is a running Jaeger v2 all-in-one (memory storage) on free
// loopback ports.
type jaeger struct {
	otlpGRPC, otlpHTTP, query string
}

// jaegerConfig is the whole collector configuration: the OTLP receiver on
// both protocols, memory storage, the query API, no other listeners.
const jaegerConfig = `service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: mem
    enable_tracing: false
    max_clock_skew_adjust: 0s
    http:
      endpoint: %[1]s
    grpc:
      endpoint: %[2]s
  jaeger_storage:
    backends:
      mem:
        memory:
          max_traces: 10000
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: %[3]s
      http:
        endpoint: %[4]s
processors:
  batch:
    timeout: 50ms
exporters:
  jaeger_storage_exporter:
    trace_storage: mem
`

// jaegerBinary finds Jaeger at $INFERWATCH_JAEGER or <repo>/bin/jaeger
// (built from tools/, see tools/README.md).
func jaegerBinary(t *testing.T) string {
	t.Helper()
	return testenv.ToolBinary(t, "..", "jaeger", "INFERWATCH_JAEGER", "cd tools && go build -o ../bin/jaeger github.com/jaegertracing/jaeger/cmd/jaeger")
}

func startJaeger(t *testing.T) *jaeger {
	t.Helper()
	bin := jaegerBinary(t)
	j := &jaeger{query: testenv.FreeAddr(t), otlpGRPC: testenv.FreeAddr(t), otlpHTTP: testenv.FreeAddr(t)}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "jaeger.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, jaegerConfig, j.query, testenv.FreeAddr(t), j.otlpGRPC, j.otlpHTTP), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd := exec.Command(bin, "--config", "file:"+cfg)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("jaeger output:\n%s", out.String())
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case err := <-exited:
			t.Fatalf("jaeger exited: %v\n%s", err, out.String())
		default:
		}
		res, err := http.Get("http://" + j.query + "/api/services")
		if err == nil {
			res.Body.Close()
			if c, err := net.DialTimeout("tcp", j.otlpGRPC, time.Second); err == nil {
				c.Close()
				if res.StatusCode == 200 {
					return j
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("jaeger not ready after 60s\n%s", out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Jaeger's query API (/api/traces/{id}) answer, the parts the test reads.
type jaegerTrace struct {
	TraceID string `json:"traceID"`
	Spans   []struct {
		TraceID       string `json:"traceID"`
		SpanID        string `json:"spanID"`
		OperationName string `json:"operationName"`
		References    []struct {
			RefType string `json:"refType"`
			TraceID string `json:"traceID"`
			SpanID  string `json:"spanID"`
		} `json:"references"`
		StartTime int64 `json:"startTime"` // µs since the epoch
		Duration  int64 `json:"duration"`  // µs
		Tags      []struct {
			Key   string `json:"key"`
			Value any    `json:"value"`
		} `json:"tags"`
		ProcessID string `json:"processID"`
	} `json:"spans"`
	Processes map[string]struct {
		ServiceName string `json:"serviceName"`
	} `json:"processes"`
}

// getTrace polls Jaeger until the trace holds want spans.
func (j *jaeger) getTrace(t *testing.T, id string, want int) *jaegerTrace {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last string
	for {
		res, err := http.Get("http://" + j.query + "/api/traces/" + id)
		if err == nil {
			var body struct {
				Data []jaegerTrace `json:"data"`
			}
			b := new(bytes.Buffer)
			b.ReadFrom(res.Body)
			res.Body.Close()
			last = b.String()
			if res.StatusCode == 200 && json.Unmarshal(b.Bytes(), &body) == nil && len(body.Data) == 1 && len(body.Data[0].Spans) >= want {
				return &body.Data[0]
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace %s: fewer than %d spans in Jaeger after 30s; last answer: %.2000s", id, want, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// mdCarrier lets the OTel propagator read gRPC metadata.
type mdCarrier metadata.MD

func (m mdCarrier) Get(k string) string {
	if v := metadata.MD(m).Get(k); len(v) > 0 {
		return v[0]
	}
	return ""
}
func (m mdCarrier) Set(k, v string) { metadata.MD(m).Set(k, v) }
func (m mdCarrier) Keys() []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestJaegerEndToEnd is the Done-when: calls go through the sidecar
// to real upstreams (HTTP and gRPC) that trace themselves with the OTel SDK
// from the propagated context; Jaeger then holds, per call, one trace with
// the sidecar's spans and the upstream's span, the phases inside the call,
// and the upstream's span a child of the sidecar's upstream span.
func TestJaegerEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Jaeger")
	}
	j := startJaeger(t)
	ctx := context.Background()

	// The upstreams' own tracing: the OTel SDK, W3C propagation, OTLP/HTTP.
	upExp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpoint(j.otlpHTTP), otlptracehttp.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	upTP := sdktrace.NewTracerProvider(sdktrace.WithBatcher(upExp, sdktrace.WithBatchTimeout(50*time.Millisecond)),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", "model-server"))))
	upTracer := upTP.Tracer("model-server")
	prop := propagation.TraceContext{}
	var mu sync.Mutex
	seen := map[string]string{} // trace id -> traceparent the upstream got

	httpUp := httpModel(t, func(r *http.Request) func() {
		ctx := prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		mu.Lock()
		seen[trace.SpanContextFromContext(ctx).TraceID().String()] = r.Header.Get("Traceparent")
		mu.Unlock()
		_, span := upTracer.Start(ctx, "model-server infer", trace.WithSpanKind(trace.SpanKindServer))
		time.Sleep(2 * time.Millisecond) // the model's work
		return func() { span.End() }
	})
	grpcUp := startGRPCModel(t, grpcModel{onCall: func(ctx context.Context, md metadata.MD) func() {
		ctx = prop.Extract(ctx, mdCarrier(md))
		mu.Lock()
		seen[trace.SpanContextFromContext(ctx).TraceID().String()] = strings.Join(md.Get("traceparent"), ",")
		mu.Unlock()
		_, span := upTracer.Start(ctx, "model-server ModelInfer", trace.WithSpanKind(trace.SpanKindServer))
		time.Sleep(2 * time.Millisecond)
		return func() { span.End() }
	}})

	// The sidecar: the real sampler (a new key starts at the ceiling), OTLP/gRPC.
	smp, err := sampling.New(sampling.Config{})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := New(Config{Sampler: smp, Endpoint: j.otlpGRPC, Insecure: true, BatchTimeout: 50 * time.Millisecond,
		Upstreams: map[string]string{"kserve-http": httpUp, "triton-grpc": grpcUp}})
	if err != nil {
		t.Fatal(err)
	}
	// A second sidecar exporting over OTLP/HTTP, for the other protocol.
	trHTTP, err := New(Config{Sampler: smp, Endpoint: "http://" + j.otlpHTTP + "/v1/traces", Protocol: ProtocolHTTP,
		BatchTimeout: 50 * time.Millisecond, ServiceName: "inferwatch-b"})
	if err != nil {
		t.Fatal(err)
	}
	sHTTP := startSidecar(t, "kserve-http", httpUp, false, tr)
	sGRPC := startSidecar(t, "triton-grpc", grpcUp, true, tr)
	sB := startSidecar(t, "kserve-http-b", httpUp, false, trHTTP)

	// 1. HTTP with the client's W3C context, sampled.
	clientTID := "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpan := "00f067aa0ba902b7"
	hc := &http.Client{}
	if err := postInfer(hc, sHTTP.addr, "mnist", map[string]string{"Traceparent": "00-" + clientTID + "-" + clientSpan + "-01"}); err != nil {
		t.Fatalf("HTTP call: %v", err)
	}
	// 2. gRPC without context: the sidecar starts the trace.
	conn, err := grpc.NewClient(sGRPC.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = inference.NewGRPCInferenceServiceClient(conn).ModelInfer(ctx, &inference.ModelInferRequest{
		ModelName: "mnist", Id: "g1",
		Inputs: []*inference.ModelInferRequest_InferInputTensor{{Name: "input", Datatype: "FP32", Shape: []int64{1, 4},
			Contents: &inference.InferTensorContents{Fp32Contents: []float32{1, 2, 3, 4}}}},
	})
	if err != nil {
		t.Fatalf("gRPC call: %v", err)
	}
	// 3. HTTP with B3 multi headers, through the OTLP/HTTP sidecar.
	b3TID := "80f198ee56343ba864fe8b2a57d3eff7"
	if err := postInfer(hc, sB.addr, "mnist", map[string]string{"X-B3-TraceId": b3TID, "X-B3-SpanId": "e457b5a2e4d86bd1", "X-B3-Sampled": "1"}); err != nil {
		t.Fatalf("HTTP B3 call: %v", err)
	}

	// Deliver everything: records to the tracers, spans to Jaeger.
	for _, s := range []*sidecar{sHTTP, sGRPC, sB} {
		s.stop()
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, x := range []*Tracer{tr, trHTTP} {
		if err := x.Close(cctx); err != nil {
			t.Fatalf("close tracer: %v", err)
		}
	}
	if err := upTP.Shutdown(cctx); err != nil {
		t.Fatalf("flush the upstream's spans: %v", err)
	}

	kept := append(tr.Traces(0, ""), trHTTP.Traces(0, "")...)
	if len(kept) != 3 {
		t.Fatalf("kept %d traces, want 3", len(kept))
	}
	var tree bytes.Buffer
	Render(&tree, kept)
	t.Logf("kept traces:\n%s", tree.String())
	var grpcTID string
	for _, k := range kept {
		if k.Route == "triton-grpc" {
			grpcTID = k.TraceID
		}
	}
	for _, tc := range []struct {
		name, tid, parent, service string
		local                      *Trace
	}{
		{"http-w3c", clientTID, clientSpan, "inferwatch", nil},
		{"grpc-new", grpcTID, "", "inferwatch", nil},
		{"http-b3", b3TID, "e457b5a2e4d86bd1", "inferwatch-b", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i := range kept {
				if kept[i].TraceID == tc.tid {
					tc.local = &kept[i]
				}
			}
			if tc.local == nil {
				t.Fatalf("trace %s not kept by the sidecar", tc.tid)
			}
			mu.Lock()
			tp := seen[tc.tid]
			mu.Unlock()
			if !strings.HasPrefix(tp, "00-"+tc.tid+"-") {
				t.Fatalf("upstream got traceparent %q for trace %s", tp, tc.tid)
			}
			checkJaegerTrace(t, j.getTrace(t, tc.tid, len(tc.local.Spans)+1), tc.local, tc.parent, tc.service, tp)
		})
	}
}

func checkJaegerTrace(t *testing.T, jt *jaegerTrace, local *Trace, clientParent, service, upstreamTP string) {
	t.Helper()
	type span struct {
		id, name, parent, service string
		start, end                int64 // µs
	}
	byID := map[string]*span{}
	var upstreamServer []*span
	for _, s := range jt.Spans {
		sp := &span{id: s.SpanID, name: s.OperationName, service: jt.Processes[s.ProcessID].ServiceName,
			start: s.StartTime, end: s.StartTime + s.Duration}
		for _, r := range s.References {
			if r.RefType == "CHILD_OF" {
				sp.parent = r.SpanID
			}
		}
		if s.TraceID != local.TraceID {
			t.Errorf("span %s in trace %s", s.OperationName, s.TraceID)
		}
		byID[sp.id] = sp
		if sp.service == "model-server" {
			upstreamServer = append(upstreamServer, sp)
		}
	}
	// Every span the sidecar built is there, with its parent.
	for _, ls := range local.Spans {
		s := byID[ls.SpanID]
		if s == nil {
			t.Errorf("sidecar span %s %s missing from Jaeger", ls.Name, ls.SpanID)
			continue
		}
		if s.service != service || s.name != ls.Name || s.parent != ls.ParentSpanID {
			t.Errorf("span %s: Jaeger has service %q name %q parent %q; sidecar built %q parent %q",
				ls.SpanID, s.service, s.name, s.parent, ls.Name, ls.ParentSpanID)
		}
	}
	call := byID[local.Spans[0].SpanID]
	if call == nil {
		t.Fatalf("call span %s missing", local.Spans[0].SpanID)
	}
	if call.parent != clientParent {
		t.Errorf("call span's parent %q, want the client's %q", call.parent, clientParent)
	}
	// Jaeger keeps microseconds: allow 1µs of rounding.
	within := func(c, p *span) {
		if c.start < p.start-1 || c.end > p.end+1 || c.end < c.start {
			t.Errorf("%s [%d, %d]µs is not inside %s [%d, %d]µs", c.name, c.start-call.start, c.end-call.start,
				p.name, p.start-call.start, p.end-call.start)
		}
	}
	var up *span
	phases := map[string]bool{}
	for _, s := range byID {
		if s.parent == call.id && s.service == service {
			phases[s.name] = true
			if s.name == "decode" {
				if s.start < call.end-1 {
					t.Errorf("decode starts before the call ended")
				}
				continue
			}
			within(s, call)
			if s.name == "upstream" {
				up = s
			}
		}
	}
	for _, p := range []string{"ingress", "upstream", "transfer", "egress"} {
		if !phases[p] {
			t.Errorf("no %s span under the call span (have %v)", p, phases)
		}
	}
	if up == nil {
		t.Fatal("no upstream span")
	}
	if !strings.Contains(upstreamTP, "-"+up.id+"-") {
		t.Errorf("upstream was given traceparent %q, the sidecar's upstream span is %s", upstreamTP, up.id)
	}
	if len(upstreamServer) != 1 {
		t.Fatalf("%d spans of the upstream's own in the trace, want 1", len(upstreamServer))
	}
	us := upstreamServer[0]
	if us.parent != up.id {
		t.Errorf("upstream's span has parent %s, want the sidecar's upstream span %s", us.parent, up.id)
	}
	within(us, up)
	stages := 0
	for _, s := range byID {
		if s.parent == up.id && s.service == service {
			stages++
			within(s, up)
		}
	}
	if stages != 2 {
		t.Errorf("%d server-reported stage spans under upstream, want 2", stages)
	}
	t.Logf("trace %s: %d spans; call %dµs, upstream %dµs, upstream's own span %dµs", local.TraceID, len(jt.Spans),
		call.end-call.start, up.end-up.start, us.end-us.start)
}
