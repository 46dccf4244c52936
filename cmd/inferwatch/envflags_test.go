package main

import (
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/internal/cmdline"

	"github.com/inferwatch/inferwatch/config"
)

// TestProxyEnvPrecedence: for the proxy's flags, the command line wins over
// INFERWATCH_* variables, which win over the YAML file, which wins over the
// defaults (and, for tracing, over OTEL_* variables).
func TestProxyEnvPrecedence(t *testing.T) {
	yaml := filepath.Join(t.TempDir(), "inferwatch.yaml")
	if err := os.WriteFile(yaml, []byte("admin_listen: 127.0.0.1:7001\npush:\n  interval: 7s\ntracing:\n  endpoint: yaml:4317\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	routes := []string{"--http-listen=:0", "--http-upstream=127.0.0.1:1"}
	tests := []struct {
		name   string
		args   []string
		env    map[string]string
		admin  string
		push   time.Duration
		otlp   string
		alerts []string
		sla    time.Duration
	}{
		{name: "defaults", admin: config.DefaultAdminListen, push: 10 * time.Second},
		{name: "OTEL_* below everything", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "otel:4317"},
			admin: config.DefaultAdminListen, push: 10 * time.Second, otlp: "otel:4317"},
		{name: "YAML over defaults and OTEL_*", args: []string{"--config=" + yaml}, env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "otel:4317"},
			admin: "127.0.0.1:7001", push: 7 * time.Second, otlp: "yaml:4317"},
		{name: "the YAML path from its variable", env: map[string]string{"INFERWATCH_CONFIG": yaml},
			admin: "127.0.0.1:7001", push: 7 * time.Second, otlp: "yaml:4317"},
		{name: "INFERWATCH_* over YAML", args: []string{"--config=" + yaml},
			env: map[string]string{"INFERWATCH_ADMIN_LISTEN": "127.0.0.1:7002", "INFERWATCH_PUSH_INTERVAL": "3s", "INFERWATCH_OTLP_ENDPOINT": "env:4317",
				"INFERWATCH_ALERTMANAGER_URL": "http://am1:9093,http://am2:9093", "INFERWATCH_SLA": "mnist-mlp=50ms"},
			admin: "127.0.0.1:7002", push: 3 * time.Second, otlp: "env:4317", alerts: []string{"http://am1:9093", "http://am2:9093"}, sla: 50 * time.Millisecond},
		{name: "flags over INFERWATCH_*", args: []string{"--config=" + yaml, "--admin-listen=127.0.0.1:7003", "--push-interval=1s", "--otlp-endpoint=flag:4317", "--sla=mnist-mlp=20ms"},
			env:   map[string]string{"INFERWATCH_ADMIN_LISTEN": "127.0.0.1:7002", "INFERWATCH_PUSH_INTERVAL": "3s", "INFERWATCH_OTLP_ENDPOINT": "env:4317", "INFERWATCH_SLA": "mnist-mlp=50ms"},
			admin: "127.0.0.1:7003", push: time.Second, otlp: "flag:4317", sla: 20 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED"} {
				t.Setenv(k, "")
			}
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			build := proxyFlags(fs)
			if err := cmdline.Parse(fs, append(append([]string{}, routes...), tt.args...)); err != nil {
				t.Fatal(err)
			}
			cfg, err := build()
			if err != nil {
				t.Fatal(err)
			}
			if cfg.AdminListen != tt.admin || cfg.Push.Interval.D() != tt.push || cfg.Tracing.Endpoint != tt.otlp {
				t.Errorf("admin %q push %v otlp %q, want %q %v %q", cfg.AdminListen, cfg.Push.Interval.D(), cfg.Tracing.Endpoint, tt.admin, tt.push, tt.otlp)
			}
			if strings.Join(cfg.Alerting.AlertmanagerURLs, " ") != strings.Join(tt.alerts, " ") {
				t.Errorf("alertmanager URLs %v, want %v", cfg.Alerting.AlertmanagerURLs, tt.alerts)
			}
			if got := cfg.Alerting.Rules.Models["mnist-mlp"].SLA; got != tt.sla {
				t.Errorf("SLA %v, want %v", got, tt.sla)
			}
		})
	}
}

// TestEnvBadValueNamesVariable runs the binary as a user would, with a
// variable it cannot use: it must refuse to start and name the variable.
func TestEnvBadValueNamesVariable(t *testing.T) {
	tests := []struct {
		cmd  string
		env  string
		want string
	}{
		{"proxy", "INFERWATCH_PUSH_INTERVAL=every minute", `INFERWATCH_PUSH_INTERVAL="every minute" (--push-interval)`},
		{"proxy", "INFERWATCH_NO_TRACING=maybe", `INFERWATCH_NO_TRACING="maybe" (--no-tracing)`},
		{"modelserver", "INFERWATCH_WORKERS=two", `INFERWATCH_WORKERS="two" (--workers)`},
	}
	for _, tt := range tests {
		t.Run(tt.env, func(t *testing.T) {
			cmd := exec.Command(binPath, tt.cmd)
			cmd.Env = append(os.Environ(), tt.env)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("inferwatch %s started with %s; output:\n%s", tt.cmd, tt.env, out)
			}
			if !strings.Contains(string(out), tt.want) {
				t.Errorf("output %q does not name the variable (%q)", out, tt.want)
			}
		})
	}
}

// TestRouteFlagsOverrideConfigRoutes: the route settings given as flags or
// variables (readiness, API hint, message limit, statistics polling, the
// HTTP upstream's protocol) override the config file's routes, as every
// other flag overrides the file; ungiven, the file's stand.
func TestRouteFlagsOverrideConfigRoutes(t *testing.T) {
	yaml := filepath.Join(t.TempDir(), "inferwatch.yaml")
	body := "routes:\n" +
		"  - {name: g, protocol: grpc, listen: ':0', upstream: '127.0.0.1:1', readiness: tcp, max_message_bytes: 1024}\n" +
		"  - {name: h, protocol: http, listen: ':0', upstream: '127.0.0.1:2', api_hint: kserve_v1, triton_stats: {interval: 9s}}\n"
	if err := os.WriteFile(yaml, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	build := func(t *testing.T, args []string, env map[string]string) config.Config {
		t.Helper()
		for k, v := range env {
			t.Setenv(k, v)
		}
		fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		b := proxyFlags(fs)
		if err := cmdline.Parse(fs, append([]string{"--config=" + yaml}, args...)); err != nil {
			t.Fatal(err)
		}
		cfg, err := b()
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	t.Run("given", func(t *testing.T) {
		cfg := build(t, []string{"--readiness=none", "--api-hint=tfserving", "--no-triton-stats", "--http-upstream-protocol=h2c"},
			map[string]string{"INFERWATCH_GRPC_MAX_MESSAGE_BYTES": "4096", "INFERWATCH_TRITON_STATS_INTERVAL": "3s"})
		for _, r := range cfg.Routes {
			if r.Readiness != "none" || r.APIHint != "tfserving" || r.MaxMessageBytes != 4096 || r.TritonStats.Interval.D() != 3*time.Second ||
				r.TritonStats.Enabled == nil || *r.TritonStats.Enabled {
				t.Errorf("route %s: %+v; want the flags' and variables' settings", r.Name, r)
			}
		}
		if cfg.Routes[1].UpstreamProtocol != "h2c" || cfg.Routes[0].UpstreamProtocol == "h2c" {
			t.Errorf("upstream protocols %q, %q; want the HTTP route's h2c", cfg.Routes[0].UpstreamProtocol, cfg.Routes[1].UpstreamProtocol)
		}
	})
	t.Run("not given", func(t *testing.T) {
		cfg := build(t, nil, nil)
		g, h := cfg.Routes[0], cfg.Routes[1]
		if g.Readiness != "tcp" || g.MaxMessageBytes != 1024 || h.APIHint != "kserve_v1" || h.TritonStats.Interval.D() != 9*time.Second || h.TritonStats.Enabled != nil {
			t.Errorf("routes %+v, %+v; want the file's settings", g, h)
		}
	})
}
