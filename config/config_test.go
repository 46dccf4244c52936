package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func write(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadGood(t *testing.T) {
	p := write(t, `
admin_listen: 127.0.0.1:9999
drain_timeout: 5s
routes:
  - name: triton-grpc
    protocol: grpc
    listen: :8001
    upstream: 127.0.0.1:18001
  - protocol: http
    listen: :8000
    upstream: 127.0.0.1:18000
    api_hint: tfserving
push:
  url: http://127.0.0.1:8428/api/v1/import/prometheus
  extra_labels: {pod: p-1, namespace: ml}
`)
	c, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	c.Finish()
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	if c.DrainTimeout.D().Seconds() != 5 || len(c.Routes) != 2 || c.Routes[1].Name != "http-1" || c.Routes[1].UpstreamProtocol != "http1" {
		t.Fatalf("unexpected config: %+v", c)
	}
	if c.Routes[0].MaxMessageBytes != DefaultMaxMessageBytes || c.Routes[0].TritonStats.Enabled != nil {
		t.Fatalf("route defaults not filled: %+v", c.Routes[0])
	}
}

// The floors and the baseline block load from YAML.
func TestLoadBaselineAndFloors(t *testing.T) {
	c, err := Load(write(t, "alerting: {rules: {defaults: {p99_min_excess: 5ms, stddev_min_excess: -1ns}}, baseline: {history_path: /tmp/h.json, speedup: 60}}\nroutes: [{protocol: grpc, listen: ':1', upstream: 'h:2'}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	c.Finish()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	d := c.Alerting.Rules.Defaults
	if d.P99MinExcess != 5*time.Millisecond || d.StdDevMinExcess != -1 || c.Alerting.Baseline.Speedup != 60 || c.Alerting.Baseline.HistoryPath != "/tmp/h.json" {
		t.Fatalf("loaded %+v %+v", d, c.Alerting.Baseline)
	}
}

// A TTFT SLO per model loads from YAML, and a bad one names its field.
func TestLoadTTFTSLO(t *testing.T) {
	c, err := Load(write(t, "alerting: {rules: {models: {llama: {ttft_slo: 500ms, ttft_for: 2}}}}\nroutes: [{protocol: http, listen: ':1', upstream: 'h:2'}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	c.Finish()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if m := c.Alerting.Rules.Models["llama"]; m.TTFTSLO != 500*time.Millisecond || m.TTFTFor != 2 {
		t.Fatalf("loaded %+v", m)
	}
	_, err = Load(write(t, "alerting: {rules: {models: {llama: {ttft_slo: soon}}}}\nroutes: [{protocol: http, listen: ':1', upstream: 'h:2'}]\n"))
	if err == nil || !strings.Contains(err.Error(), "ttft_slo") {
		t.Fatalf("err %v, want one naming ttft_slo", err)
	}
}

func TestErrorsNameTheField(t *testing.T) {
	tests := []struct {
		name, yaml, want string
	}{
		{"unknown field", "routes:\n  - protocl: grpc\n", "protocl"},
		{"bad duration", "drain_timeout: soon\n", "drain_timeout: line 1"},
		{"bad nested duration", "routes:\n  - protocol: grpc\n    triton_stats: {interval: 5x}\n", "routes[0].triton_stats.interval: line 3"},
		{"bad rule duration", "alerting:\n  rules:\n    defaults:\n      sla: x\n", "alerting.rules.defaults.sla: line 4: cannot unmarshal"},
		{"bad model floor", "alerting:\n  rules:\n    models:\n      resnet: {p99_min_excess: fast}\n", "alerting.rules.models.resnet.p99_min_excess: line 4"},
		{"no routes", "admin_listen: 127.0.0.1:1\n", "routes: no listen/upstream pair"},
		{"bad protocol", "routes: [{protocol: udp, listen: ':1', upstream: 'h:2'}]\n", "routes[0] (udp-0).protocol"},
		{"upstream without port", "routes: [{protocol: grpc, listen: ':1', upstream: 'h'}]\n", "routes[0] (grpc-0).upstream"},
		// A route's name labels its metrics (route="..."): two routes of
		// one name would register one series twice.
		{"duplicate name", "routes: [{name: triton, protocol: grpc, listen: ':1', upstream: 'h:2'}, {name: triton, protocol: http, listen: ':2', upstream: 'h:3'}]\n", `routes[1] (triton).name: "triton" is also the name of routes[0]`},
		{"name like a default", "routes: [{name: http-1, protocol: grpc, listen: ':1', upstream: 'h:2'}, {protocol: http, listen: ':2', upstream: 'h:3'}]\n", `routes[1] (http-1).name: "http-1" is also the name of routes[0]`},
		{"duplicate listen", "routes: [{protocol: grpc, listen: ':1', upstream: 'h:2'}, {protocol: http, listen: ':1', upstream: 'h:3'}]\n", "routes[1] (http-1).listen"},
		{"tls half", "routes: [{protocol: grpc, listen: ':1', upstream: 'h:2', tls: {cert_file: /nonexistent}}]\n", "tls.cert_file"},
		{"push url", "push: {url: 'ftp://x'}\nroutes: [{protocol: grpc, listen: ':1', upstream: 'h:2'}]\n", "push.url"},
		{"label name", "push: {extra_labels: {'bad-name': x}}\nroutes: [{protocol: grpc, listen: ':1', upstream: 'h:2'}]\n", "push.extra_labels"},
		{"sample", "limits: {decode_sample: 2}\nroutes: [{protocol: grpc, listen: ':1', upstream: 'h:2'}]\n", "limits.decode_sample"},
		// NaN fails every comparison: each float is checked as what must hold.
		{"sample nan", "limits: {decode_sample: .nan}\nroutes: [{protocol: grpc, listen: ':1', upstream: 'h:2'}]\n", "limits.decode_sample"},
		{"bpf budget nan", "host: {bpf_budget: .nan}\nroutes: [{protocol: grpc, listen: ':1', upstream: 'h:2'}]\n", "host.bpf_budget"},
		{"tracing floor nan", "tracing: {floor: .nan}\nroutes: [{protocol: grpc, listen: ':1', upstream: 'h:2'}]\n", "tracing.floor"},
		{"tracing target inf", "tracing: {target_per_second: .inf}\nroutes: [{protocol: grpc, listen: ':1', upstream: 'h:2'}]\n", "tracing.target_per_second"},
		{"memory leak min rise nan", "alerting: {memory_leak: {min_rise: .nan}}\nroutes: [{protocol: grpc, listen: ':1', upstream: 'h:2'}]\n", "alerting.memory_leak.min_rise"},
		{"budget below decode", "limits: {capture_budget: 2097152, decode_max_bytes: 4194304}\nroutes: [{protocol: grpc, listen: ':1', upstream: 'h:2'}]\n", "limits.capture_budget"},
		{"baseline history", "alerting: {baseline: {history: 1h}}\nroutes: [{protocol: grpc, listen: ':1', upstream: 'h:2'}]\n", "alerting.baseline: history 1h"},
		{"baseline speedup", "alerting: {baseline: {speedup: -2}}\nroutes: [{protocol: grpc, listen: ':1', upstream: 'h:2'}]\n", "alerting.baseline: speedup"},
		{"memory leak interval", "alerting: {memory_leak: {interval: -1s}}\nroutes: [{protocol: grpc, listen: ':1', upstream: 'h:2'}]\n", "alerting.memory_leak.interval"},
		{"memory leak min span", "alerting: {memory_leak: {span: 1h, min_span: 2h}}\nroutes: [{protocol: grpc, listen: ':1', upstream: 'h:2'}]\n", "alerting.memory_leak.min_span"},
		{"memory leak device min rise", "alerting: {memory_leak: {device_min_rise_mib: -1}}\nroutes: [{protocol: grpc, listen: ':1', upstream: 'h:2'}]\n", "alerting.memory_leak.device_min_rise_mib"},
		{"bad size", "host: {upstream_memory_limit: 4 gigs}\nroutes: [{protocol: grpc, listen: ':1', upstream: 'h:2'}]\n", "host.upstream_memory_limit: line 1"},
		{"admin", "admin_listen: nope\nroutes: [{protocol: grpc, listen: ':1', upstream: 'h:2'}]\n", "admin_listen"},
		{"external url", "alerting: {external_url: 'iw.example:9901'}\nroutes: [{protocol: grpc, listen: ':1', upstream: 'h:2'}]\n", "alerting.external_url"},
		{"external url query", "alerting: {external_url: 'https://iw.example/?tenant=a'}\nroutes: [{protocol: grpc, listen: ':1', upstream: 'h:2'}]\n", "alerting.external_url"},
		{"external url fragment", "alerting: {external_url: 'https://iw.example/#/alerts'}\nroutes: [{protocol: grpc, listen: ':1', upstream: 'h:2'}]\n", "alerting.external_url"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(write(t, tt.yaml))
			if err == nil {
				c.Finish()
				err = c.Validate()
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v does not mention %q", err, tt.want)
			}
		})
	}
}

func TestParseBytes(t *testing.T) {
	tests := []struct {
		in   string
		want Bytes
		bad  bool
	}{
		{in: "268435456", want: 268435456},
		{in: "256Mi", want: 256 << 20},
		{in: "2Gi", want: 2 << 30},
		{in: "1G", want: 1e9},
		{in: "512k", want: 512e3},
		{in: " 0 ", want: 0},
		{in: "1.5Gi", bad: true},
		{in: "-1", bad: true},
		{in: "Mi", bad: true},
		{in: "9000000Ti", bad: true}, // overflows
		{in: "4 gigs", bad: true},
	}
	for _, tc := range tests {
		got, err := ParseBytes(tc.in)
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d, error %v", tc.in, got, err, tc.want, tc.bad)
		}
	}
	c, err := Load(write(t, "host: {upstream_memory_limit: 2Gi}\nroutes: [{protocol: grpc, listen: ':1', upstream: 'h:2'}]\n"))
	if err != nil || c.Host.UpstreamMemoryLimit != 2<<30 {
		t.Fatalf("loaded %d, %v", c.Host.UpstreamMemoryLimit, err)
	}
}
