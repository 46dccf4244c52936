package tritonstats

import (
	"bytes"
	"context"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/inferwatch/inferwatch/internal/exposition"
)

// fakeTriton serves /v2/models/stats with a body (and status) the test sets.
type fakeTriton struct {
	mu     sync.Mutex
	status int
	body   string
	hits   int
}

func (f *fakeTriton) set(status int, body string) {
	f.mu.Lock()
	f.status, f.body = status, body
	f.mu.Unlock()
}

func (f *fakeTriton) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v2/models/stats" {
		http.NotFound(w, r)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hits++
	w.WriteHeader(f.status)
	w.Write([]byte(f.body)) //nolint:errcheck
}

// value reads one series from the set's exposition; NaN when absent.
func value(t *testing.T, set *metrics.Set, series string) float64 {
	t.Helper()
	var buf bytes.Buffer
	set.WritePrometheus(&buf)
	p, err := exposition.Parse(buf.String())
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := p.Value(series); ok {
		return v
	}
	return math.NaN()
}

func stage(model, version, metric, stage string) string {
	return `inferwatch_triton_stage_` + metric + `{model="` + model + `",version="` + version + `",stage="` + stage + `"}`
}

func perModel(metric, model, version string) string {
	return `inferwatch_triton_` + metric + `{model="` + model + `",version="` + version + `"}`
}

func TestPollHTTPDeltas(t *testing.T) {
	fake := &fakeTriton{}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	set := metrics.NewSet()
	p, err := New(Options{HTTPBase: srv.URL + "/", Set: set})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	steps := []struct {
		name    string
		status  int
		body    string
		wantErr string
		want    map[string]float64 // exported series → value after the step
		snap    map[string]uint64  // "model/version" → success count in Snapshot
	}{
		{
			name:   "baseline exports zeros, not the history",
			status: 200,
			body:   `{"model_stats":[{"name":"resnet","version":"1","last_inference":1700000000000,"inference_count":1000,"execution_count":250,"inference_stats":{"success":{"count":1000,"ns":20000000000},"queue":{"count":1000,"ns":1000000000},"compute_infer":{"count":1000,"ns":15000000000}}}]}`,
			want: map[string]float64{
				perModel("inference_count_total", "resnet", "1"):          0,
				stage("resnet", "1", "duration_seconds_total", "queue"):   0,
				stage("resnet", "1", "count_total", "success"):            0,
				stage("resnet", "1", "count_total", "cache_miss"):         0,
				"inferwatch_triton_poll_errors_total":                     0,
				perModel("execution_count_total", "resnet", "1"):          0,
				stage("resnet", "1", "duration_seconds_total", "success"): 0,
			},
		},
		{
			name:   "string counters, deltas exported",
			status: 200,
			body:   `{"model_stats":[{"name":"resnet","version":"1","last_inference":"1700000001000","inference_count":"1100","execution_count":"270","inference_stats":{"success":{"count":"1100","ns":"22000000000"},"queue":{"count":"1100","ns":"1500000000"},"compute_infer":{"count":"1100","ns":"16500000000"}}}]}`,
			want: map[string]float64{
				perModel("inference_count_total", "resnet", "1"):                100,
				perModel("execution_count_total", "resnet", "1"):                20,
				stage("resnet", "1", "count_total", "success"):                  100,
				stage("resnet", "1", "duration_seconds_total", "success"):       2,
				stage("resnet", "1", "duration_seconds_total", "queue"):         0.5,
				stage("resnet", "1", "duration_seconds_total", "compute_infer"): 1.5,
			},
			snap: map[string]uint64{"resnet/1": 100},
		},
		{
			name:    "malformed JSON is a poll error and changes nothing",
			status:  200,
			body:    `{"model_stats":[{"name":"resnet",`,
			wantErr: "decode statistics",
			want: map[string]float64{
				"inferwatch_triton_poll_errors_total":            1,
				perModel("inference_count_total", "resnet", "1"): 100,
			},
			snap: map[string]uint64{"resnet/1": 100},
		},
		{
			name:    "server error is a poll error",
			status:  503,
			body:    "statistics disabled",
			wantErr: "status 503",
			want:    map[string]float64{"inferwatch_triton_poll_errors_total": 2},
			snap:    map[string]uint64{"resnet/1": 100},
		},
		{
			name:    "negative counter is a poll error",
			status:  200,
			body:    `{"model_stats":[{"name":"resnet","version":"1","inference_count":-1}]}`,
			wantErr: "non-negative",
			want:    map[string]float64{"inferwatch_triton_poll_errors_total": 3},
		},
		{
			name:   "counter going backwards is a restart: the new value is the delta; a new model's series starts at zero",
			status: 200,
			body:   `{"model_stats":[{"name":"resnet","version":"1","inference_count":30,"execution_count":10,"inference_stats":{"success":{"count":30,"ns":600000000}}},{"name":"bert","version":2,"inference_count":5,"inference_stats":{"success":{"count":5,"ns":"50000000"}}}]}`,
			want: map[string]float64{
				perModel("inference_count_total", "resnet", "1"):          130,
				perModel("execution_count_total", "resnet", "1"):          30,
				stage("resnet", "1", "duration_seconds_total", "success"): 2.6,
				perModel("inference_count_total", "bert", "2"):            0,
				stage("bert", "2", "duration_seconds_total", "success"):   0,
			},
			snap: map[string]uint64{"resnet/1": 30},
		},
		{
			// Added in the same poll that made the series, they were its
			// first sample: increase() and rate() never saw them grow.
			name:   "and the new model counts in full at the next poll",
			status: 200,
			body:   `{"model_stats":[{"name":"resnet","version":"1","inference_count":30,"execution_count":10,"inference_stats":{"success":{"count":30,"ns":600000000}}},{"name":"bert","version":2,"inference_count":5,"inference_stats":{"success":{"count":5,"ns":"50000000"}}}]}`,
			want: map[string]float64{
				perModel("inference_count_total", "resnet", "1"):        130,
				perModel("inference_count_total", "bert", "2"):          5,
				stage("bert", "2", "duration_seconds_total", "success"): 0.05,
			},
			snap: map[string]uint64{"bert/2": 5, "resnet/1": 0},
		},
		{
			name:   "a model missing from one report is remembered, not counted twice",
			status: 200,
			body:   `{"model_stats":[{"name":"resnet","version":"1","inference_count":40,"execution_count":10,"inference_stats":{"success":{"count":40,"ns":800000000}}}]}`,
			want: map[string]float64{
				perModel("inference_count_total", "resnet", "1"): 140,
				perModel("inference_count_total", "bert", "2"):   5,
			},
			snap: map[string]uint64{"resnet/1": 10},
		},
		{
			name:   "and when it is back, only its growth counts",
			status: 200,
			body:   `{"model_stats":[{"name":"resnet","version":"1","inference_count":40,"execution_count":10,"inference_stats":{"success":{"count":40,"ns":800000000}}},{"name":"bert","version":"2","inference_count":7,"inference_stats":{"success":{"count":7,"ns":70000000}}}]}`,
			want: map[string]float64{
				perModel("inference_count_total", "resnet", "1"): 140,
				perModel("inference_count_total", "bert", "2"):   7,
			},
			snap: map[string]uint64{"bert/2": 2, "resnet/1": 0},
		},
	}
	for _, st := range steps {
		fake.set(st.status, st.body)
		err := p.PollOnce(context.Background())
		if st.wantErr == "" && err != nil {
			t.Fatalf("%s: PollOnce: %v", st.name, err)
		}
		if st.wantErr != "" && (err == nil || !strings.Contains(err.Error(), st.wantErr)) {
			t.Fatalf("%s: err = %v, want one containing %q", st.name, err, st.wantErr)
		}
		for series, want := range st.want {
			if got := value(t, set, series); math.IsNaN(got) || math.Abs(got-want) > 1e-9 {
				t.Errorf("%s: %s = %v, want %v", st.name, series, got, want)
			}
		}
		if st.snap != nil {
			got := map[string]uint64{}
			for _, m := range p.Snapshot() {
				got[m.Model+"/"+m.Version] = m.Stages[0].Count
			}
			if len(got) != len(st.snap) {
				t.Errorf("%s: snapshot %v, want %v", st.name, got, st.snap)
			}
			for k, v := range st.snap {
				if got[k] != v {
					t.Errorf("%s: snapshot %s success count = %d, want %d", st.name, k, got[k], v)
				}
			}
		}
	}
}

func TestSnapshotMeans(t *testing.T) {
	fake := &fakeTriton{status: 200, body: `{"model_stats":[{"name":"m","version":"1","inference_count":0}]}`}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	p, err := New(Options{HTTPBase: srv.URL, Set: metrics.NewSet()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.PollOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s := p.Snapshot(); len(s) != 0 {
		t.Fatalf("snapshot after the baseline = %v, want empty", s)
	}
	fake.set(200, `{"model_stats":[{"name":"m","version":"1","inference_count":8,"execution_count":2,"inference_stats":{"queue":{"count":8,"ns":4000000},"compute_infer":{"count":2,"ns":30000000},"cache_hit":{"count":0,"ns":0}}}]}`)
	if err := p.PollOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	s := p.Snapshot()
	if len(s) != 1 {
		t.Fatalf("snapshot %v, want one model", s)
	}
	m := s[0]
	if m.Model != "m" || m.Version != "1" || m.Inferences != 8 || m.Executions != 2 || m.Interval <= 0 || m.Reset {
		t.Errorf("snapshot %+v", m)
	}
	want := map[string]struct {
		count uint64
		mean  time.Duration
	}{
		"queue":         {8, 500 * time.Microsecond},
		"compute_infer": {2, 15 * time.Millisecond},
		"cache_hit":     {0, 0},
	}
	for _, st := range m.Stages {
		if w, ok := want[st.Name]; ok && (st.Count != w.count || st.Mean != w.mean) {
			t.Errorf("stage %s: count %d mean %v, want %d, %v", st.Name, st.Count, st.Mean, w.count, w.mean)
		}
	}
}

func TestModelCapAndSanitising(t *testing.T) {
	fake := &fakeTriton{status: 200, body: `{"model_stats":[{"name":"a","version":"1"},{"name":"b c","version":"1"},{"name":"d","version":"1"},{"name":"e","version":"1"}]}`}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	set := metrics.NewSet()
	p, err := New(Options{HTTPBase: srv.URL, Set: set, MaxModels: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.PollOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	fake.set(200, `{"model_stats":[{"name":"a","version":"1","inference_count":1},{"name":"b c","version":"1","inference_count":2},{"name":"d","version":"1","inference_count":3},{"name":"e","version":"1","inference_count":4}]}`)
	if err := p.PollOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Which two models get their own series depends on map order; the sum
	// and the number of series do not.
	var buf bytes.Buffer
	set.WritePrometheus(&buf)
	page, err := exposition.Parse(buf.String())
	if err != nil {
		t.Fatal(err)
	}
	total, series := 0.0, 0
	for _, s := range page.Find("inferwatch_triton_inference_count_total", nil) {
		series++
		total += s.Value
		for _, v := range s.Labels {
			if v == "b c" {
				t.Errorf("unsanitised label: %s", s.Series)
			}
		}
	}
	if series != 3 || total != 10 {
		t.Errorf("%d series summing to %v, want 3 (two models and other) summing to 10:\n%s", series, total, buf.String())
	}
}

func TestNewValidates(t *testing.T) {
	set := metrics.NewSet()
	tests := []struct {
		name    string
		o       Options
		wantErr string
	}{
		{"neither upstream", Options{Set: set}, "exactly one"},
		{"both upstreams", Options{HTTPBase: "http://127.0.0.1:8000", GRPCAddr: "127.0.0.1:8001", Set: set}, "exactly one"},
		{"no set", Options{HTTPBase: "http://127.0.0.1:8000"}, "Set is required"},
		{"bad scheme", Options{HTTPBase: "127.0.0.1:8000", Set: set}, "HTTP base"},
		{"negative interval", Options{GRPCAddr: "127.0.0.1:8001", Set: set, Interval: -time.Second}, "negative interval"},
		{"http ok", Options{HTTPBase: "http://127.0.0.1:8000", Set: set}, ""},
		{"grpc ok", Options{GRPCAddr: "127.0.0.1:8001", Set: set}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := New(tt.o)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				p.Close()
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.HasPrefix(err.Error(), "tritonstats: ") {
				t.Errorf("err = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

// syncBuffer is a log destination safe for the Run goroutine and the test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestRunLogsOncePerStateChange(t *testing.T) {
	fake := &fakeTriton{status: 500, body: "no"}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	set := metrics.NewSet()
	var logs syncBuffer
	p, err := New(Options{HTTPBase: srv.URL, Set: set, Interval: 10 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()

	waitFor(t, "5 failed polls", func() bool { return value(t, set, "inferwatch_triton_poll_errors_total") >= 5 })
	fake.set(200, `{"model_stats":[]}`)
	waitFor(t, "recovery", func() bool { return strings.Contains(logs.String(), "recovered") })
	cancel()
	<-done

	out := logs.String()
	if n := strings.Count(out, "poll failing"); n != 1 {
		t.Errorf("%d failure lines, want 1:\n%s", n, out)
	}
	if n := strings.Count(out, "recovered"); n != 1 {
		t.Errorf("%d recovery lines, want 1:\n%s", n, out)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 5s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
