package sidecar

import (
	"fmt"
	"testing"

	"github.com/inferwatch/inferwatch/config"
)

func TestPollRoutesOncePerUpstreamHost(t *testing.T) {
	on, off := true, false
	r := func(proto, up string, enabled *bool) config.Route {
		return config.Route{Protocol: proto, Upstream: up, TritonStats: config.TritonStats{Enabled: enabled}}
	}
	tests := []struct {
		name   string
		routes []config.Route
		want   []bool
	}{
		{"grpc and http to one server: gRPC polls", []config.Route{r("http", "10.0.0.1:8000", nil), r("grpc", "10.0.0.1:8001", nil)}, []bool{false, true}},
		{"http alone polls", []config.Route{r("http", "10.0.0.1:8000", nil)}, []bool{true}},
		{"two servers each polled", []config.Route{r("grpc", "10.0.0.1:8001", nil), r("grpc", "10.0.0.2:8001", nil)}, []bool{true, true}},
		{"explicit wins", []config.Route{r("grpc", "h:1", &off), r("http", "h:2", nil), r("http", "h:3", &on)}, []bool{false, true, true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := pollRoutes(tt.routes); fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("pollRoutes = %v, want %v", got, tt.want)
			}
		})
	}
}
