package main

import (
	"context"
	"flag"
	"io"
	"os/signal"
	"strings"
	"syscall"

	"github.com/inferwatch/inferwatch/internal/cmdline"

	"github.com/inferwatch/inferwatch/inject"
	corev1 "k8s.io/api/core/v1"
)

// runInject serves the sidecar injector's mutating admission webhook.
func runInject(args []string, logw io.Writer) error {
	fs := flag.NewFlagSet("inject", flag.ContinueOnError)
	def := inject.DefaultConfig()
	listen := fs.String("listen", ":8443", "HTTPS address the apiserver calls")
	cert := fs.String("tls-cert", "", "PEM certificate chain (reloaded when the file changes)")
	key := fs.String("tls-key", "", "PEM private key")
	adminListen := fs.String("admin-listen", "127.0.0.1:9902", "address for /metrics, /healthz, /readyz (loopback by default)")
	image := fs.String("image", def.Image, "sidecar image injected")
	pull := fs.String("image-pull-policy", string(def.ImagePullPolicy), "Always, IfNotPresent or Never")
	cpuReq := fs.String("cpu-request", def.CPURequest, "sidecar CPU request (pods may override: inferwatch.io/cpu-request)")
	memReq := fs.String("memory-request", def.MemoryRequest, "sidecar memory request")
	cpuLim := fs.String("cpu-limit", def.CPULimit, "sidecar CPU limit (empty: none)")
	memLim := fs.String("memory-limit", def.MemoryLimit, "sidecar memory limit")
	push := fs.String("push-url", "", "default VictoriaMetrics import URL for injected sidecars")
	otlp := fs.String("otlp-endpoint", "", "default OTLP endpoint for injected sidecars")
	extra := fs.String("sidecar-args", "", "extra flags given to every sidecar, space separated")
	events := fs.Bool("events", true, "post a Kubernetes Event for every pod left uninjected (needs create and patch on events.k8s.io events)")
	kubeAPI := fs.String("kube-api", "", "Kubernetes API URL for Events (default: in-cluster, from KUBERNETES_SERVICE_HOST and the service account)")
	kubeToken := fs.String("kube-token-file", "", "bearer token file for --kube-api")
	kubeCA := fs.String("kube-ca-file", "", "PEM CA file for --kube-api (default: the system roots)")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	if err := cmdline.Parse(fs, args); err != nil {
		return err
	}
	var api *inject.APIServer
	if *events {
		if *kubeAPI != "" {
			api = &inject.APIServer{URL: *kubeAPI, TokenFile: *kubeToken, CAFile: *kubeCA}
		} else if a, ok := inject.InClusterAPIServer(); ok {
			api = &a
		}
	}
	cfg := inject.Config{
		Image: *image, ImagePullPolicy: corev1.PullPolicy(*pull),
		CPURequest: *cpuReq, MemoryRequest: *memReq, CPULimit: *cpuLim, MemoryLimit: *memLim,
		PushURL: *push, OTLPEndpoint: *otlp, ExtraArgs: strings.Fields(*extra),
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return inject.Serve(ctx, inject.ServeOptions{Listen: *listen, CertFile: *cert, KeyFile: *key, AdminListen: *adminListen, Events: api}, cfg, cmdline.Logger(logw, *logLevel))
}
