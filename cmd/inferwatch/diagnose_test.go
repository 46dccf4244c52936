package main

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/alerting"
	"github.com/inferwatch/inferwatch/diagnosis"
)

// fakeAdmin serves /debug/diagnose with a real diagnosis of constructed
// windows: a throttled model server.
func fakeAdmin(t *testing.T) *httptest.Server {
	t.Helper()
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	var ws []diagnosis.Window
	for i := range 33 {
		w := diagnosis.Window{Start: t0.Add(time.Duration(i) * 10 * time.Second), Seconds: 10, Version: "1", Count: 1000, QPS: 100, Mean: 0.02, P99: 0.04,
			Stages: map[string]float64{"compute": 0.015}, Phases: map[string]float64{"upstream": 0.018},
			Host: &alerting.HostBreakdown{Seconds: 10, Cgroup: &alerting.HostCgroup{Coverage: 1}}}
		if i >= 30 {
			w.Mean, w.P99 = 0.05, 0.1
			w.Stages["compute"] += 0.03
			w.Phases["upstream"] += 0.03
			w.Host.Cgroup.Throttled = 3
		}
		ws = append(ws, w)
	}
	rep, err := diagnosis.Diagnose(diagnosis.Request{Model: "mlp", From: ws[30].Start, Windows: ws}, diagnosis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/debug/diagnose" || r.URL.Query().Get("from") != "5m" {
			http.Error(w, `{"error":"unexpected `+r.URL.String()+`"}`, http.StatusBadRequest)
			return
		}
		json.NewEncoder(w).Encode(rep)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestDiagnoseCommand(t *testing.T) {
	admin := fakeAdmin(t)
	llm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{"choices": []any{map[string]any{"message": map[string]string{"role": "assistant", "content": "The quota throttled the server."}}}})
	}))
	defer llm.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + ln.Addr().String() + "/v1"
	ln.Close()
	tests := []struct {
		name           string
		args           []string
		wantOut        []string
		notOut         []string
		wantErr        string
		wantErrRunFail bool
	}{
		{name: "text", args: []string{"--from", "5m"}, wantOut: []string{"verdict: mean 20ms→50ms", "1. cpu_throttling"}, notOut: []string{"quota throttled"}},
		{name: "json", args: []string{"--from", "5m", "--json"}, wantOut: []string{`"name": "cpu_throttling"`, `"anomaly": true`}},
		{name: "prose", args: []string{"--from", "5m", "--llm-url", llm.URL + "/v1"}, wantOut: []string{"1. cpu_throttling", "The quota throttled the server."}},
		{name: "llm down: report without prose", args: []string{"--from", "5m", "--llm-url", down}, wantOut: []string{"1. cpu_throttling"}, wantErr: "no prose"},
		{name: "admin error", args: []string{"--from", "1h"}, wantErrRunFail: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := runDiagnose(append([]string{"--admin", admin.URL, "--timeout", "5s"}, tc.args...), &out, &errOut)
			if tc.wantErrRunFail {
				if err == nil || !strings.Contains(err.Error(), "unexpected") {
					t.Fatalf("err = %v, want the admin's error", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range tc.wantOut {
				if !strings.Contains(out.String(), s) {
					t.Errorf("output lacks %q:\n%s", s, out.String())
				}
			}
			for _, s := range tc.notOut {
				if strings.Contains(out.String(), s) {
					t.Errorf("output holds %q", s)
				}
			}
			if !strings.Contains(errOut.String(), tc.wantErr) || (tc.wantErr == "" && errOut.Len() > 0) {
				t.Errorf("stderr %q, want %q", errOut.String(), tc.wantErr)
			}
		})
	}
}
