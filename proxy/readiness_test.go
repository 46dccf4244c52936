package proxy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestHTTPProbeAuto: the auto probe of an HTTP upstream asks KServe v2's
// /v2/health/ready; a server without it that answers TorchServe's /ping
// is ready as /ping says; a server with neither is ready once reachable.
func TestHTTPProbeAuto(t *testing.T) {
	tests := []struct {
		name   string
		routes map[string]int // path -> status; others 404
		ready  bool
		reason string
	}{
		{"KServe ready", map[string]int{"/v2/health/ready": 200}, true, ""},
		{"KServe not ready", map[string]int{"/v2/health/ready": 503, "/ping": 200}, false, "/v2/health/ready answered 503"},
		{"TorchServe healthy", map[string]int{"/ping": 200}, true, ""},
		{"TorchServe unhealthy", map[string]int{"/ping": 500}, false, "TorchServe /ping answered 500"},
		{"neither", nil, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				code, ok := tt.routes[r.URL.Path]
				if !ok || r.Method != http.MethodGet {
					http.NotFound(w, r)
					return
				}
				w.WriteHeader(code)
			}))
			defer srv.Close()
			p := Probe{Name: "http", Upstream: strings.TrimPrefix(srv.URL, "http://"), Kind: ProbeAuto, Transport: http.DefaultTransport}
			ready, reason := p.check(context.Background())
			if ready != tt.ready || !strings.Contains(reason, tt.reason) {
				t.Errorf("ready %v (%q), want %v (%q)", ready, reason, tt.ready, tt.reason)
			}
		})
	}
}
