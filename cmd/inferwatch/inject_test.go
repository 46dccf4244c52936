package main

import (
	"encoding/json"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestInjectFlagErrors: a mistake in the injector's flags stops start-up
// with a message naming the flag.
func TestInjectFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls-key=k"}, "tls-cert"},
		{[]string{"--tls-cert=c", "--tls-key=k", "--image-pull-policy=Sometimes"}, "image-pull-policy"},
		{[]string{"--tls-cert=c", "--tls-key=k", "--memory-limit=big"}, "memory-limit"},
		{[]string{"--tls-cert=c", "--tls-key=k", "--push-url=vm:8428"}, "push-url"},
		{[]string{"--tls-cert=/nonexistent/c", "--tls-key=/nonexistent/k"}, "tls-cert"},
		{[]string{"--tls-cert=c", "--tls-key=k", "--kube-api=http://127.0.0.1:6443", "--kube-token-file=/dev/null"}, "kube-api"},
		{[]string{"--tls-cert=c", "--tls-key=k", "--kube-api=https://127.0.0.1:6443"}, "kube-token-file"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			err := runInject(tc.args, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want one naming %s", err, tc.want)
			}
		})
	}
}

// TestInjectedArgsAccepted: the sidecar flags in every golden patch of
// inject/testdata are flags `inferwatch proxy` knows, and the config they
// build validates — with $(POD_IP) expanded as the kubelet does.
func TestInjectedArgsAccepted(t *testing.T) {
	files, err := filepath.Glob("../../inject/testdata/golden/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no goldens: %v", err)
	}
	n := 0
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var g struct {
			Patch []struct {
				Path  string          `json:"path"`
				Value json.RawMessage `json:"value"`
			} `json:"patch"`
		}
		if err := json.Unmarshal(raw, &g); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, op := range g.Patch {
			if op.Path != "/spec/containers/-" {
				continue
			}
			var c corev1.Container
			if err := json.Unmarshal(op.Value, &c); err != nil {
				t.Fatal(err)
			}
			t.Run(filepath.Base(f), func(t *testing.T) {
				n++
				if c.Args[0] != "proxy" {
					t.Fatalf("args %v", c.Args)
				}
				var args []string
				for _, a := range c.Args[1:] {
					args = append(args, strings.ReplaceAll(a, "$(POD_IP)", "10.1.2.3"))
				}
				fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
				fs.SetOutput(io.Discard)
				build := proxyFlags(fs)
				if err := fs.Parse(args); err != nil {
					t.Fatalf("proxy rejects the injected flags %v: %v", args, err)
				}
				if _, err := build(); err != nil {
					t.Fatalf("injected flags %v do not make a valid config: %v", args, err)
				}
			})
		}
	}
	if n < 3 {
		t.Errorf("%d injected sidecars checked, want the 3 injected goldens", n)
	}
}

// TestOTELFlagsOverrideEnv: the proxy's flags win over OTEL_* variables,
// which win over the built-in defaults.
func TestOTELFlagsOverrideEnv(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4318")
	for _, tc := range []struct {
		args           []string
		endpoint, prot string
	}{
		{nil, "http://env:4318/v1/traces", "http"},
		{[]string{"--otlp-endpoint=flag:4317"}, "flag:4317", "http"},
		{[]string{"--otlp-endpoint=flag:4317", "--otlp-protocol=grpc"}, "flag:4317", "grpc"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
			build := proxyFlags(fs)
			if err := fs.Parse(append([]string{"--http-listen=:0", "--http-upstream=127.0.0.1:1"}, tc.args...)); err != nil {
				t.Fatal(err)
			}
			cfg, err := build()
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Tracing.Endpoint != tc.endpoint || cfg.Tracing.Protocol != tc.prot {
				t.Errorf("endpoint %q protocol %q, want %q %q", cfg.Tracing.Endpoint, cfg.Tracing.Protocol, tc.endpoint, tc.prot)
			}
		})
	}
}
