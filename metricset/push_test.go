package metricset

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/internal/exposition"
	"github.com/inferwatch/inferwatch/record"
)

func TestInitPushErrors(t *testing.T) {
	tests := []struct {
		name     string
		url      string
		interval time.Duration
		labels   map[string]string
		wantErr  string
	}{
		{"bad scheme", "ftp://vm:8428/api/v1/import/prometheus", time.Second, nil, "scheme"},
		{"no host", "http:///api/v1/import/prometheus", time.Second, nil, "host"},
		{"zero interval", "http://vm:8428/api/v1/import/prometheus", 0, nil, "interval"},
		{"bad label", "http://vm:8428/api/v1/import/prometheus", time.Second, map[string]string{"pod name": "x"}, "pod name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			err := New(Options{}).InitPush(ctx, tt.url, tt.interval, tt.labels)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "metricset: push") {
				t.Errorf("err = %v, want one with context and %q", err, tt.wantErr)
			}
		})
	}
}

func TestInitPushSendsExtraLabels(t *testing.T) {
	bodies := make(chan string, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				t.Errorf("gzip: %v", err)
				return
			}
			body = zr
		}
		b, _ := io.ReadAll(body)
		select {
		case bodies <- r.Method + "\n" + string(b):
		default:
		}
	}))
	defer srv.Close()

	s := New(Options{})
	s.RecordDropped()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := s.InitPush(ctx, srv.URL+"/api/v1/import/prometheus", 50*time.Millisecond, map[string]string{"pod": "p-1", "namespace": "ml"}); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-bodies:
		for _, want := range []string{"POST\n", `inferwatch_records_dropped_total{namespace="ml",pod="p-1"} 1`, `side="client"`} {
			if !strings.Contains(got, want) {
				t.Errorf("pushed body lacks %q:\n%s", want, got)
			}
		}
	case <-time.After(5 * time.Second):
		t.Fatal("nothing pushed in 5s")
	}
}

func TestPushLogThrottles(t *testing.T) {
	var out bytes.Buffer
	log.SetOutput(&out)
	defer log.SetOutput(os.Stderr)
	var l pushLog
	for _, msg := range []string{"refused", "refused", "refused", "status 500", "refused"} {
		l.printf("metrics: push: %s", msg)
	}
	l.at = l.at.Add(-2 * pushRepeatEvery) // a minute later the same error shows again
	l.printf("metrics: push: %s", "refused")
	if got := strings.Count(out.String(), "\n"); got != 4 {
		t.Errorf("%d lines logged, want 4 (refused, status 500, refused, refused a minute later):\n%s", got, out.String())
	}
}

// TestExtraLabelsRefuseEveryLabelName: a push adds the extra labels to
// every series of the set, so an extra label that shares its name with a
// label of any family in it — this package's or one another package
// registers in Metrics() — would give that series the label twice, which
// VictoriaMetrics and Prometheus reject or store mangled.
func TestExtraLabelsRefuseEveryLabelName(t *testing.T) {
	// Every family of this package, each label in use.
	s := New(Options{})
	c := &record.Call{
		Start: time.Now(), RequestEnd: ms, UpstreamStart: ms, UpstreamSent: 2 * ms,
		FirstByte: 20 * ms, ResponseEnd: 400 * ms, End: 401 * ms,
		Protocol: record.ProtocolHTTP, API: record.APIOpenAI, Method: "chat_completions",
		Model: "llama", Version: "1", Code: "200", ErrorKind: record.ErrTimeout, DecodeFail: true,
		BatchSize: 2, InputCount: 1, OutputCount: 1, ClientRTT: ms, UpstreamRTT: ms,
		Stages: []record.Stage{{Name: "queue", Duration: ms}},
		LLM: &record.LLM{Streamed: true, FirstToken: 52 * ms, FirstTokenUpstream: 50 * ms, LastToken: 352 * ms,
			ContentEvents: 4, PromptTokens: 10, OutputTokens: 4, FinishReason: "stop"},
	}
	s.Observe(c)
	var b bytes.Buffer
	s.WritePrometheus(&b)
	page, err := exposition.Parse(b.String())
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, smp := range page.Samples {
		for name := range smp.Labels {
			names[name] = true
		}
	}
	// The label names of the families other packages register in the set
	// (docs/metrics.md and the docs it points to): sidecar (route, bound),
	// modelload (op, to), tracing and sampling (reason, route), alerting
	// (quantile, alertname), alertmanager (notifier, result), gpu (gpu,
	// uuid, pid, upstream, xid, reason, call, error), bpf (pid, estimated,
	// upstream, probe, what).
	for _, name := range []string{"route", "bound", "op", "to", "reason", "quantile", "alertname",
		"notifier", "result", "gpu", "uuid", "pid", "upstream", "xid", "call", "error",
		"estimated", "probe", "what"} {
		names[name] = true
	}
	for name := range names {
		if err := CheckExtraLabels(map[string]string{name: "x"}); err == nil {
			t.Errorf("extra label %q accepted: pushed series that have it would carry it twice", name)
		}
	}
}
