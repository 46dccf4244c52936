package tracing

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/inferwatch/inferwatch/record"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func us(n float64) time.Duration { return time.Duration(n * float64(time.Microsecond)) }

func ids(c *record.Call, trace, span, upstream, parent string) {
	copy(c.TraceID[:], mustHexS(trace))
	copy(c.SpanID[:], mustHexS(span))
	copy(c.UpstreamSpanID[:], mustHexS(upstream))
	if parent != "" {
		copy(c.ParentSpanID[:], mustHexS(parent))
	}
}

func mustHexS(s string) []byte {
	b := make([]byte, len(s)/2)
	if !decodeHex(b, s) {
		panic("bad hex " + s)
	}
	return b
}

// seedCall is the seed's example call: a unary KServe v2 gRPC ModelInfer,
// head-sampled at p=0.10, with server-reported stages.
func seedCall() *record.Call {
	c := &record.Call{
		Start: t0, RequestEnd: us(50), UpstreamStart: us(60), UpstreamSent: us(60),
		FirstByte: us(2160), ResponseEnd: us(2190), End: us(2410), Egress: us(10),
		Protocol: record.ProtocolGRPC, API: record.APIKServeV2, Method: "infer", Model: "mnist-mlp", Version: "1",
		Code: "OK", RequestBytes: 3151, ResponseBytes: 61, RequestMessages: 1, ResponseMessages: 1,
		BatchSize: 1, InputCount: 1, OutputCount: 1,
		Inputs:  []record.Tensor{{Name: "input", Datatype: "FP32", Shape: []int64{1, 784}, Bytes: 3136}},
		Outputs: []record.Tensor{{Name: "probabilities", Datatype: "FP32", Shape: []int64{1, 10}, Bytes: 40}},
		Stages: []record.Stage{
			{Name: "queue", Duration: us(10), Source: "server-timing"},
			{Name: "preprocess", Duration: us(130), Source: "server-timing"},
			{Name: "infer", Duration: us(1800), Source: "server-timing"},
			{Name: "postprocess", Duration: us(20), Source: "server-timing"},
		},
		TraceSampled: true, TraceState: "ot=th:e666666666666", TraceRoute: "triton-grpc", TraceModel: "", TraceProbability: 0.1,
	}
	ids(c, "4bf92f3577b34da6a3ce929d0e0e4736", "a1a1a1a1a1a1a1a1", "b2b2b2b2b2b2b2b2", "00f067aa0ba902b7")
	return c
}

// slowHTTPCall is an HTTP KServe v2 infer the head did not sample, kept by
// the tail for being slow, whose payload the pipeline decoded afterwards.
func slowHTTPCall() *record.Call {
	c := &record.Call{
		Start: t0.Add(time.Second), RequestEnd: us(120), UpstreamStart: us(80), UpstreamSent: us(130),
		FirstByte: us(48130), ResponseEnd: us(48200), End: us(48260), Egress: us(20),
		Decode: us(35), DecodeRan: true,
		Protocol: record.ProtocolHTTP, API: record.APIKServeV2, Method: "infer", Model: "resnet50",
		Code: "200", RequestBytes: 602112, ResponseBytes: 4100, RequestMessages: 1, ResponseMessages: 1,
		BatchSize: 1, InputCount: 1, OutputCount: 1,
		Inputs: []record.Tensor{{Name: "image", Datatype: "FP32", Shape: []int64{1, 3, 224, 224}}},
		Stages: []record.Stage{
			{Name: "infer", Duration: us(47000), Source: "server-timing"},
			{Name: "postprocess", Duration: us(5000), Source: "server-timing"}, // reported past the interval: cut
		},
		TraceState: "ot=th:fd70a3d70a3d7;rv:0a1b2c3d4e5f60", TraceRoute: "kserve-http", TraceModel: "resnet50", TraceProbability: 0.01,
	}
	ids(c, "0af7651916cd43dd8448eb211c80319c", "c3c3c3c3c3c3c3c3", "d4d4d4d4d4d4d4d4", "")
	return c
}

// failedCall is a gRPC call whose upstream refused the connection.
func failedCall() *record.Call {
	c := &record.Call{
		Start: t0.Add(2 * time.Second), RequestEnd: us(40), UpstreamStart: us(45), End: us(400),
		Protocol: record.ProtocolGRPC, API: record.APIKServeV2, Method: "infer", Model: "mnist-mlp",
		Code: "UNAVAILABLE", ErrorKind: record.ErrUpstreamUnavailable, RequestBytes: 3151, RequestMessages: 1,
		TraceRoute: "triton-grpc",
	}
	ids(c, "5b8efff798038103d269b633813fc60c", "e5e5e5e5e5e5e5e5", "f6f6f6f6f6f6f6f6", "")
	return c
}

func attrMap(kv []attribute.KeyValue) map[string]attribute.Value {
	m := make(map[string]attribute.Value, len(kv))
	for _, a := range kv {
		m[string(a.Key)] = a.Value
	}
	return m
}

func within(t *testing.T, child, parent *spanData) {
	t.Helper()
	if child.start.Before(parent.start) || child.end.After(parent.end) || child.end.Before(child.start) {
		t.Errorf("%s [%v, %v] is not within %s [%v, %v]", child.name, child.start.Sub(t0), child.end.Sub(t0),
			parent.name, parent.start.Sub(t0), parent.end.Sub(t0))
	}
}

func TestBuildSpansStructure(t *testing.T) {
	for _, c := range []*record.Call{seedCall(), slowHTTPCall(), failedCall()} {
		t.Run(c.Model+"/"+c.Code, func(t *testing.T) {
			tail := ""
			if !c.TraceSampled {
				tail = "slow"
			}
			cs := buildSpans(c, nil, tail, "10.0.0.7:8001")
			call := &cs.spans[0]
			if call.id != c.SpanID || call.parent != c.ParentSpanID || call.kind != trace.SpanKindServer {
				t.Fatalf("call span %+v", call)
			}
			if !call.start.Equal(c.Start) || !call.end.Equal(c.Start.Add(c.End)) {
				t.Errorf("call span [%v, %v], want the measured [Start, Start+End]", call.start, call.end)
			}
			byID := map[[8]byte]*spanData{}
			names := map[string]*spanData{}
			for i := range cs.spans {
				s := &cs.spans[i]
				if byID[s.id] != nil {
					t.Fatalf("span id %x twice", s.id)
				}
				byID[s.id] = s
				names[s.name] = s
			}
			for i := range cs.spans[1:] {
				s := &cs.spans[i+1]
				p := byID[s.parent]
				if p == nil {
					t.Fatalf("%s: parent %x not in the trace", s.name, s.parent)
				}
				if s.name == record.PhaseDecode {
					// Ran after the call: placed right after it.
					if p != call || !s.start.Equal(call.end) || s.end.Sub(s.start) != c.Decode {
						t.Errorf("decode [%v, %v], parent %s", s.start.Sub(t0), s.end.Sub(t0), p.name)
					}
					continue
				}
				within(t, s, p)
			}
			up := byID[c.UpstreamSpanID]
			if up == nil || up.name != record.PhaseUpstream || up.kind != trace.SpanKindClient || up.parent != c.SpanID {
				t.Fatalf("upstream span %+v", up)
			}
			if !up.start.Equal(c.Start.Add(c.UpstreamStart)) {
				t.Errorf("upstream starts %v, want UpstreamStart %v", up.start.Sub(c.Start), c.UpstreamStart)
			}
			// Stages: back to back under upstream, in reported order, from the
			// upstream phase's start.
			var stages []*spanData
			for i := range cs.spans {
				if cs.spans[i].parent == c.UpstreamSpanID {
					stages = append(stages, &cs.spans[i])
				}
			}
			if len(stages) != len(c.Stages) {
				t.Fatalf("%d stage spans, want %d", len(stages), len(c.Stages))
			}
			d, _ := c.Upstream()
			at := c.Start.Add(c.FirstByte - d)
			for i, s := range stages {
				if s.name != c.Stages[i].Name || !s.start.Equal(at) {
					t.Errorf("stage %d %s starts %v, want %s at %v", i, s.name, s.start.Sub(t0), c.Stages[i].Name, at.Sub(t0))
				}
				at = s.end
			}
			if c.DecodeRan != (names[record.PhaseDecode] != nil) {
				t.Error("decode span present iff decode ran")
			}
			if a := attrMap(call.attrs); c.Failed() != (call.status == codes.Error) || c.Failed() != (a["error.type"].AsString() != "") {
				t.Errorf("status %v, attrs %v for a call failed=%v", call.status, a["error.type"], c.Failed())
			}
		})
	}
}

func TestBuildSpansAttributes(t *testing.T) {
	c := seedCall()
	cs := buildSpans(c, nil, "", "10.0.0.7:8001")
	a := attrMap(cs.spans[0].attrs)
	want := map[string]any{
		"rpc.system": "grpc", "rpc.service": "inference.GRPCInferenceService", "rpc.method": "ModelInfer",
		"rpc.grpc.status_code": int64(0), "inference.model": "mnist-mlp", "inference.version": "1",
		"inference.api": "kserve_v2", "inference.batch_size": int64(1), "inference.input_count": int64(1),
		"inference.request_bytes": int64(3151), "inference.response_bytes": int64(61),
		"sampling.head_probability": 0.1, "inference.route": "triton-grpc",
	}
	for k, v := range want {
		if got := a[k].AsInterface(); got != v {
			t.Errorf("%s = %v (%T), want %v", k, got, got, v)
		}
	}
	if got := a["inference.inputs"].AsStringSlice(); len(got) != 1 || got[0] != "input FP32 [1,784]" {
		t.Errorf("inputs %q", got)
	}
	if _, ok := a[attrTail]; ok {
		t.Error("head-sampled call marked as tail-kept")
	}
	if cs.spans[0].name != "inference ModelInfer mnist-mlp" {
		t.Errorf("name %q", cs.spans[0].name)
	}
	if cs.state.Get("ot") != "th:e666666666666" {
		t.Errorf("tracestate %q", cs.state.String())
	}
	up := attrMap(cs.spans[2].attrs)
	if up["server.address"].AsString() != "10.0.0.7" || up["server.port"].AsInt64() != 8001 {
		t.Errorf("upstream span attributes %v", cs.spans[2].attrs)
	}

	// Tail-kept: marked, and its threshold removed so a backend does not
	// count it with the head's adjusted count.
	h := slowHTTPCall()
	cs = buildSpans(h, nil, "slow", "")
	a = attrMap(cs.spans[0].attrs)
	if a[attrTail].AsString() != "slow" {
		t.Errorf("sampling.tail = %v", a[attrTail])
	}
	if _, ok := a[attrProbability]; ok {
		t.Error("tail-kept call carries the head probability")
	}
	if cs.state.Get("ot") != "rv:0a1b2c3d4e5f60" {
		t.Errorf("tail-kept tracestate %q, want the threshold dropped", cs.state.String())
	}
	if cs.spans[0].name != "POST /v2/models/{model}/infer" || a["http.route"].AsString() != "/v2/models/{model}/infer" ||
		a["http.request.method"].AsString() != "POST" || a["http.response.status_code"].AsInt64() != 200 {
		t.Errorf("HTTP call span %q %v", cs.spans[0].name, cs.spans[0].attrs)
	}
	for _, s := range cs.spans {
		for _, kv := range s.attrs {
			if strings.Contains(string(kv.Key), "content") {
				t.Errorf("attribute %s looks like tensor contents", kv.Key)
			}
		}
	}
}

func TestTracerObserveKeepsHeadAndTail(t *testing.T) {
	s := &fakeSampler{tail: map[string]string{"resnet50": "slow"}}
	tr, _ := newTracer(Config{Sampler: s, Keep: 2}, nil)
	notKept := seedCall()
	notKept.TraceSampled, notKept.Model = false, "other"
	tr.Observe(notKept)
	tr.Observe(seedCall())
	tr.Observe(slowHTTPCall())
	tr.Observe(&record.Call{}) // no trace context: ignored
	if len(s.observed) != 3 {
		t.Errorf("latency observed for %d calls, want 3", len(s.observed))
	}
	got := tr.Traces(0, "")
	if len(got) != 2 || got[0].Model != "resnet50" || got[0].Sampling != "tail" || got[0].TailReason != "slow" ||
		got[1].Model != "mnist-mlp" || got[1].Sampling != "head" {
		t.Fatalf("kept %+v", got)
	}
	tr.Observe(failedCall())
	if got := tr.Traces(0, ""); len(got) != 2 || got[0].Status != "ERROR" || got[1].Model != "resnet50" {
		t.Fatalf("ring of 2 after a third: %+v", got)
	}
	if got := tr.Traces(0, "resnet50"); len(got) != 1 {
		t.Errorf("model filter: %d", len(got))
	}
}

func TestRenderGolden(t *testing.T) {
	tr, _ := newTracer(Config{Sampler: &fakeSampler{tail: map[string]string{"resnet50": "slow"}}}, nil)
	for _, c := range []*record.Call{seedCall(), slowHTTPCall(), failedCall()} {
		tr.Observe(c)
	}
	traces := tr.Traces(0, "")
	// Oldest first, like the seed reads.
	for i, j := 0, len(traces)-1; i < j; i, j = i+1, j-1 {
		traces[i], traces[j] = traces[j], traces[i]
	}
	var buf bytes.Buffer
	Render(&buf, traces)
	golden(t, "tree.golden", buf.Bytes())
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("output differs from %s (go test -update rewrites it):\n%s", path, got)
	}
}

func TestHostFactsAttributes(t *testing.T) {
	tests := []struct {
		name    string
		h       *record.HostFacts
		present []string
		absent  []string
	}{
		{"none", nil, nil, []string{"inference.gpu.utilization", "inference.sched.runqueue_delay_ms", "inference.host.coverage"}},
		{"sched only", &record.HostFacts{Sched: true, RunqueueDelay: 2 * time.Millisecond, Coverage: 0.5},
			[]string{"inference.sched.runqueue_delay_ms", "inference.host.coverage"}, []string{"inference.gpu.utilization", "inference.cuda.kernel_launches"}},
		{"gpu and cuda", &record.HostFacts{GPU: true, GPUUtil: 0.7, CUDA: true, KernelLaunches: 12},
			[]string{"inference.gpu.utilization", "inference.cuda.kernel_launches"}, []string{"inference.sched.offcpu_ms"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := map[string]bool{}
			for _, kv := range appendHost(nil, tt.h) {
				got[string(kv.Key)] = true
			}
			for _, k := range tt.present {
				if !got[k] {
					t.Errorf("%s missing", k)
				}
			}
			for _, k := range tt.absent {
				if got[k] {
					t.Errorf("%s present though not observed", k)
				}
			}
		})
	}
}

// TestUpstreamAddrPerCall: a record that learned its upstream per call
// (ext_proc's upstream.address) names it in the upstream span, over the
// route's configured upstream.
func TestUpstreamAddrPerCall(t *testing.T) {
	for _, tt := range []struct {
		name, perCall, want string
	}{{"configured", "", "10.0.0.7"}, {"per call", "10.9.8.7:9000", "10.9.8.7"}} {
		t.Run(tt.name, func(t *testing.T) {
			tr, err := newTracer(Config{Keep: 4, Upstreams: map[string]string{"triton-grpc": "10.0.0.7:8001"}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			c := seedCall()
			c.UpstreamAddr = tt.perCall
			tr.Observe(c)
			k := tr.store.last(1, "")
			if len(k) != 1 {
				t.Fatalf("%d traces kept", len(k))
			}
			up := attrMap(k[0].cs.spans[2].attrs)
			if up["server.address"].AsString() != tt.want {
				t.Fatalf("server.address %v, want %s", up["server.address"], tt.want)
			}
		})
	}
}

// TestHTTPRouteTemplates: a recognised HTTP call's span is named by its
// route template, rebuilt from API, method and whether a version was given.
func TestHTTPRouteTemplates(t *testing.T) {
	for _, tc := range []struct {
		c     record.Call
		route string
	}{
		{record.Call{API: record.APIKServeV2, Method: "infer", Model: "m"}, "/v2/models/{model}/infer"},
		{record.Call{API: record.APIKServeV2, Method: "generate", Model: "m"}, "/v2/models/{model}/generate"},
		{record.Call{API: record.APIKServeV2, Method: "generate_stream", Model: "m", Version: "1"}, "/v2/models/{model}/versions/{version}/generate_stream"},
		{record.Call{API: record.APIOpenAI, Method: "responses"}, "/v1/responses"},
		{record.Call{API: record.APIOpenAI, Method: "chat_completions"}, "/v1/chat/completions"},
	} {
		method, route, ok := httpRoute(&tc.c)
		if !ok || method != "POST" || route != tc.route {
			t.Errorf("%s %s: %s %s (%v), want POST %s", tc.c.API, tc.c.Method, method, route, ok, tc.route)
		}
	}
}

func TestGRPCNames(t *testing.T) {
	for _, tc := range []struct {
		api, method, model string
		name, service, rpc string
	}{
		{record.APIKServeV2, "infer", "m", "inference ModelInfer m", "inference.GRPCInferenceService", "ModelInfer"},
		{record.APIKServeV2, record.MethodRepositoryLoad, "m", "inference RepositoryModelLoad m", "inference.GRPCInferenceService", "RepositoryModelLoad"},
		{record.APIKServeV2, "unknown", "", "inference unknown", "inference.GRPCInferenceService", ""},
		{record.APITFServing, "predict", "resnet", "inference Predict resnet", "tensorflow.serving.PredictionService", "Predict"},
		{record.APITFServing, "model_ready", "resnet", "inference GetModelStatus resnet", "tensorflow.serving.ModelService", "GetModelStatus"},
		{record.APITorchServe, "predict", "bert", "inference Predictions bert", "org.pytorch.serve.grpc.inference.InferenceAPIsService", "Predictions"},
		{record.APITorchServe, "stream_predict", "llama", "inference stream_predict llama", "org.pytorch.serve.grpc.inference.InferenceAPIsService", ""},
		{record.APITorchServe, "unknown", "", "inference unknown", "", ""},
		{record.APIUnknown, "unknown", "", "inference unknown", "", ""},
	} {
		c := &record.Call{Protocol: record.ProtocolGRPC, API: tc.api, Method: tc.method, Model: tc.model, Code: "OK"}
		if got := callName(c); got != tc.name {
			t.Errorf("%s %s: span name %q, want %q", tc.api, tc.method, got, tc.name)
		}
		attrs := map[string]string{}
		for _, a := range callAttributes(c, nil, "") {
			attrs[string(a.Key)] = a.Value.String()
		}
		if attrs["rpc.service"] != tc.service || attrs["rpc.method"] != tc.rpc {
			t.Errorf("%s %s: rpc.service %q rpc.method %q, want %q %q", tc.api, tc.method, attrs["rpc.service"], attrs["rpc.method"], tc.service, tc.rpc)
		}
	}
}

// TestRenderQuotesControlCharacters: a model name from the path ("%0a",
// an escape sequence) or an error text cannot forge lines on the /traces
// page or drive the terminal of whoever reads it: such strings are quoted.
func TestRenderQuotesControlCharacters(t *testing.T) {
	tr := Trace{TraceID: "t", Model: "m\nFAKE LINE\x1b[2J", Status: "ERROR", Code: "500", Sampling: "tail", TailReason: "error",
		Spans: []Span{{SpanID: "a", Name: "infer m\nX", Error: "bad\r\ninput", Start: time.Unix(0, 0)}}}
	var buf bytes.Buffer
	Render(&buf, []Trace{tr})
	out := buf.String()
	if strings.Contains(out, "\x1b") || strings.Contains(out, "\nFAKE LINE") || strings.Contains(out, "\nX") || strings.Contains(out, "\r") {
		t.Fatalf("control characters reached the page:\n%q", out)
	}
	for _, want := range []string{`"m\nFAKE LINE\x1b[2J"`, `"infer m\nX"`, `"bad\r\ninput"`} {
		if !strings.Contains(out, want) {
			t.Errorf("page lacks %s quoted:\n%s", want, out)
		}
	}
	if lines := strings.Count(out, "\n"); lines != 2 {
		t.Errorf("%d lines, want the head and one span:\n%s", lines, out)
	}
}

// TestClientSideCallSpan: a record a client made (the gRPC client
// interceptors) is not a server's call: its call span is the client's own
// operation (internal; its upstream child is the client span), in error for
// every gRPC code but OK, as the conventions have a client's.
func TestClientSideCallSpan(t *testing.T) {
	for _, tc := range []struct {
		code  string
		kind  record.ErrorKind
		etype string // "" not in error
	}{
		{"OK", record.ErrNone, ""},
		{"NOT_FOUND", record.ErrNone, "NOT_FOUND"},
		{"INVALID_ARGUMENT", record.ErrNone, "INVALID_ARGUMENT"},
		{"CANCELLED", record.ErrClientCancel, "CANCELLED"},
		{"UNAVAILABLE", record.ErrUpstreamUnavailable, "upstream_unavailable"},
		{"DEADLINE_EXCEEDED", record.ErrTimeout, "timeout"},
		{"INTERNAL", record.ErrNone, "INTERNAL"},
	} {
		t.Run(tc.code, func(t *testing.T) {
			c := seedCall()
			c.ClientSide, c.Code, c.ErrorKind = true, tc.code, tc.kind
			cs := buildSpans(c, nil, "", "10.0.0.7:8001")
			call := cs.spans[0]
			if call.kind != trace.SpanKindInternal {
				t.Errorf("call span kind %v, want internal", call.kind)
			}
			if got := call.status == codes.Error; got != (tc.etype != "") {
				t.Errorf("call span in error %v (%q), want %v", got, call.desc, tc.etype != "")
			}
			if got := attrMap(call.attrs)["error.type"].AsString(); got != tc.etype {
				t.Errorf("call span error.type %q, want %q", got, tc.etype)
			}
			for _, s := range cs.spans[1:] {
				if s.id == c.UpstreamSpanID && s.kind != trace.SpanKindClient {
					t.Errorf("upstream span kind %v, want client", s.kind)
				}
			}
		})
	}
	// The same record made in front of a server keeps the server's span.
	c := seedCall()
	c.Code = "NOT_FOUND"
	if cs := buildSpans(c, nil, "", ""); cs.spans[0].kind != trace.SpanKindServer || cs.spans[0].status == codes.Error {
		t.Errorf("server-side NOT_FOUND: kind %v, status %v; want server, not in error", cs.spans[0].kind, cs.spans[0].status)
	}
}

// TestSpanStatusFollowsSemconv: the call span is the server's, so it is in
// error for the gRPC codes and HTTP statuses OpenTelemetry's conventions name
// server errors, not for a client's mistake or its cancel; the upstream span
// is the sidecar's client call, in error for any failure the upstream answered.
func TestSpanStatusFollowsSemconv(t *testing.T) {
	answered := func(proto, code string, kind record.ErrorKind) *record.Call {
		c := seedCall()
		if proto == record.ProtocolHTTP {
			c = slowHTTPCall()
		}
		c.Code, c.ErrorKind = code, kind
		return c
	}
	refused := failedCall() // no response: UNAVAILABLE, upstream_unavailable
	cancelled := failedCall()
	cancelled.Code, cancelled.ErrorKind = "CANCELLED", record.ErrClientCancel
	midStreamError := answered(record.ProtocolHTTP, "200", record.ErrNone)
	midStreamError.LLM = &record.LLM{Streamed: true, Error: true, FinishReason: "error"}
	for _, tc := range []struct {
		name               string
		c                  *record.Call
		server, upstream   bool   // in error
		serverType, upType string // error.type ("" none)
	}{
		{"grpc OK", answered(record.ProtocolGRPC, "OK", record.ErrNone), false, false, "", ""},
		{"grpc NOT_FOUND", answered(record.ProtocolGRPC, "NOT_FOUND", record.ErrNone), false, true, "", "NOT_FOUND"},
		{"grpc INVALID_ARGUMENT", answered(record.ProtocolGRPC, "INVALID_ARGUMENT", record.ErrNone), false, true, "", "INVALID_ARGUMENT"},
		{"grpc INTERNAL", answered(record.ProtocolGRPC, "INTERNAL", record.ErrNone), true, true, "INTERNAL", "INTERNAL"},
		{"grpc UNKNOWN", answered(record.ProtocolGRPC, "UNKNOWN", record.ErrNone), true, true, "UNKNOWN", "UNKNOWN"},
		{"grpc DEADLINE_EXCEEDED timeout", answered(record.ProtocolGRPC, "DEADLINE_EXCEEDED", record.ErrTimeout), true, true, "timeout", "timeout"},
		{"grpc RESOURCE_EXHAUSTED too large", answered(record.ProtocolGRPC, "RESOURCE_EXHAUSTED", record.ErrTooLarge), false, false, "", ""},
		{"grpc decode failure OK", answered(record.ProtocolGRPC, "OK", record.ErrDecode), false, false, "", ""},
		{"refused", refused, true, true, "upstream_unavailable", "upstream_unavailable"},
		{"client cancel", cancelled, false, false, "", ""},
		{"http 200", answered(record.ProtocolHTTP, "200", record.ErrNone), false, false, "", ""},
		{"http 404", answered(record.ProtocolHTTP, "404", record.ErrNone), false, true, "", "404"},
		{"http 503", answered(record.ProtocolHTTP, "503", record.ErrNone), true, true, "503", "503"},
		// A generation the upstream failed after its 200 (an SSE error event).
		{"generation failed mid-stream", midStreamError, true, true, "stream_error", "stream_error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := buildSpans(tc.c, nil, "", "10.0.0.7:8001")
			var up *spanData
			for i := range cs.spans {
				if cs.spans[i].id == tc.c.UpstreamSpanID {
					up = &cs.spans[i]
				}
			}
			if up == nil {
				t.Fatal("no upstream span")
			}
			for _, s := range []struct {
				span  *spanData
				err   bool
				etype string
			}{{&cs.spans[0], tc.server, tc.serverType}, {up, tc.upstream, tc.upType}} {
				if got := s.span.status == codes.Error; got != s.err {
					t.Errorf("%s span: in error %v (%q), want %v", s.span.name, got, s.span.desc, s.err)
				}
				if got := attrMap(s.span.attrs)["error.type"].AsString(); got != s.etype {
					t.Errorf("%s span: error.type %q, want %q", s.span.name, got, s.etype)
				}
			}
		})
	}
}
