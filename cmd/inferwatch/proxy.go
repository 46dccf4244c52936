package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/inferwatch/inferwatch/internal/cmdline"

	"github.com/inferwatch/inferwatch/alerting"
	"github.com/inferwatch/inferwatch/config"
	"github.com/inferwatch/inferwatch/sidecar"
)

// proxyFlags binds the proxy's flags; they override the --config file.
func proxyFlags(fs *flag.FlagSet) func() (config.Config, error) {
	var (
		cfgPath     = fs.String("config", "", "YAML config file (flags given override it)")
		grpcListen  = fs.String("grpc-listen", "", "gRPC listen address, e.g. :8001")
		grpcUp      = fs.String("grpc-upstream", "", "gRPC upstream host:port, e.g. 127.0.0.1:18001")
		httpListen  = fs.String("http-listen", "", "HTTP listen address, e.g. :8000")
		httpUp      = fs.String("http-upstream", "", "HTTP upstream host:port")
		httpUpProto = fs.String("http-upstream-protocol", "", "http1 (default) or h2c")
		adminListen = fs.String("admin-listen", config.DefaultAdminListen, "admin address for /metrics, /healthz, /readyz (loopback by default)")
		adminRemote = fs.Bool("admin-remote-api", false, "serve profiles, traces, diagnosis and the JSON API to peers off loopback too (by default only /metrics, /healthz, /readyz)")
		pushURL     = fs.String("push-url", "", "VictoriaMetrics import URL to push metrics to, e.g. http://vm:8428/api/v1/import/prometheus")
		pushEvery   = fs.Duration("push-interval", 10*time.Second, "push interval")
		drain       = fs.Duration("drain-timeout", 30*time.Second, "on SIGTERM, how long in-flight calls may take to finish")
		drainDelay  = fs.Duration("drain-delay", 0, "on SIGTERM, how long /readyz reports draining before listeners close")
		maxMsg      = fs.Int64("grpc-max-message-bytes", config.DefaultMaxMessageBytes, "largest gRPC message passed")
		apiHint     = fs.String("api-hint", "", "what /v1/models/{m}:predict is: kserve_v1 (default) or tfserving")
		statsEvery  = fs.Duration("triton-stats-interval", 5*time.Second, "poll interval of the upstream's statistics extension")
		noStats     = fs.Bool("no-triton-stats", false, "do not poll the upstream's statistics extension")
		readiness   = fs.String("readiness", "auto", "upstream readiness probe: auto, tcp or none")
		decode      = fs.Float64("decode-sample", 0.01, "share of infer calls fully decoded to price deserialization (gRPC: unmarshalled; HTTP: JSON validated byte by byte)")
		logLevel    = fs.String("log-level", "info", "debug, info, warn or error")
		dataPlane   = fs.String("data-plane", config.DefaultDataPlane(), "how routes move bytes: stdlib (net/http) or frame (frame-level HTTP/2 for gRPC, own HTTP/1.1 loop); default from INFERWATCH_DATA_PLANE, else stdlib")
	)
	var amURLs listFlag
	fs.Var(&amURLs, "alertmanager-url", "Alertmanager base URL to send alerts to (repeatable, e.g. http://alertmanager:9093)")
	webhook := fs.String("alert-webhook-url", "", "generic JSON webhook for alerts")
	externalURL := fs.String("alert-external-url", "", "the admin server's URL as alert readers reach it (alerts' generatorURL); default http://ADMIN_LISTEN, an unspecified host named by the hostname")
	window := fs.Duration("window", 10*time.Second, "window statistics window length")
	slas := cmdline.Labels{}
	fs.Var(slas, "sla", "model=duration: the model's latency SLA (repeatable), e.g. mnist-mlp=50ms")
	ttftSLOs := cmdline.Labels{}
	fs.Var(ttftSLOs, "ttft-slo", "model=duration: the P99 time-to-first-token SLO of a generative model (repeatable), e.g. llama=500ms")
	otlp := fs.String("otlp-endpoint", "", "OTLP trace receiver: host:4317 (gRPC) or http://host:4318/v1/traces; default from OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT; empty keeps traces in memory only")
	otlpProto := fs.String("otlp-protocol", "grpc", "grpc or http (default from OTEL_EXPORTER_OTLP_PROTOCOL: grpc or http/protobuf)")
	traceTarget := fs.Float64("trace-target-per-second", 100, "head-sampled traces kept per second per route/model (100 gives 10% at 1k QPS)")
	noTracing := fs.Bool("no-tracing", false, "no trace propagation and no spans")
	noGPU := fs.Bool("no-gpu", false, "do not sample NVML")
	noBPF := fs.Bool("no-bpf", false, "do not load the eBPF probes")
	bpfBudget := fs.Float64("bpf-budget", 0.03, "share of one core the eBPF probes may cost")
	var upPIDs listFlag
	fs.Var(&upPIDs, "upstream-pid", "the upstream's PID (repeatable); default: whoever listens on the first upstream port")
	bySocketUser := fs.Bool("upstream-by-socket-user", false, "find the upstream port's processes by the listening socket's user where their descriptors are not readable (a pod with shareProcessNamespace, the server another user)")
	var upMem config.Bytes
	fs.Var(&upMem, "upstream-memory-limit", "the memory the upstream may use (bytes, or 256Mi, 4Gi...), which a leak is projected against; default: its cgroup's limit, else MemTotal")
	labels := cmdline.Labels{}
	fs.Var(labels, "push-extra-label", "name=value added to pushed series (repeatable); POD_NAME and POD_NAMESPACE from the environment become pod and namespace")
	return func() (config.Config, error) {
		cfg := config.Default()
		if *cfgPath != "" {
			var err error
			if cfg, err = config.Load(*cfgPath); err != nil {
				return cfg, err
			}
		}
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		pick := func(name string, apply func()) {
			if set[name] || *cfgPath == "" {
				apply()
			}
		}
		pick("admin-listen", func() { cfg.AdminListen = *adminListen })
		pick("admin-remote-api", func() { cfg.AdminRemoteAPI = *adminRemote })
		pick("drain-timeout", func() { cfg.DrainTimeout = config.Duration(*drain) })
		pick("drain-delay", func() { cfg.DrainDelay = config.Duration(*drainDelay) })
		pick("log-level", func() { cfg.LogLevel = *logLevel })
		pick("data-plane", func() { cfg.DataPlane = *dataPlane })
		pick("decode-sample", func() { cfg.Limits.DecodeSample = *decode })
		if *pushURL != "" {
			cfg.Push.URL = *pushURL
		}
		pick("push-interval", func() { cfg.Push.Interval = config.Duration(*pushEvery) })
		if cfg.Push.ExtraLabels == nil {
			cfg.Push.ExtraLabels = map[string]string{}
		}
		for env, label := range map[string]string{"POD_NAME": "pod", "POD_NAMESPACE": "namespace"} {
			if v := os.Getenv(env); v != "" {
				cfg.Push.ExtraLabels[label] = v
			}
		}
		for k, v := range labels {
			cfg.Push.ExtraLabels[k] = v
		}
		// Only when given: unset, they leave what OTEL_EXPORTER_OTLP_* or the YAML said.
		if set["otlp-endpoint"] {
			cfg.Tracing.Endpoint = *otlp
		}
		if set["otlp-protocol"] {
			cfg.Tracing.Protocol = *otlpProto
		}
		pick("trace-target-per-second", func() { cfg.Tracing.TargetPerSecond = *traceTarget })
		if *noTracing {
			cfg.Tracing.Disabled = true
		}
		if *noGPU {
			cfg.Host.GPUDisabled = true
		}
		if *noBPF {
			cfg.Host.BPFDisabled = true
		}
		pick("bpf-budget", func() { cfg.Host.BPFBudget = *bpfBudget })
		// Repeatable flags given replace the file's lists, as any flag
		// given wins over the file.
		if len(upPIDs) > 0 {
			cfg.Host.UpstreamPIDs = nil
		}
		for _, v := range upPIDs {
			pid, err := strconv.Atoi(v)
			if err != nil {
				return cfg, fmt.Errorf("--upstream-pid %q: not a number", v)
			}
			cfg.Host.UpstreamPIDs = append(cfg.Host.UpstreamPIDs, pid)
		}
		pick("upstream-memory-limit", func() { cfg.Host.UpstreamMemoryLimit = upMem })
		if *bySocketUser {
			cfg.Host.UpstreamBySocketUser = true
		}
		if len(amURLs) > 0 {
			cfg.Alerting.AlertmanagerURLs = amURLs
		}
		if *webhook != "" {
			cfg.Alerting.WebhookURL = *webhook
		}
		if *externalURL != "" {
			cfg.Alerting.ExternalURL = *externalURL
		}
		pick("window", func() { cfg.Alerting.Window = config.Duration(*window) })
		for _, f := range []struct {
			name string
			vals cmdline.Labels
			set  func(*alerting.Thresholds, time.Duration)
		}{
			{"sla", slas, func(t *alerting.Thresholds, d time.Duration) { t.SLA = d }},
			{"ttft-slo", ttftSLOs, func(t *alerting.Thresholds, d time.Duration) { t.TTFTSLO = d }},
		} {
			for model, v := range f.vals {
				d, err := time.ParseDuration(v)
				if err != nil || d <= 0 {
					return cfg, fmt.Errorf("--%s %s=%s: want a positive duration such as 50ms", f.name, model, v)
				}
				if cfg.Alerting.Rules.Models == nil {
					cfg.Alerting.Rules.Models = map[string]alerting.Thresholds{}
				}
				t := cfg.Alerting.Rules.Models[model]
				f.set(&t, d)
				cfg.Alerting.Rules.Models[model] = t
			}
		}
		var statsEnabled *bool // nil: automatic, one poller per upstream host
		if *noStats {
			statsEnabled = new(bool)
		}
		// Route settings given as flags (or their variables) override the
		// config's routes too, as flags override the file everywhere else;
		// the routes made from flags below take every one of them.
		for i := range cfg.Routes {
			r := &cfg.Routes[i]
			if set["readiness"] {
				r.Readiness = *readiness
			}
			if set["api-hint"] {
				r.APIHint = *apiHint
			}
			if set["grpc-max-message-bytes"] {
				r.MaxMessageBytes = *maxMsg
			}
			if set["triton-stats-interval"] {
				r.TritonStats.Interval = config.Duration(*statsEvery)
			}
			if *noStats {
				r.TritonStats.Enabled = new(bool)
			}
			if set["http-upstream-protocol"] && r.Protocol == "http" {
				r.UpstreamProtocol = *httpUpProto
			}
		}
		add := func(proto, listen, up string) error {
			if listen == "" && up == "" {
				return nil
			}
			if listen == "" || up == "" {
				return fmt.Errorf("--%s-listen and --%s-upstream go together", proto, proto)
			}
			r := config.Route{Name: proto, Protocol: proto, Listen: listen, Upstream: up, MaxMessageBytes: *maxMsg,
				APIHint: *apiHint, Readiness: *readiness,
				TritonStats: config.TritonStats{Enabled: statsEnabled, Interval: config.Duration(*statsEvery)}}
			if proto == "http" {
				r.UpstreamProtocol = *httpUpProto
			}
			cfg.Routes = append(cfg.Routes, r)
			return nil
		}
		if err := errors.Join(add("grpc", *grpcListen, *grpcUp), add("http", *httpListen, *httpUp)); err != nil {
			return cfg, err
		}
		cfg.Finish()
		return cfg, cfg.Validate()
	}
}

// listFlag collects a repeated flag's values.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// Repeatable marks the flag as given once per value: its INFERWATCH_*
// variable holds them comma-separated.
func (l *listFlag) Repeatable() {}

func runProxy(args []string, logw io.Writer) error {
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	build := proxyFlags(fs)
	if err := cmdline.Parse(fs, args); err != nil {
		return err
	}
	cfg, err := build()
	if err != nil {
		return fmt.Errorf("configuration:\n%w", err)
	}
	logger := cmdline.Logger(logw, cfg.LogLevel)
	setMemoryLimit(logger)
	sc, err := sidecar.New(cfg, logger)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := sc.Start(context.Background()); err != nil {
		return err
	}
	// A listener that stopped on its own is a failure even when the drain
	// after it goes well: the exit status says so, for the supervisor.
	var failed error
	select {
	case <-ctx.Done():
		// A second signal ends the process at once (the default action
		// comes back), for whoever will not wait out a long drain.
		stop()
		logger.Info("signal received: draining; a second signal exits at once")
	case failed = <-sc.Err():
		logger.Error("listener failed", "err", failed)
	}
	return errors.Join(failed, sc.Shutdown(context.Background()))
}
