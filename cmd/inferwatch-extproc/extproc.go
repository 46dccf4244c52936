package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/inferwatch/inferwatch/internal/cmdline"

	"google.golang.org/grpc"

	"github.com/inferwatch/inferwatch/alerting"
	"github.com/inferwatch/inferwatch/extproc"
	"github.com/inferwatch/inferwatch/interceptors"
)

// extprocListen binds a listen address: host:port, or unix:/path for a Unix
// socket (Envoy's pipe address).
func extprocListen(addr string) (net.Listener, error) {
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		path = strings.TrimPrefix(path, "//")
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("listen %s: remove stale socket: %w", addr, err)
		}
		l, err := net.Listen("unix", path)
		if err != nil {
			return nil, fmt.Errorf("listen %s: %w", addr, err)
		}
		return l, nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	return l, nil
}

func runExtproc(args []string, logw io.Writer) error {
	fs := flag.NewFlagSet("extproc", flag.ContinueOnError)
	var (
		listen      = fs.String("listen", "127.0.0.1:9911", "ext_proc gRPC listen address: host:port, or unix:/path/to/socket")
		adminListen = fs.String("admin-listen", "127.0.0.1:9901", "admin address for /metrics, /healthz, /readyz and the JSON API")
		route       = fs.String("route", extproc.DefaultRoute, "route name the records and traces carry")
		fullDuplex  = fs.Bool("full-duplex", false, "Envoy's processing_mode uses FULL_DUPLEX_STREAMED bodies (needed only for an Envoy that sends no protocol_config)")
		maxMsg      = fs.Int64("grpc-max-message-bytes", 2147483647, "a gRPC message in a body declaring more is not scanned further")
		maxRecv     = fs.Int("max-recv-bytes", extproc.DefaultMaxRecvBytes, "largest ext_proc message accepted (keep above Envoy's buffer limit in BUFFERED mode)")
		captureB    = fs.Int("capture-bytes", 1<<20, "HTTP: body prefix decoded per infer call")
		budget      = fs.Int64("capture-budget", 64<<20, "bytes all captures may hold at once while waiting for their decode")
		decode      = fs.Float64("decode-sample", 0.01, "share of infer calls fully decoded to price deserialization (gRPC: unmarshalled; HTTP: JSON validated byte by byte)")
		decodeMax   = fs.Int("decode-max-bytes", 4<<20, "largest gRPC message captured for that decode")
		apiHint     = fs.String("api-hint", "", "what /v1/models/{m}:predict is: kserve_v1 (default) or tfserving")
		window      = fs.Duration("window", 10*time.Second, "window statistics window length")
		otlp        = fs.String("otlp-endpoint", "", "OTLP trace receiver: host:4317 (gRPC) or http://host:4318/v1/traces; empty keeps traces in memory only")
		otlpProto   = fs.String("otlp-protocol", "grpc", "grpc or http")
		traceTarget = fs.Float64("trace-target-per-second", 100, "head-sampled traces kept per second per route/model")
		noTracing   = fs.Bool("no-tracing", false, "no spans")
		logLevel    = fs.String("log-level", "info", "debug, info, warn or error")
	)
	slas := cmdline.Labels{}
	fs.Var(slas, "sla", "model=duration: the model's latency SLA (repeatable), e.g. mnist-mlp=50ms")
	if err := cmdline.Parse(fs, args); err != nil {
		return err
	}
	logger := cmdline.Logger(logw, *logLevel)
	rules := alerting.Config{}
	for model, v := range slas {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return fmt.Errorf("--sla %s=%s: want a positive duration such as 50ms", model, v)
		}
		if rules.Models == nil {
			rules.Models = map[string]alerting.Thresholds{}
		}
		t := rules.Models[model]
		t.SLA = d
		rules.Models[model] = t
	}
	proto := *otlpProto
	if proto == "http" {
		proto = "http/protobuf"
	}
	rec, err := interceptors.New(interceptors.Options{
		Route: *route, Logger: logger, APIHint: *apiHint, Window: *window, Rules: rules,
		NoTracing: *noTracing, TraceTargetPerSecond: *traceTarget, OTLPEndpoint: *otlp, OTLPProtocol: proto,
	})
	if err != nil {
		return err
	}
	rec.Metrics().AddHelp(extproc.MetricHelp())
	o := extproc.Options{
		Pipeline: rec.Pipeline(), Route: *route, Logger: logger, Metrics: rec.Set(),
		MaxMessageBytes: *maxMsg, CaptureBytes: *captureB, CaptureBudget: *budget,
		DecodeSample: *decode, DecodeMaxBytes: *decodeMax, APIHint: *apiHint, MaxRecvBytes: *maxRecv,
	}
	if tr := rec.Tracer(); tr != nil {
		o.Trace = tr
	}
	if *fullDuplex {
		o.BodyMode = extproc.BodyFullDuplex
	}
	srv, err := extproc.New(o)
	if err != nil {
		return err
	}
	gl, err := extprocListen(*listen)
	if err != nil {
		return err
	}
	al, err := net.Listen("tcp", *adminListen)
	if err != nil {
		gl.Close()
		return fmt.Errorf("admin listen %s: %w", *adminListen, err)
	}
	g := grpc.NewServer(srv.ServerOptions()...)
	srv.Register(g)
	admin := &http.Server{Handler: rec.Admin(), ReadHeaderTimeout: 5 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	rec.Start(ctx)
	errc := make(chan error, 2)
	go func() { errc <- g.Serve(gl) }()
	go func() {
		if err := admin.Serve(al); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- err
		}
	}()
	logger.Info("ext_proc serving", "listen", gl.Addr().String(), "route", *route)
	logger.Info("admin endpoints", "url", "http://"+al.Addr().String()+"/")
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	logger.Info("stopping", "open_streams", srv.Streams())
	done := make(chan struct{})
	go func() { g.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		g.Stop()
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	admin.Shutdown(sctx)
	if err := rec.Close(sctx); err != nil {
		logger.Warn("closing the pipeline", "err", err)
	}
	if serveErr != nil {
		return fmt.Errorf("extproc: %w", serveErr)
	}
	return nil
}
