package metricset

import (
	"io"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/record"
)

const ms = time.Millisecond

// grpcCall is a complete unary gRPC call of total duration d.
func grpcCall(model, version, code string, d time.Duration) *record.Call {
	return &record.Call{
		Start:         time.Now(),
		RequestEnd:    d / 10,
		UpstreamStart: d / 10,
		UpstreamSent:  d / 10,
		FirstByte:     d * 8 / 10,
		ResponseEnd:   d * 9 / 10,
		End:           d,
		Egress:        d / 20,
		Protocol:      record.ProtocolGRPC,
		API:           record.APIKServeV2,
		Method:        "ModelInfer",
		Model:         model,
		Version:       version,
		Code:          code,
		RequestBytes:  1000,
		ResponseBytes: 400,
	}
}

func base(model, version string) map[string]string {
	return map[string]string{"protocol": "grpc", "api": "kserve_v2", "model": model, "version": version}
}

func with(m map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

func TestObserveExposition(t *testing.T) {
	s := New(Options{})
	durations := []time.Duration{3 * ms, 7 * ms, 12 * ms, 250 * ms}
	for i, d := range durations {
		c := grpcCall("resnet", "1", "OK", d)
		c.BatchSize = 1 << (2 * i) // 1, 4, 16, 64
		c.InputCount, c.OutputCount = 2, 1
		c.Stages = []record.Stage{{Name: "infer", Duration: d / 2}, {Name: "preprocess", Duration: ms}}
		if i == 0 {
			c.Decode, c.DecodeRan = 50*time.Microsecond, true
			c.ClientRTT, c.UpstreamRTT = 200*time.Microsecond, 80*time.Microsecond
		}
		s.Observe(c)
	}
	failed := grpcCall("resnet", "1", "UNAVAILABLE", 0)
	failed.ErrorKind = record.ErrUpstreamUnavailable
	failed.FirstByte, failed.ResponseEnd = 0, 0
	failed.RequestEnd, failed.End = ms/2, 2*ms
	failed.RequestBytes, failed.ResponseBytes = 0, 0
	s.Observe(failed)
	bad := grpcCall("resnet", "1", "OK", 5*ms)
	bad.ErrorKind, bad.DecodeFail = record.ErrDecode, true // one decode failure, not two
	s.Observe(bad)
	undecodable := grpcCall("resnet", "1", "OK", 5*ms)
	undecodable.DecodeFail = true
	s.Observe(undecodable)
	s.RecordDropped()
	s.RecordDropped()

	e := scrape(t, s)
	b := base("resnet", "1")
	values := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"inferwatch_requests_total", with(b, "method", "ModelInfer", "code", "OK"), 6},
		{"inferwatch_requests_total", with(b, "method", "ModelInfer", "code", "UNAVAILABLE"), 1},
		{"inferwatch_request_duration_seconds_count", b, 7},
		{"inferwatch_phase_duration_seconds_count", with(b, "phase", "ingress"), 7},
		{"inferwatch_phase_duration_seconds_count", with(b, "phase", "decode"), 1},
		{"inferwatch_phase_duration_seconds_count", with(b, "phase", "upstream"), 6},
		{"inferwatch_phase_duration_seconds_count", with(b, "phase", "transfer"), 6},
		{"inferwatch_phase_duration_seconds_count", with(b, "phase", "egress"), 7},
		{"inferwatch_server_stage_duration_seconds_count", with(b, "stage", "infer"), 4},
		{"inferwatch_server_stage_duration_seconds_count", with(b, "stage", "preprocess"), 4},
		{"inferwatch_server_stage_duration_seconds_sum", with(b, "stage", "preprocess"), 0.004},
		{"inferwatch_request_bytes_total", b, 6000},
		{"inferwatch_response_bytes_total", b, 2400},
		{"inferwatch_batch_size_count", map[string]string{"model": "resnet", "version": "1"}, 4},
		{"inferwatch_batch_size_sum", map[string]string{"model": "resnet", "version": "1"}, 85},
		{"inferwatch_tensors_total", map[string]string{"model": "resnet", "version": "1", "direction": "input"}, 8},
		{"inferwatch_tensors_total", map[string]string{"model": "resnet", "version": "1", "direction": "output"}, 4},
		{"inferwatch_errors_total", map[string]string{"protocol": "grpc", "model": "resnet", "version": "1", "kind": "upstream_unavailable"}, 1},
		{"inferwatch_errors_total", map[string]string{"protocol": "grpc", "model": "resnet", "version": "1", "kind": "decode_failure"}, 2},
		{"inferwatch_network_rtt_seconds_count", map[string]string{"side": "client"}, 1},
		{"inferwatch_network_rtt_seconds_count", map[string]string{"side": "upstream"}, 1},
		{"inferwatch_records_dropped_total", map[string]string{}, 2},
	}
	for _, v := range values {
		t.Run(v.name+labelString("", flatten(v.labels)...), func(t *testing.T) {
			got := e.value(v.name, v.labels)
			if !near(got, v.want, 1e-9) {
				t.Errorf("= %v, want %v", got, v.want)
			}
		})
	}

	// Bucket counts: each observation must land in the first bucket whose
	// bound is not below it, and the counts must be cumulative.
	observed := []float64{0.002, 0.003, 0.005, 0.005, 0.007, 0.012, 0.25}
	bs := e.buckets("inferwatch_request_duration_seconds", b)
	if len(bs) != len(durationBuckets)+1 {
		t.Fatalf("%d buckets, want %d", len(bs), len(durationBuckets)+1)
	}
	for _, bk := range bs {
		want := 0.0
		for _, o := range observed {
			if o <= bk.le {
				want++
			}
		}
		if bk.count != want {
			t.Errorf("bucket le=%v holds %v, want %v", bk.le, bk.count, want)
		}
	}
	batch := e.buckets("inferwatch_batch_size", map[string]string{"model": "resnet", "version": "1"})
	wantBatch := map[float64]float64{1: 1, 2: 1, 4: 2, 8: 2, 16: 3, 32: 3, 64: 4, 1024: 4, math.Inf(1): 4}
	for _, bk := range batch {
		if w, ok := wantBatch[bk.le]; ok && bk.count != w {
			t.Errorf("batch bucket le=%v holds %v, want %v", bk.le, bk.count, w)
		}
	}

	for name := range help {
		if strings.HasPrefix(name, "inferwatch_llm_") {
			continue // made by generative calls only: TestObserveLLM
		}
		if e.Help[name] == "" {
			t.Errorf("no # HELP text for %s", name)
		}
	}
	types := map[string]string{
		"inferwatch_requests_total":           "counter",
		"inferwatch_request_duration_seconds": "histogram",
		"inferwatch_batch_size":               "histogram",
		"inferwatch_errors_total":             "counter",
	}
	for name, typ := range types {
		if e.Types[name] != typ {
			t.Errorf("# TYPE %s = %q, want %q", name, e.Types[name], typ)
		}
	}
}

func flatten(m map[string]string) []string {
	var kv []string
	for _, k := range []string{"protocol", "api", "method", "model", "version", "code", "phase", "stage", "kind", "direction", "side"} {
		if v, ok := m[k]; ok {
			kv = append(kv, k, v)
		}
	}
	return kv
}

func TestObserveOmitsUnmeasured(t *testing.T) {
	s := New(Options{})
	// An HTTP call that never got a response: no upstream/transfer phase, no
	// batch, tensors, stages or RTT.
	s.Observe(&record.Call{
		RequestEnd: ms, End: 2 * ms, Protocol: record.ProtocolHTTP, API: record.APIUnknown,
		Method: "/v1/whatever", Code: "502", ErrorKind: record.ErrTimeout,
	})
	e := scrape(t, s)
	absent := []string{
		"inferwatch_batch_size_count", "inferwatch_tensors_total",
		"inferwatch_server_stage_duration_seconds_count",
	}
	for _, name := range absent {
		if n := e.count(name); n != 0 {
			t.Errorf("%s has %d series, want none", name, n)
		}
	}
	b := map[string]string{"protocol": "http", "api": "unknown", "model": "unknown", "version": "unknown"}
	for _, p := range []struct {
		phase string
		want  float64
	}{{"ingress", 1}, {"decode", math.NaN()}, {"upstream", math.NaN()}, {"transfer", math.NaN()}, {"egress", 1}} {
		got := e.value("inferwatch_phase_duration_seconds_count", with(b, "phase", p.phase))
		if !(got == p.want || math.IsNaN(got) && math.IsNaN(p.want)) {
			t.Errorf("phase %s count = %v, want %v", p.phase, got, p.want)
		}
	}
	if got := e.value("inferwatch_requests_total", with(b, "method", "/v1/whatever", "code", "502")); got != 1 {
		t.Errorf("requests = %v, want 1", got)
	}
	if got := e.value("inferwatch_network_rtt_seconds_count", map[string]string{"side": "client"}); got != 0 {
		t.Errorf("client rtt count = %v, want 0", got)
	}
}

func TestLabelCaps(t *testing.T) {
	tests := []struct {
		name  string
		opts  Options
		calls []record.Call
		want  map[string]float64 // "model/version" → requests
	}{
		{
			name: "models beyond the cap become other",
			opts: Options{MaxModels: 2},
			calls: []record.Call{
				{Model: "a", Version: "1"}, {Model: "b", Version: "1"}, {Model: "c", Version: "1"},
				{Model: "a", Version: "2"}, {Model: "a", Version: "1"},
			},
			want: map[string]float64{"a/1": 2, "b/1": 1, "other/other": 2},
		},
		{
			name: "dirty names that sanitise alike share a slot",
			opts: Options{MaxModels: 2},
			calls: []record.Call{
				{Model: "my model", Version: "1"}, {Model: "my\tmodel", Version: "1"}, {Model: "x", Version: ""}, {Model: "y"},
			},
			want: map[string]float64{"my_model/1": 2, "x/unknown": 1, "other/other": 1},
		},
		{
			name:  "long names are cut to 64 bytes",
			opts:  Options{},
			calls: []record.Call{{Model: string(make([]byte, 100)), Version: "1"}},
			want:  map[string]float64{string(underscores(64)) + "/1": 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New(tt.opts)
			for i := range tt.calls {
				c := &tt.calls[i]
				c.Protocol, c.API, c.Method, c.Code, c.End = record.ProtocolHTTP, record.APIKServeV2, "infer", "200", ms
				s.Observe(c)
			}
			e := scrape(t, s)
			got := map[string]float64{}
			for _, smp := range e.Samples {
				if smp.Name == "inferwatch_requests_total" {
					got[smp.Labels["model"]+"/"+smp.Labels["version"]] += smp.Value
				}
			}
			if len(got) != len(tt.want) {
				t.Errorf("series %v, want %v", got, tt.want)
			}
			for k, v := range tt.want {
				if got[k] != v {
					t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
				}
			}
		})
	}
}

func underscores(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = '_'
	}
	return b
}

func TestStageAndMethodCaps(t *testing.T) {
	s := New(Options{MaxStages: 2, MaxMethods: 1})
	for i := 0; i < 20; i++ { // more stages than one resolve round holds
		c := grpcCall("m", "1", "OK", 10*ms)
		c.Method = "M" + strconv.Itoa(i%3)
		for j := 0; j < 20; j++ {
			c.Stages = append(c.Stages, record.Stage{Name: "s" + strconv.Itoa(j), Duration: ms})
		}
		s.Observe(c)
	}
	e := scrape(t, s)
	stages := map[string]float64{}
	methods := map[string]float64{}
	for _, smp := range e.Samples {
		switch smp.Name {
		case "inferwatch_server_stage_duration_seconds_count":
			stages[smp.Labels["stage"]] += smp.Value
		case "inferwatch_requests_total":
			methods[smp.Labels["method"]] += smp.Value
		}
	}
	wantStages := map[string]float64{"s0": 20, "s1": 20, "other": 18 * 20}
	if len(stages) != len(wantStages) {
		t.Errorf("stages %v, want %v", stages, wantStages)
	}
	for k, v := range wantStages {
		if stages[k] != v {
			t.Errorf("stage %s count = %v, want %v", k, stages[k], v)
		}
	}
	if methods["M0"] != 7 || methods["other"] != 13 || len(methods) != 2 {
		t.Errorf("methods %v, want M0:7 other:13", methods)
	}
}

func TestAliasCacheIsBounded(t *testing.T) {
	s := New(Options{MaxModels: 3})
	for i := 0; i < 1000; i++ {
		s.Observe(&record.Call{Protocol: "grpc", API: "kserve_v2", Method: "ModelInfer", Code: "OK", Model: "m" + strconv.Itoa(i)})
	}
	if n := len(s.models.alias); n > aliasFactor*3 {
		t.Errorf("alias cache holds %d raw names, want at most %d", n, aliasFactor*3)
	}
	if n := len(s.series); n != 4 {
		t.Errorf("%d series, want 3 models + other", n)
	}
}

func TestDurationBuckets(t *testing.T) {
	b := durationBuckets
	if len(b) != 62 || b[0] != 50e-6 || b[len(b)-1] < 60 {
		t.Fatalf("buckets %v..%v (%d), want 50µs..≥60s (62)", b[0], b[len(b)-1], len(b))
	}
	for i := 1; i < len(b); i++ {
		if r := b[i] / b[i-1]; r < 1.25 || r > 1.266 { // the error bound in docs/metrics.md
			t.Errorf("bound %d/%d ratio %v, want ≈1.26", i, i-1, r)
		}
		if s := strconv.FormatFloat(b[i], 'g', -1, 64); len(s) > 8 {
			t.Errorf("bound %d prints as %s, want three significant digits", i, s)
		}
	}
}

// TestObserveConcurrently runs observers on new and known tuples against
// scrapes, for the race detector.
func TestObserveConcurrently(t *testing.T) {
	s := New(Options{MaxModels: 5, MaxStages: 3})
	done := make(chan struct{})
	for g := 0; g < 4; g++ {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := 0; i < 300; i++ {
				c := grpcCall("m"+strconv.Itoa(i%9), strconv.Itoa(g), "OK", time.Duration(i)*time.Microsecond)
				c.Stages = []record.Stage{{Name: "s" + strconv.Itoa(i%5), Duration: ms}}
				c.BatchSize, c.DecodeFail = i%3, i%7 == 0
				s.Observe(c)
				if i%50 == 0 {
					s.WritePrometheus(io.Discard) // not scrape: no t.Fatal off the test goroutine
				}
			}
		}()
	}
	for g := 0; g < 4; g++ {
		<-done
	}
	if got := scrape(t, s).count("inferwatch_requests_total"); got != 6 {
		t.Errorf("%d request series, want 6 (5 model pairs and other)", got)
	}
}

// TestControlCallsKeepOutOfModelLatency: a repository load names its model
// but is counted under model "unknown", so the model's latency series never
// hold a load's seconds (modelload has them).
func TestControlCallsKeepOutOfModelLatency(t *testing.T) {
	s := New(Options{})
	s.Observe(grpcCall("resnet", "1", "OK", 3*ms))
	for _, method := range []string{record.MethodRepositoryLoad, record.MethodRepositoryUnload} {
		c := grpcCall("resnet", "", "OK", 2*time.Second)
		c.Method = method
		s.Observe(c)
	}
	e := scrape(t, s)
	for _, v := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"inferwatch_request_duration_seconds_count", base("resnet", "1"), 1},
		{"inferwatch_request_duration_seconds_sum", base("resnet", "1"), 0.003},
		{"inferwatch_request_duration_seconds_count", base("unknown", "unknown"), 2},
		{"inferwatch_requests_total", with(base("unknown", "unknown"), "method", record.MethodRepositoryLoad, "code", "OK"), 1},
		{"inferwatch_requests_total", with(base("unknown", "unknown"), "method", record.MethodRepositoryUnload, "code", "OK"), 1},
	} {
		if got := e.value(v.name, v.labels); !near(got, v.want, 1e-9) {
			t.Errorf("%s%v = %v, want %v", v.name, v.labels, got, v.want)
		}
	}
}
