package config

import (
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestApplyOTELEnv(t *testing.T) {
	base := Tracing{Protocol: "grpc", Insecure: true, Keep: 200}
	for _, tc := range []struct {
		name string
		env  map[string]string
		want Tracing
	}{
		{"none", nil, base},
		{"endpoint alone is OTLP/HTTP with the signal path", map[string]string{EnvOTLPEndpoint: "http://collector:4318/"},
			Tracing{Protocol: "http", Insecure: true, Keep: 200, Endpoint: "http://collector:4318/v1/traces"}},
		{"grpc keeps the URL", map[string]string{EnvOTLPEndpoint: "http://collector:4317", EnvOTLPProtocol: "grpc"},
			Tracing{Protocol: "grpc", Insecure: true, Keep: 200, Endpoint: "http://collector:4317"}},
		{"traces endpoint as is, and wins", map[string]string{EnvOTLPEndpoint: "http://a:4318", EnvOTLPTracesEndpoint: "https://b/otlp/traces"},
			Tracing{Protocol: "http", Insecure: true, Keep: 200, Endpoint: "https://b/otlp/traces"}},
		{"traces protocol wins", map[string]string{EnvOTLPEndpoint: "http://a:4317", EnvOTLPProtocol: "http/protobuf", EnvOTLPTracesProtocol: "grpc"},
			Tracing{Protocol: "grpc", Insecure: true, Keep: 200, Endpoint: "http://a:4317"}},
		{"http/json is passed on for Validate to refuse", map[string]string{EnvOTLPProtocol: "http/json"},
			Tracing{Protocol: "http/json", Insecure: true, Keep: 200}},
		{"headers decoded, malformed skipped, per-signal wins", map[string]string{EnvOTLPHeaders: "api-key=a%20b,broken,x=1", EnvOTLPTracesHeaders: "x=2"},
			Tracing{Protocol: "grpc", Insecure: true, Keep: 200, Headers: map[string]string{"api-key": "a b", "x": "2"}}},
		{"service name and resource", map[string]string{EnvServiceName: "triton-sidecar", EnvResourceAttributes: "deployment.environment=prod,service.name=other"},
			Tracing{Protocol: "grpc", Insecure: true, Keep: 200, ServiceName: "triton-sidecar", Resource: map[string]string{"deployment.environment": "prod", "service.name": "other"}}},
		{"service.name from the resource", map[string]string{EnvResourceAttributes: "service.name=from-attrs"},
			Tracing{Protocol: "grpc", Insecure: true, Keep: 200, ServiceName: "from-attrs", Resource: map[string]string{"service.name": "from-attrs"}}},
		{"sdk disabled", map[string]string{EnvSDKDisabled: "TRUE", EnvOTLPEndpoint: "http://a:4318"},
			Tracing{Disabled: true, Protocol: "http", Insecure: true, Keep: 200, Endpoint: "http://a:4318/v1/traces"}},
		{"sdk disabled only by true", map[string]string{EnvSDKDisabled: "1"}, base},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := base
			applyOTELEnv(&got, func(k string) string { return tc.env[k] })
			if got.Disabled != tc.want.Disabled || got.Protocol != tc.want.Protocol || got.Endpoint != tc.want.Endpoint ||
				got.ServiceName != tc.want.ServiceName || !maps.Equal(got.Headers, tc.want.Headers) || !maps.Equal(got.Resource, tc.want.Resource) {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// TestOTELEnvBelowYAML: the YAML file overrides the environment, and a bad
// protocol from the environment is refused naming the variable.
func TestOTELEnvBelowYAML(t *testing.T) {
	t.Setenv(EnvOTLPEndpoint, "http://env:4318")
	t.Setenv(EnvServiceName, "from-env")
	p := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(p, []byte("tracing:\n  endpoint: yaml:4317\n  protocol: grpc\n"), 0o644)
	cfg, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Tracing.Endpoint != "yaml:4317" || cfg.Tracing.Protocol != "grpc" || cfg.Tracing.ServiceName != "from-env" {
		t.Errorf("tracing %+v: YAML must win over the environment, which fills the rest", cfg.Tracing)
	}
	t.Setenv(EnvOTLPProtocol, "http/json")
	d := Default()
	if err := d.Validate(); err == nil || !strings.Contains(err.Error(), EnvOTLPProtocol) {
		t.Errorf("Validate: %v, want an error naming %s", err, EnvOTLPProtocol)
	}
}
