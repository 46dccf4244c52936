package admin

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestEndpoints(t *testing.T) {
	ready := false
	s := New(func(w io.Writer) { io.WriteString(w, "m_total 1\n") }, func() (bool, []string) {
		if ready {
			return true, nil
		}
		return false, []string{"grpc: unreachable"}
	})
	get := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodGet, path, nil)
		r.RemoteAddr = "127.0.0.1:40000"
		s.ServeHTTP(rec, r)
		return rec.Code, rec.Body.String()
	}
	tests := []struct {
		path     string
		ready    bool
		code     int
		contains string
	}{
		{"/metrics", false, 200, "m_total 1"},
		{"/healthz", false, 200, "ok"},
		{"/readyz", false, 503, "grpc: unreachable"},
		{"/readyz", true, 200, "ready"},
		{"/debug/pprof/", true, 200, "goroutine"},
	}
	for _, tt := range tests {
		ready = tt.ready
		code, body := get(tt.path)
		if code != tt.code || !strings.Contains(body, tt.contains) {
			t.Errorf("GET %s (ready=%v) = %d %q", tt.path, tt.ready, code, body)
		}
	}
}

// TestRemotePeersGetThePublicPathsOnly: in a pod the admin port is bound off
// loopback so that the kubelet and Prometheus reach it; everything else on
// it (profiles, traces, diagnosis, the JSON API) is for loopback peers — a
// kubectl port-forward, a shell in the pod — unless the remote API is on.
func TestRemotePeersGetThePublicPathsOnly(t *testing.T) {
	s := New(func(w io.Writer) { io.WriteString(w, "m_total 1\n") }, func() (bool, []string) { return true, nil })
	s.HandleJSON("/api/v1/stats", func(*http.Request) any { return []int{1} })
	get := func(peer, path string) int {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodGet, path, nil)
		r.RemoteAddr = peer
		s.ServeHTTP(rec, r)
		return rec.Code
	}
	for _, tc := range []struct {
		peer, path string
		remoteAPI  bool
		code       int
	}{
		{"10.1.2.3:40000", "/metrics", false, 200},
		{"10.1.2.3:40000", "/healthz", false, 200},
		{"10.1.2.3:40000", "/readyz", false, 200},
		{"10.1.2.3:40000", "/debug/pprof/", false, 403},
		{"10.1.2.3:40000", "/debug/pprof/profile", false, 403},
		{"10.1.2.3:40000", "/api/v1/stats", false, 403},
		{"[fd00::7]:40000", "/api/v1/stats", false, 403},
		{"127.0.0.1:40000", "/api/v1/stats", false, 200},
		{"[::1]:40000", "/debug/pprof/", false, 200},
		{"10.1.2.3:40000", "/api/v1/stats", true, 200},
	} {
		s.ServeRemoteAPI(tc.remoteAPI)
		if got := get(tc.peer, tc.path); got != tc.code {
			t.Errorf("GET %s from %s (remote API %v) = %d, want %d", tc.path, tc.peer, tc.remoteAPI, got, tc.code)
		}
	}
}
