// Package admin serves the sidecar's own endpoints, apart from the data
// plane: /metrics for scrapers, /healthz and /readyz for the kubelet, and
// the JSON API later features hang under /api/v1/. It binds to loopback
// unless told otherwise.
package admin

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/pprof"
	"strings"
)

// Ready reports readiness and, when not ready, why.
type Ready func() (bool, []string)

// Server is the admin HTTP handler.
type Server struct {
	mux *http.ServeMux
}

// New builds the admin handler. metrics writes the Prometheus exposition.
func New(metrics func(io.Writer), ready Ready) *Server {
	s := &Server{mux: http.NewServeMux()}
	s.mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		metrics(w)
	})
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok\n")
	})
	s.mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ok, why := ready()
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, "not ready: "+strings.Join(why, "; ")+"\n")
			return
		}
		io.WriteString(w, "ready\n")
	})
	// Profiles on the admin port only, which binds to loopback by default.
	s.mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	s.mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	s.mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	s.mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	s.mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, `<html><body><h1>inferwatch</h1><ul><li><a href="/metrics">/metrics</a></li><li><a href="/healthz">/healthz</a></li><li><a href="/readyz">/readyz</a></li></ul></body></html>`)
	})
	return s
}

// HandleJSON serves v at path as JSON, computed per request.
func (s *Server) HandleJSON(path string, v func(r *http.Request) any) {
	s.mux.HandleFunc("GET "+path, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(v(r))
	})
}

// Handle adds another handler.
func (s *Server) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }
