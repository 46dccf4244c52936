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
