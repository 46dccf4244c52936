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
		s.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
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
