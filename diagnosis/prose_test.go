package diagnosis

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// secretReport is a throttling report whose windows carry a version label
// value and trace ids that must not reach the prompt.
func secretReport(t *testing.T) Report {
	t.Helper()
	var ws []Window
	for i := range 33 {
		w := healthy(i)
		w.Version = "v-secret-7"
		if i >= 30 {
			w.Version = "v-secret-8"
			slower(&w, 0.03, "upstream", "compute")
			w.Host.Cgroup.Throttled = 3
		}
		ws = append(ws, w)
	}
	r, err := Diagnose(Request{Model: "resnet50", From: ws[30].Start, Windows: ws}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestProseThroughFakeOpenAI(t *testing.T) {
	r := secretReport(t)
	if !strings.Contains(r.Summary+r.Causes[1].Summary, "v-secret") {
		t.Fatalf("the test needs a version in the report's text; causes %+v", r.Causes)
	}
	mustNot := []string{"v-secret", "feedface", "raw_input_contents", "\"inputs\"", "traceId", r.Traces[0]}
	var asked int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		asked++
		if req.URL.Path != "/v1/chat/completions" || req.Method != http.MethodPost {
			t.Errorf("asked %s %s", req.Method, req.URL.Path)
		}
		var body struct {
			Messages []ChatMessage `json:"messages"`
		}
		if err := json.NewDecoder(req.Body).Decode(&body); err != nil {
			t.Errorf("request: %v", err)
		}
		if len(body.Messages) != 2 || body.Messages[0].Role != "system" {
			t.Fatalf("messages = %+v", body.Messages)
		}
		user := body.Messages[1].Content
		for _, s := range []string{"resnet50", CauseThrottling, "compute", "baseline_throttled_s_per_s"} {
			if !strings.Contains(user, s) {
				t.Errorf("prompt lacks %q: %s", s, user)
			}
		}
		for _, s := range mustNot {
			if strings.Contains(body.Messages[0].Content+user, s) {
				t.Errorf("prompt holds %q: %s", s, user)
			}
		}
		var ev Evidence
		if err := json.Unmarshal([]byte(user), &ev); err != nil || ev.Causes[0].Name != CauseThrottling {
			t.Errorf("user message is not the evidence: %v %+v", err, ev)
		}
		json.NewEncoder(w).Encode(map[string]any{"choices": []any{map[string]any{"message": map[string]string{"role": "assistant", "content": " The container was throttled. "}}}})
	}))
	defer srv.Close()
	got, err := LLM{URL: srv.URL + "/v1"}.Prose(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	if got != "The container was throttled." || asked != 1 {
		t.Fatalf("prose %q after %d asks", got, asked)
	}
}

func TestProseServerDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	tests := []struct {
		name string
		url  string
	}{
		{"refused", "http://" + addr + "/v1"},
		{"error status", ""},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "overloaded", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	tests[1].url = srv.URL
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := (LLM{URL: tc.url}).Prose(context.Background(), secretReport(t)); err == nil {
				t.Fatal("no error from a down endpoint")
			}
		})
	}
}
