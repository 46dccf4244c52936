// Package admin serves the sidecar's own endpoints, apart from the data
// plane: /metrics for scrapers, /healthz and /readyz for the kubelet, and
// the JSON API later features hang under /api/v1/. It binds to loopback
// unless told otherwise; bound off loopback (in a pod, for the kubelet and
// Prometheus), it serves those three to every peer and the rest (profiles,
// traces, diagnosis, the JSON API) to loopback peers only, unless its
// remote API is turned on.
package admin

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"sync/atomic"
)

// Ready reports readiness and, when not ready, why.
type Ready func() (bool, []string)

// Server is the admin HTTP handler.
type Server struct {
	mux       *http.ServeMux
	remoteAPI atomic.Bool
}

// ServeRemoteAPI serves every endpoint to peers off loopback too, not only
// /metrics, /healthz and /readyz.
func (s *Server) ServeRemoteAPI(on bool) { s.remoteAPI.Store(on) }

// public reports the paths every peer may read: what scrapers and the
// kubelet need, and the index page.
func public(path string) bool {
	switch path {
	case "/metrics", "/healthz", "/readyz", "/":
		return true
	}
	return false
}

// loopback reports whether a request's peer is on this host.
func loopback(remoteAddr string) bool {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
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
	// Profiles on the admin port only, for loopback peers unless the
	// remote API is on.
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

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !public(r.URL.Path) && !s.remoteAPI.Load() && !loopback(r.RemoteAddr) {
		// Profiles can cost a core for their duration, and traces and
		// diagnoses name models and callers: not for the whole cluster.
		http.Error(w, "inferwatch admin: "+r.URL.Path+" is served to loopback peers only (kubectl port-forward, or admin_remote_api: true / --admin-remote-api to serve it to all)", http.StatusForbidden)
		return
	}
	s.mux.ServeHTTP(w, r)
}
