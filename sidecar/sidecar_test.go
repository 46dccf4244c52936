package sidecar

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/inferwatch/inferwatch/config"
	"github.com/inferwatch/inferwatch/internal/exposition"
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

// Two routes of one name (a YAML route named like the one a flag adds)
// stop New with the field named, instead of a panic registering their
// route-labelled gauges twice.
func TestNewRefusesDuplicateRouteNames(t *testing.T) {
	cfg := config.Default()
	cfg.Routes = []config.Route{
		{Name: "grpc", Protocol: "grpc", Listen: "127.0.0.1:0", Upstream: "127.0.0.1:1"},
		{Name: "grpc", Protocol: "http", Listen: "127.0.0.1:0", Upstream: "127.0.0.1:2"},
	}
	cfg.Finish()
	_, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil || !strings.Contains(err.Error(), `routes[1] (grpc).name: "grpc" is also the name of routes[0]`) {
		t.Fatalf("New: %v, want an error naming routes[1] (grpc).name", err)
	}
}

// A route's name is its metrics' route label, escaped as Prometheus text
// escapes it: Go's %q would write a tab as \t and a non-ASCII rune as \u…,
// escapes a strict parser refuses.
func TestRouteLabelEscaped(t *testing.T) {
	cfg := config.Default()
	cfg.AdminListen = "127.0.0.1:0"
	cfg.Routes = []config.Route{{Name: "grpc\tö \"x\"", Protocol: "grpc", Listen: "127.0.0.1:0", Upstream: "127.0.0.1:1", Readiness: "none"}}
	cfg.Host.GPUDisabled, cfg.Host.BPFDisabled = true, true
	cfg.Finish()
	s, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	s.metrics.Metrics().WritePrometheus(&b)
	p, err := exposition.Parse(b.String())
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	want := `inferwatch_inflight_requests{route="grpc` + "\t" + `ö \"x\""}`
	if _, ok := p.Series("inferwatch_inflight_requests")[want]; !ok {
		t.Fatalf("no %s in %v", want, p.Series("inferwatch_inflight_requests"))
	}
}

// TestGeneratorURL: the link Alertmanager shows as an alert's source must be
// one its users can open: alerting.external_url when set, else the admin
// address with an unspecified host ("" or 0.0.0.0, which Alertmanager's UI
// rendered as http://:9901/…) named by this host's name.
func TestGeneratorURL(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ admin, external, want string }{
		{"127.0.0.1:9901", "", "http://127.0.0.1:9901/api/v1/alerts"},
		{":9901", "", "http://" + host + ":9901/api/v1/alerts"},
		{"0.0.0.0:9901", "", "http://" + host + ":9901/api/v1/alerts"},
		{"[::]:9901", "", "http://" + host + ":9901/api/v1/alerts"},
		{"[::1]:9901", "", "http://[::1]:9901/api/v1/alerts"},
		{":9901", "https://inferwatch.example/triton-0/", "https://inferwatch.example/triton-0/api/v1/alerts"},
	} {
		s := &Sidecar{}
		s.cfg.AdminListen, s.cfg.Alerting.ExternalURL = tc.admin, tc.external
		if got := s.generatorURL(); got != tc.want {
			t.Errorf("admin %q, external %q: %q, want %q", tc.admin, tc.external, got, tc.want)
		}
	}
}

// A start that fails after the route and admin listeners are bound lets
// go of them: the caller exits or retries without Shutdown, and a port
// still held would refuse the next bind.
func TestFailedStartFreesPorts(t *testing.T) {
	tests := []struct {
		name    string
		breakIt func(c *config.Config) // a later step's option, past validation
		want    string
	}{
		{"host samplers", func(c *config.Config) { c.Host.BPFDisabled, c.Host.BPFBudget = false, -1 }, "host: bpf"},
		{"push", func(c *config.Config) { c.Push.URL, c.Push.Interval = "http://127.0.0.1:1/api/v1/import/prometheus", 0 }, "push:"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			route, admin := freePort(t), freePort(t)
			cfg := config.Default()
			cfg.AdminListen = admin
			cfg.Routes = []config.Route{{Name: "grpc", Protocol: "grpc", Listen: route, Upstream: "127.0.0.1:1", Readiness: "none"}}
			cfg.Host.GPUDisabled, cfg.Host.BPFDisabled = true, true
			cfg.Finish()
			s, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err != nil {
				t.Fatal(err)
			}
			tc.breakIt(&s.cfg)
			err = s.Start(context.Background())
			if err == nil {
				s.Shutdown(context.Background())
				t.Fatal("Start succeeded; want the broken step's error")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Start: %v, want %q", err, tc.want)
			}
			for _, addr := range []string{route, admin} {
				l, err := net.Listen("tcp", addr)
				if err != nil {
					t.Fatalf("after the failed start %s is still bound: %v", addr, err)
				}
				l.Close()
			}
		})
	}
}

// freePort is a loopback address nothing listens on.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
