package proxy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/grpc"

	"github.com/inferwatch/inferwatch/proto/inference"
	"github.com/inferwatch/inferwatch/proto/torchserve"
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
		{"TorchServe unhealthy", map[string]int{"/ping": 500}, false, "/ping answered 500"},
		// vLLM answers /ping and /health with 503 while draining or dead.
		{"vLLM healthy", map[string]int{"/ping": 200, "/health": 200}, true, ""},
		{"vLLM dead", map[string]int{"/ping": 503, "/health": 503}, false, "/ping answered 503"},
		{"TGI unhealthy", map[string]int{"/health": 503}, false, "/health answered 503"},
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

// readyServer answers KServe's ServerReady as told.
type readyServer struct {
	inference.UnimplementedGRPCInferenceServiceServer
	ready bool
}

func (s readyServer) ServerReady(context.Context, *inference.ServerReadyRequest) (*inference.ServerReadyResponse, error) {
	return &inference.ServerReadyResponse{Ready: s.ready}, nil
}

// pingServer answers TorchServe's Ping as TorchServe does: status OK, the
// health in the text.
type pingServer struct {
	torchserve.UnimplementedInferenceAPIsServiceServer
	health string
}

func (s pingServer) Ping(context.Context, *torchserve.PingRequest) (*torchserve.TorchServeHealthResponse, error) {
	return &torchserve.TorchServeHealthResponse{Health: s.health}, nil
}

// TestGRPCProbeAuto: the auto probe of a gRPC upstream asks KServe's
// ServerReady; a server without it that answers TorchServe's Ping is ready
// as Ping says; a server with neither is ready once reachable.
func TestGRPCProbeAuto(t *testing.T) {
	tests := []struct {
		name     string
		register func(*grpc.Server)
		ready    bool
		reason   string
	}{
		{"KServe ready", func(s *grpc.Server) { inference.RegisterGRPCInferenceServiceServer(s, readyServer{ready: true}) }, true, ""},
		{"KServe not ready", func(s *grpc.Server) { inference.RegisterGRPCInferenceServiceServer(s, readyServer{}) }, false, "ServerReady says not ready"},
		{"TorchServe healthy", func(s *grpc.Server) {
			torchserve.RegisterInferenceAPIsServiceServer(s, pingServer{health: `{"status": "Healthy", "code": 200}`})
		}, true, ""},
		{"TorchServe unhealthy", func(s *grpc.Server) {
			torchserve.RegisterInferenceAPIsServiceServer(s, pingServer{health: `{"status": "Unhealthy", "code": 500}`})
		}, false, "TorchServe Ping says Unhealthy"},
		{"neither", func(*grpc.Server) {}, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := grpc.NewServer()
			tt.register(s)
			l := listen(t)
			go s.Serve(l)
			defer s.Stop()
			p := Probe{Name: "grpc", Upstream: l.Addr().String(), GRPC: true, Kind: ProbeAuto,
				Transport: NewTransport(TransportOptions{Protocol: UpstreamHTTP2, Addr: l.Addr().String()})}
			ready, reason := p.check(context.Background())
			if ready != tt.ready || !strings.Contains(reason, tt.reason) {
				t.Errorf("ready %v (%q), want %v (%q)", ready, reason, tt.ready, tt.reason)
			}
		})
	}
}
