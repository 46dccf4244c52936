package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/internal/testenv"
)

// A Jaeger all-in-one (v2 config) with in-memory storage on given ports.
const otelEnvJaegerConfig = `service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces: {receivers: [otlp], processors: [batch], exporters: [jaeger_storage_exporter]}
  telemetry: {metrics: {level: none}, logs: {level: warn}}
extensions:
  jaeger_query:
    storage: {traces: mem}
    enable_tracing: false
    http: {endpoint: %[1]s}
    grpc: {endpoint: %[2]s}
  jaeger_storage:
    backends: {mem: {memory: {max_traces: 10000}}}
receivers:
  otlp:
    protocols: {grpc: {endpoint: %[3]s}, http: {endpoint: %[4]s}}
processors:
  batch: {timeout: 50ms}
exporters:
  jaeger_storage_exporter: {trace_storage: mem}
`

// startJaegerBin runs bin/jaeger (tools/README.md) and returns its query
// and OTLP/HTTP addresses once both answer.
func startJaegerBin(t *testing.T) (query, otlpGRPC, otlpHTTP string) {
	t.Helper()
	bin := testenv.ToolBinary(t, filepath.Join("..", ".."), "jaeger", "INFERWATCH_JAEGER", "cd tools && go build -o ../bin/jaeger github.com/jaegertracing/jaeger/cmd/jaeger")
	query, otlpGRPC, otlpHTTP = testenv.FreeAddr(t), testenv.FreeAddr(t), testenv.FreeAddr(t)
	cfg := filepath.Join(t.TempDir(), "jaeger.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, otelEnvJaegerConfig, query, testenv.FreeAddr(t), otlpGRPC, otlpHTTP), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd := exec.Command(bin, "--config", "file:"+cfg)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("jaeger output:\n%s", out.String())
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case err := <-exited:
			t.Fatalf("jaeger exited: %v\n%s", err, out.String())
		default:
		}
		if res, err := http.Get("http://" + query + "/api/services"); err == nil {
			res.Body.Close()
			if c, err := net.DialTimeout("tcp", otlpHTTP, time.Second); err == nil {
				c.Close()
				if res.StatusCode == 200 {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("jaeger not ready after 60s\n%s", out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func jaegerServices(t *testing.T, query string) []string {
	t.Helper()
	res, err := http.Get("http://" + query + "/api/services")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var body struct {
		Data []string `json:"data"`
	}
	json.NewDecoder(res.Body).Decode(&body)
	return body.Data
}

// TestOTELEnvExport: a sidecar given no tracing flag and no config file, only
// the OpenTelemetry SDK's variables, exports its spans to the endpoint they
// name (OTLP/HTTP, the specification's default protocol) under
// OTEL_SERVICE_NAME; with OTEL_SDK_DISABLED=true it exports none.
func TestOTELEnvExport(t *testing.T) {
	query, _, otlpHTTP := startJaegerBin(t)
	_, _, msHTTP := startModelServerProc(t, "127.0.0.1:0", "127.0.0.1:0")
	for _, tc := range []struct {
		name     string
		env      map[string]string
		exported bool
	}{
		{"endpoint only", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + otlpHTTP, "OTEL_SERVICE_NAME": "iw-otelenv-on"}, true},
		{"sdk disabled", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + otlpHTTP, "OTEL_SERVICE_NAME": "iw-otelenv-off", "OTEL_SDK_DISABLED": "true"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			px := startProxy(t, "--http-listen", "127.0.0.1:0", "--http-upstream", msHTTP, "--admin-listen", "127.0.0.1:0", "--no-gpu", "--no-bpf")
			px.waitReady(t, 10*time.Second)
			inferHTTP(t, px.httpAddr, 20)
			service := tc.env["OTEL_SERVICE_NAME"]
			deadline := time.Now().Add(15 * time.Second)
			if !tc.exported {
				deadline = time.Now().Add(4 * time.Second) // batches leave within 1 s; wait well past that
			}
			for time.Now().Before(deadline) {
				if slices.Contains(jaegerServices(t, query), service) {
					break
				}
				time.Sleep(200 * time.Millisecond)
			}
			got := slices.Contains(jaegerServices(t, query), service)
			if got != tc.exported {
				t.Fatalf("service %s in Jaeger: %v, want %v (services %v)", service, got, tc.exported, jaegerServices(t, query))
			}
			if tc.exported {
				res, err := http.Get("http://" + query + "/api/traces?service=" + service + "&limit=50")
				if err != nil {
					t.Fatal(err)
				}
				var body struct {
					Data []struct {
						Spans []struct{ OperationName string } `json:"spans"`
					} `json:"data"`
				}
				json.NewDecoder(res.Body).Decode(&body)
				res.Body.Close()
				if len(body.Data) == 0 || len(body.Data[0].Spans) == 0 {
					t.Errorf("no spans under %s", service)
				}
			}
			px.signal(syscall.SIGTERM)
			px.wait(20 * time.Second)
		})
	}
}
