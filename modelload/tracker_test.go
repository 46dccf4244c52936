package modelload_test

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/inferapi"
	"github.com/inferwatch/inferwatch/internal/exposition"
	"github.com/inferwatch/inferwatch/metricset"
	"github.com/inferwatch/inferwatch/modelload"
	"github.com/inferwatch/inferwatch/record"
)

// call builds a finished record: it starts at offset at ms after t0 and
// lasts dur ms.
type call struct {
	api, proto, method, model, version, code string
	ready                                    record.Readiness
	at, dur                                  int
}

var t0 = time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)

func (c call) record() *record.Call {
	r := &record.Call{
		Start: t0.Add(time.Duration(c.at) * time.Millisecond), End: time.Duration(c.dur) * time.Millisecond,
		Protocol: c.proto, API: c.api, Method: c.method, Model: c.model, Version: c.version, Code: c.code, Ready: c.ready,
	}
	if r.Protocol == "" {
		r.Protocol = record.ProtocolGRPC
	}
	if r.API == "" {
		r.API = record.APIKServeV2
	}
	if r.Code == "" {
		r.Code = "OK"
		if r.Protocol == record.ProtocolHTTP {
			r.Code = "200"
		}
	}
	return r
}

func load(at, dur int) call {
	return call{method: inferapi.MethodRepositoryLoad, model: "m", at: at, dur: dur}
}
func unload(at, dur int) call {
	return call{method: inferapi.MethodRepositoryUnload, model: "m", at: at, dur: dur}
}
func infer(at, dur int) call {
	return call{method: inferapi.MethodInfer, model: "m", version: "1", at: at, dur: dur}
}

func TestTracker(t *testing.T) {
	tests := []struct {
		name  string
		calls []call
		want  map[string]string // series (without the metric's suffix) -> value; others must be absent
	}{
		{
			name:  "load, infer twice, reload, infer, unload",
			calls: []call{load(0, 50), infer(60, 7), infer(70, 2), load(100, 30), infer(140, 5), unload(200, 4)},
			want: map[string]string{
				`inferwatch_model_load_seconds_count{model="m",version="unknown",kind="initial"}`: "1",
				`inferwatch_model_load_seconds_sum{model="m",version="unknown",kind="initial"}`:   "0.05",
				`inferwatch_model_load_seconds_count{model="m",version="unknown",kind="reload"}`:  "1",
				`inferwatch_model_load_seconds_sum{model="m",version="unknown",kind="reload"}`:    "0.03",
				`inferwatch_model_unload_seconds_count{model="m",version="unknown"}`:              "1",
				`inferwatch_model_cold_request_duration_seconds_count{model="m",version="1"}`:     "2",
				`inferwatch_model_cold_request_duration_seconds_sum{model="m",version="1"}`:       "0.012",
				`inferwatch_model_ready{model="m"}`:                                               "0",
				`inferwatch_model_ready_transitions_total{model="m",to="not_ready"}`:              "1",
			},
		},
		{
			name: "TorchServe's StreamPredictions and TF Serving's MultiInference run the model: cold calls too",
			calls: []call{
				load(0, 10), {method: inferapi.MethodStreamPredict, model: "m", version: "1", at: 20, dur: 6}, infer(30, 1),
				load(40, 10), {method: inferapi.MethodMultiInference, model: "m", version: "1", at: 60, dur: 4}, infer(70, 1),
			},
			want: map[string]string{
				`inferwatch_model_load_seconds_count{model="m",version="unknown",kind="initial"}`: "1",
				`inferwatch_model_load_seconds_count{model="m",version="unknown",kind="reload"}`:  "1",
				`inferwatch_model_cold_request_duration_seconds_count{model="m",version="1"}`:     "2",
				`inferwatch_model_cold_request_duration_seconds_sum{model="m",version="1"}`:       "0.01",
				`inferwatch_model_ready{model="m"}`:                                               "1",
			},
		},
		{
			// TF Serving's GetModelStatus over gRPC says from its answer's
			// body whether a version is AVAILABLE, as KServe's ModelReady
			// does: a model seen loading, then available, has its first
			// Predict counted cold. (Over REST, TF Serving answers 200
			// while loading: a REST status call whose body was not read
			// says nothing.)
			name: "TF Serving's GetModelStatus is a readiness answer",
			calls: []call{
				{api: record.APITFServing, method: inferapi.MethodModelReady, model: "m", ready: record.ReadyNo, at: 0, dur: 1},
				{api: record.APITFServing, method: inferapi.MethodModelReady, model: "m", ready: record.ReadyYes, at: 10, dur: 1},
				{api: record.APITFServing, method: inferapi.MethodPredict, model: "m", version: "1", at: 20, dur: 7},
				{api: record.APITFServing, proto: record.ProtocolHTTP, method: inferapi.MethodModelReady, model: "m", code: "200", at: 30, dur: 1},
				{api: record.APITFServing, method: inferapi.MethodPredict, model: "m", version: "1", at: 40, dur: 2},
			},
			want: map[string]string{
				`inferwatch_model_cold_request_duration_seconds_count{model="m",version="1"}`: "1",
				`inferwatch_model_cold_request_duration_seconds_sum{model="m",version="1"}`:   "0.007",
				`inferwatch_model_ready{model="m"}`:                                           "1",
				`inferwatch_model_ready_transitions_total{model="m",to="ready"}`:              "1",
			},
		},
		{
			// Over REST, readiness is in the body (the decoder's c.Ready):
			// TF Serving answers 200 with a version LOADING, then
			// AVAILABLE; KServe v1 says "ready". A 404 (a model the server
			// does not know) is not ready; a 503 says nothing.
			name: "TF Serving's and KServe v1's REST status bodies are readiness answers",
			calls: []call{
				{api: record.APITFServing, proto: record.ProtocolHTTP, method: inferapi.MethodModelReady, model: "m", ready: record.ReadyNo, at: 0, dur: 1},
				{api: record.APITFServing, proto: record.ProtocolHTTP, method: inferapi.MethodModelReady, model: "m", ready: record.ReadyYes, at: 10, dur: 1},
				{api: record.APITFServing, proto: record.ProtocolHTTP, method: inferapi.MethodPredict, model: "m", version: "1", at: 20, dur: 7},
				{api: record.APIKServeV1, proto: record.ProtocolHTTP, method: inferapi.MethodModelReady, model: "m", code: "404", at: 30, dur: 1},
				{api: record.APIKServeV1, proto: record.ProtocolHTTP, method: inferapi.MethodModelReady, model: "m", ready: record.ReadyYes, at: 40, dur: 1},
				{api: record.APIKServeV1, proto: record.ProtocolHTTP, method: inferapi.MethodModelReady, model: "m", code: "503", at: 50, dur: 1},
			},
			want: map[string]string{
				`inferwatch_model_cold_request_duration_seconds_count{model="m",version="1"}`: "1",
				`inferwatch_model_cold_request_duration_seconds_sum{model="m",version="1"}`:   "0.007",
				`inferwatch_model_ready{model="m"}`:                                           "1",
				`inferwatch_model_ready_transitions_total{model="m",to="ready"}`:              "2",
				`inferwatch_model_ready_transitions_total{model="m",to="not_ready"}`:          "1",
			},
		},
		{
			name:  "a model seen serving is reloaded, not loaded",
			calls: []call{infer(0, 3), load(10, 20), infer(40, 9)},
			want: map[string]string{
				`inferwatch_model_load_seconds_count{model="m",version="unknown",kind="reload"}`: "1",
				`inferwatch_model_cold_request_duration_seconds_count{model="m",version="1"}`:    "1",
				`inferwatch_model_cold_request_duration_seconds_sum{model="m",version="1"}`:      "0.009",
				`inferwatch_model_ready{model="m"}`:                                              "1",
			},
		},
		{
			name:  "load after unload is initial; a call that overlapped the load is not cold",
			calls: []call{load(0, 10), infer(20, 1), unload(30, 2), load(40, 30), infer(50, 25), infer(80, 4)},
			want: map[string]string{
				`inferwatch_model_load_seconds_count{model="m",version="unknown",kind="initial"}`: "2",
				`inferwatch_model_unload_seconds_count{model="m",version="unknown"}`:              "1",
				`inferwatch_model_cold_request_duration_seconds_count{model="m",version="1"}`:     "2",
				`inferwatch_model_cold_request_duration_seconds_sum{model="m",version="1"}`:       "0.005",
				`inferwatch_model_ready{model="m"}`:                                               "1",
				`inferwatch_model_ready_transitions_total{model="m",to="not_ready"}`:              "1",
				`inferwatch_model_ready_transitions_total{model="m",to="ready"}`:                  "1",
			},
		},
		{
			name:  "the cold call's record arrives before the load's",
			calls: []call{infer(0, 1), infer(60, 3), load(10, 40), infer(70, 8)},
			want: map[string]string{
				`inferwatch_model_load_seconds_count{model="m",version="unknown",kind="reload"}`: "1",
				`inferwatch_model_cold_request_duration_seconds_count{model="m",version="1"}`:    "1",
				`inferwatch_model_cold_request_duration_seconds_sum{model="m",version="1"}`:      "0.003",
				`inferwatch_model_ready{model="m"}`:                                              "1",
			},
		},
		{
			name: "the ready answer after a load arrives before the load's record",
			calls: []call{
				load(0, 5), unload(10, 2),
				{proto: record.ProtocolHTTP, method: inferapi.MethodModelReady, model: "m", code: "200", at: 60, dur: 1},
				load(20, 30), infer(70, 6), infer(80, 1),
			},
			want: map[string]string{
				`inferwatch_model_load_seconds_count{model="m",version="unknown",kind="initial"}`: "2",
				`inferwatch_model_unload_seconds_count{model="m",version="unknown"}`:              "1",
				`inferwatch_model_cold_request_duration_seconds_count{model="m",version="1"}`:     "1",
				`inferwatch_model_cold_request_duration_seconds_sum{model="m",version="1"}`:       "0.006",
				`inferwatch_model_ready{model="m"}`:                                               "1",
				`inferwatch_model_ready_transitions_total{model="m",to="not_ready"}`:              "1",
				`inferwatch_model_ready_transitions_total{model="m",to="ready"}`:                  "1",
			},
		},
		{
			name:  "a load the sidecar did not see: the first call served after an unload is cold",
			calls: []call{unload(0, 2), infer(1, 4), infer(10, 5), infer(20, 1), load(30, 10)},
			want: map[string]string{
				`inferwatch_model_unload_seconds_count{model="m",version="unknown"}`:             "1",
				`inferwatch_model_cold_request_duration_seconds_count{model="m",version="1"}`:    "1",
				`inferwatch_model_cold_request_duration_seconds_sum{model="m",version="1"}`:      "0.005",
				`inferwatch_model_load_seconds_count{model="m",version="unknown",kind="reload"}`: "1",
				`inferwatch_model_ready{model="m"}`:                                              "1",
				`inferwatch_model_ready_transitions_total{model="m",to="ready"}`:                 "1",
			},
		},
		{
			name: "failed loads and unloads count, change nothing",
			calls: []call{
				{method: inferapi.MethodRepositoryLoad, model: "m", code: "NOT_FOUND", dur: 1},
				{proto: record.ProtocolHTTP, method: inferapi.MethodRepositoryUnload, model: "m", code: "400", at: 5, dur: 1},
				infer(10, 2),
			},
			want: map[string]string{
				`inferwatch_model_load_failures_total{model="m",op="load"}`:   "1",
				`inferwatch_model_load_failures_total{model="m",op="unload"}`: "1",
				`inferwatch_model_ready{model="m"}`:                           "1",
			},
		},
		{
			name: "readiness answers: gRPC body, REST status; ready after not ready awaits a cold call",
			calls: []call{
				{method: inferapi.MethodModelReady, model: "m", ready: record.ReadyNo, dur: 1},
				{proto: record.ProtocolHTTP, method: inferapi.MethodModelReady, model: "m", code: "200", at: 10, dur: 1},
				infer(20, 6), infer(30, 1),
				{proto: record.ProtocolHTTP, method: inferapi.MethodModelReady, model: "m", code: "400", at: 40, dur: 1},
				{method: inferapi.MethodModelReady, model: "m", code: "UNKNOWN", at: 50, dur: 1}, // says nothing
			},
			want: map[string]string{
				`inferwatch_model_cold_request_duration_seconds_count{model="m",version="1"}`: "1",
				`inferwatch_model_cold_request_duration_seconds_sum{model="m",version="1"}`:   "0.006",
				`inferwatch_model_ready{model="m"}`:                                           "0",
				`inferwatch_model_ready_transitions_total{model="m",to="ready"}`:              "1",
				`inferwatch_model_ready_transitions_total{model="m",to="not_ready"}`:          "1",
			},
		},
		{
			name: "model labels are sanitised and capped with the call metrics'",
			calls: []call{
				{method: inferapi.MethodRepositoryLoad, model: "first model", dur: 1},
				{method: inferapi.MethodRepositoryLoad, model: "second", dur: 1},
				{method: inferapi.MethodRepositoryLoad, model: "third", dur: 1},
			},
			want: map[string]string{
				`inferwatch_model_load_seconds_count{model="first_model",version="unknown",kind="initial"}`: "1",
				`inferwatch_model_load_seconds_count{model="second",version="unknown",kind="initial"}`:      "1",
				`inferwatch_model_load_seconds_count{model="other",version="other",kind="initial"}`:         "1",
				`inferwatch_model_ready{model="first_model"}`:                                               "1",
				`inferwatch_model_ready{model="second"}`:                                                    "1",
				`inferwatch_model_ready{model="other"}`:                                                     "1",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set := metricset.New(metricset.Options{MaxModels: 2})
			tr := modelload.New(set)
			for _, c := range tt.calls {
				tr.Observe(c.record())
			}
			got := scrape(t, set)
			for series, v := range tt.want {
				if got[series] != v {
					t.Errorf("%s = %q, want %q", series, got[series], v)
				}
			}
			for series, v := range got {
				if _, ok := tt.want[series]; !ok && !strings.Contains(series, "_bucket{") && !strings.HasSuffix(strings.SplitN(series, "{", 2)[0], "_sum") {
					t.Errorf("unexpected series %s = %s", series, v)
				}
			}
		})
	}
}

// scrape returns the inferwatch_model_* series of set's exposition, their
// values as the shortest text that reads back the same.
func scrape(t *testing.T, set *metricset.Set) map[string]string {
	t.Helper()
	var b bytes.Buffer
	set.WritePrometheus(&b)
	p, err := exposition.Parse(b.String())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for series, v := range p.Series("inferwatch_model_") {
		out[series] = strconv.FormatFloat(v, 'g', -1, 64)
	}
	return out
}

func TestMetricHelpCoversFamilies(t *testing.T) {
	set := metricset.New(metricset.Options{})
	tr := modelload.New(set)
	for _, c := range []call{load(0, 1), infer(2, 1), unload(4, 1), {method: inferapi.MethodRepositoryLoad, model: "m", code: "INTERNAL", at: 5, dur: 1}, load(6, 1)} {
		tr.Observe(c.record())
	}
	help := modelload.MetricHelp()
	for series := range scrape(t, set) {
		name := strings.SplitN(series, "{", 2)[0]
		name = strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
		if help[name] == "" {
			t.Errorf("%s has no help text", name)
		}
	}
	if len(help) != 6 {
		t.Errorf("help has %d families, want 6", len(help))
	}
}
