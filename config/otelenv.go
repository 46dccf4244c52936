package config

import (
	"net/url"
	"os"
	"strings"
)

// The OpenTelemetry SDK's standard environment variables, honoured as
// defaults below the YAML file and the flags (which override them):
// https://opentelemetry.io/docs/specs/otel/configuration/sdk-environment-variables/
// and .../protocol/exporter/.
const (
	EnvOTLPEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"        // base URL; /v1/traces is appended for OTLP/HTTP
	EnvOTLPTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" // used as is
	EnvOTLPProtocol       = "OTEL_EXPORTER_OTLP_PROTOCOL"        // grpc, http/protobuf (the spec's default)
	EnvOTLPTracesProtocol = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	EnvOTLPHeaders        = "OTEL_EXPORTER_OTLP_HEADERS" // k=v,k2=v2, values percent-encoded
	EnvOTLPTracesHeaders  = "OTEL_EXPORTER_OTLP_TRACES_HEADERS"
	EnvServiceName        = "OTEL_SERVICE_NAME"
	EnvResourceAttributes = "OTEL_RESOURCE_ATTRIBUTES" // k=v,k2=v2
	EnvSDKDisabled        = "OTEL_SDK_DISABLED"        // "true": no spans at all
)

// applyOTELEnv fills t from the OTEL_* variables that are set.
func applyOTELEnv(t *Tracing, getenv func(string) string) {
	if strings.EqualFold(strings.TrimSpace(getenv(EnvSDKDisabled)), "true") {
		t.Disabled = true
	}
	proto := getenv(EnvOTLPTracesProtocol)
	if proto == "" {
		proto = getenv(EnvOTLPProtocol)
	}
	endpoint, perSignal := getenv(EnvOTLPTracesEndpoint), true
	if endpoint == "" {
		endpoint, perSignal = getenv(EnvOTLPEndpoint), false
	}
	if endpoint != "" && proto == "" {
		proto = "http/protobuf" // the specification's default
	}
	switch proto {
	case "":
	case "grpc":
		t.Protocol = "grpc"
	case "http/protobuf":
		t.Protocol = "http"
	default:
		t.Protocol = proto // http/json and others: Validate names the field
	}
	if endpoint != "" {
		if t.Protocol == "http" && !perSignal {
			endpoint = strings.TrimRight(endpoint, "/") + "/v1/traces"
		}
		t.Endpoint = endpoint
	}
	for _, name := range []string{EnvOTLPHeaders, EnvOTLPTracesHeaders} { // per-signal wins
		for k, v := range parseKV(getenv(name)) {
			if t.Headers == nil {
				t.Headers = map[string]string{}
			}
			t.Headers[k] = v
		}
	}
	if v := getenv(EnvServiceName); v != "" {
		t.ServiceName = v
	}
	if attrs := parseKV(getenv(EnvResourceAttributes)); len(attrs) > 0 {
		t.Resource = attrs
		if t.ServiceName == "" && attrs["service.name"] != "" {
			t.ServiceName = attrs["service.name"]
		}
	}
}

// parseKV reads the W3C-baggage-like k=v,k2=v2 lists of the OTEL_*
// variables; malformed members are skipped, as the specification says.
func parseKV(s string) map[string]string {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	out := map[string]string{}
	for _, m := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(m, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			continue
		}
		if dv, err := url.PathUnescape(strings.TrimSpace(v)); err == nil {
			out[k] = dv
		}
	}
	return out
}

var osGetenv = os.Getenv
