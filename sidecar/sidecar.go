// Package sidecar assembles one running inferwatch from a validated config:
// the proxy fronts of every route, the record pipeline and its sinks, the
// upstream readiness probes and statistics pollers, and the admin endpoints;
// and it runs their lifecycle, drain on shutdown included.
package sidecar

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/inferwatch/inferwatch/admin"
	"github.com/inferwatch/inferwatch/alerting"
	"github.com/inferwatch/inferwatch/alertmanager"
	"github.com/inferwatch/inferwatch/bpf"
	"github.com/inferwatch/inferwatch/config"
	"github.com/inferwatch/inferwatch/diagnosis"
	"github.com/inferwatch/inferwatch/gpu"
	"github.com/inferwatch/inferwatch/history"
	"github.com/inferwatch/inferwatch/metricset"
	"github.com/inferwatch/inferwatch/modelload"
	"github.com/inferwatch/inferwatch/proxy"
	"github.com/inferwatch/inferwatch/record"
	"github.com/inferwatch/inferwatch/sampling"
	"github.com/inferwatch/inferwatch/tracing"
	"github.com/inferwatch/inferwatch/tritonstats"
	"github.com/inferwatch/inferwatch/windowstats"
)

// Sidecar is one assembled inferwatch.
type Sidecar struct {
	cfg        config.Config
	logger     *slog.Logger
	metrics    *metricset.Set
	pipeline   *record.Pipeline
	server     *proxy.Server
	handlers   []*proxy.Handler
	readiness  *proxy.Readiness
	pollers    []*tritonstats.Poller
	admin      *admin.Server
	adminSrv   *http.Server
	adminLn    net.Listener
	engine     *alerting.Engine
	history    *history.Seasonal  // nil when alerting.baseline.disabled
	hist       *diagnosis.History // closed windows for /debug/diagnose and alert causes
	bandGauges sync.Once
	bandSeen   map[[2]string]bool // models with baseline gauges; engine lock held
	host       *host              // GPU and eBPF facts; started with the sidecar
	sampler    *sampling.Sampler  // nil when tracing is disabled
	tracer     *tracing.Tracer    // nil when tracing is disabled
	notifiers  []closer
	bg         context.Context // lives from New to Shutdown: notifier workers
	bgCancel   context.CancelFunc

	cancel   context.CancelFunc
	wg       sync.WaitGroup
	serveErr chan error

	models       *modelload.Tracker  // loads, readiness, cold calls: a pipeline sink
	modelPollers []*modelload.Poller // the upstreams' repository index (modelpoll.go)
}

// help is the # HELP text of the families the assembly registers itself.
var help = map[string]string{
	"inferwatch_upstream_ready":           "1 when the route's upstream answered its last readiness probe, else 0.",
	"inferwatch_inflight_requests":        "Calls the route's proxy is serving now.",
	"inferwatch_model_sla_seconds":        "The latency SLA configured for the model, for rules that judge against it.",
	"inferwatch_model_ttft_slo_seconds":   "The P99 time-to-first-token SLO configured for a generative model, for rules that judge against it.",
	"inferwatch_latency_baseline_seconds": "The model's seasonal P99 baseline for the last window (bound=expected|lower|upper), once it has two daily cycles of history.",
}

// New builds a Sidecar; extra sinks receive every record after the built-in
// ones (metrics, tracer, alert engine).
func New(cfg config.Config, logger *slog.Logger, extra ...record.Sink) (*Sidecar, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := metricset.CheckExtraLabels(cfg.Push.ExtraLabels); err != nil {
		return nil, fmt.Errorf("push.extra_labels: %w", err)
	}
	s := &Sidecar{cfg: cfg, logger: logger, serveErr: make(chan error, 1)}
	s.bg, s.bgCancel = context.WithCancel(context.Background())
	s.metrics = metricset.New(metricset.Options{MaxModels: cfg.Limits.MaxModels})
	for _, h := range []map[string]string{help, alerting.MetricHelp(), alertmanager.MetricHelp(), sampling.MetricHelp(),
		tracing.MetricHelp(), tritonstats.MetricHelp(), gpu.MetricHelp(), bpf.MetricHelp(), modelload.MetricHelp()} {
		s.metrics.AddHelp(h)
	}
	if err := s.newHistory(); err != nil {
		s.bgCancel()
		return nil, err
	}
	if err := s.newEngine(); err != nil {
		s.bgCancel()
		return nil, err
	}
	s.host = &host{}
	if err := s.newTracer(); err != nil {
		s.bgCancel()
		return nil, err
	}
	// The tracer before the engine: it marks the calls whose traces it
	// keeps (record.Call.TraceKept), which the engine's snapshots link to.
	// The model lifecycle (loads, readiness, cold calls) after the metrics,
	// whose model labels it shares.
	s.models = modelload.New(s.metrics)
	sinks := record.Sinks{s.metrics, s.models}
	if s.tracer != nil {
		sinks = append(sinks, s.tracer)
	}
	sinks = append(sinks, s.engine)
	sinks = append(sinks, extra...)
	s.pipeline = record.NewPipeline(cfg.Limits.PipelineQueue, sinks, s.metrics.RecordDropped)

	var listeners []proxy.Listener
	var probes []proxy.Probe
	poll := pollRoutes(cfg.Routes)
	for i, r := range cfg.Routes {
		l, probe, poller, err := s.route(r, poll[i])
		if err != nil {
			s.bgCancel()
			return nil, fmt.Errorf("route %s: %w", r.Name, err)
		}
		listeners = append(listeners, l)
		probes = append(probes, probe)
		if poller != nil {
			s.pollers = append(s.pollers, poller)
		}
	}
	if err := s.newModelPollers(poll); err != nil {
		s.bgCancel()
		return nil, err
	}
	s.readiness = proxy.NewReadiness(probes...)
	for i, r := range cfg.Routes {
		s.metrics.Metrics().NewGauge(fmt.Sprintf(`inferwatch_upstream_ready{route="%s"}`, metricset.EscapeLabelValue(r.Name)), func() float64 {
			if s.readiness.UpstreamReady(i) {
				return 1
			}
			return 0
		})
	}
	s.server = proxy.NewServer(logger, listeners...)
	s.admin = admin.New(func(w io.Writer) {
		s.metrics.WritePrometheus(w)
		// process_resident_memory_bytes and friends: the memory-growth rule
		// in deploy/rules watches them.
		metrics.WriteProcessMetrics(w)
	}, s.readiness.Ready)
	s.admin.ServeRemoteAPI(cfg.AdminRemoteAPI)
	s.admin.HandleJSON("/api/v1/stats", func(*http.Request) any { return s.engine.Stats() })
	s.admin.HandleJSON("/api/v1/alerts", func(*http.Request) any { return s.engine.Alerts() })
	s.admin.Handle("GET /debug/diagnose", http.HandlerFunc(s.handleDiagnose))
	if s.tracer != nil {
		s.admin.Handle("GET /api/v1/traces", http.HandlerFunc(s.tracer.HandleTraces))
		s.admin.Handle("GET /traces", http.HandlerFunc(s.tracer.HandlePage))
	}
	return s, nil
}

// newTracer builds the trace sampler and tracer, unless tracing is off.
func (s *Sidecar) newTracer() error {
	t := s.cfg.Tracing
	if t.Disabled {
		return nil
	}
	slo := map[string]time.Duration{}
	for model, th := range s.cfg.Alerting.Rules.Models {
		if th.SLA > 0 {
			slo[model] = th.SLA
		}
	}
	for model, d := range t.SLO {
		slo[model] = d.D()
	}
	smp, err := sampling.New(sampling.Config{
		TargetPerSecond: t.TargetPerSecond, Floor: t.Floor, Ceiling: t.Ceiling,
		TailBudgetPerSecond: t.TailBudgetPerSecond, SLO: slo, Metrics: s.metrics.Metrics(),
	})
	if err != nil {
		return fmt.Errorf("tracing: %w", err)
	}
	upstreams := map[string]string{}
	for _, r := range s.cfg.Routes {
		upstreams[r.Name] = r.Upstream
	}
	resource := map[string]string{}
	for k, v := range t.Resource { // OTEL_RESOURCE_ATTRIBUTES or tracing.resource; the pod's own names win
		resource[k] = v
	}
	if pod := s.cfg.Push.ExtraLabels["pod"]; pod != "" {
		resource["k8s.pod.name"] = pod
	}
	if ns := s.cfg.Push.ExtraLabels["namespace"]; ns != "" {
		resource["k8s.namespace.name"] = ns
	}
	protocol := t.Protocol
	if protocol == "http" { // config's name; the tracer's is the OTLP one
		protocol = tracing.ProtocolHTTP
	}
	tr, err := tracing.New(tracing.Config{
		Sampler: smp, Endpoint: t.Endpoint, Protocol: protocol, Insecure: t.Insecure, Headers: t.Headers,
		Keep: t.Keep, Resource: resource, ServiceName: t.ServiceName, Upstreams: upstreams, Metrics: s.metrics.Metrics(), Logger: s.logger,
		Host: s.hostSource(),
	})
	if err != nil {
		return fmt.Errorf("tracing: %w", err)
	}
	s.sampler, s.tracer = smp, tr
	return nil
}

// feedP99 hands each model's P99 of the last closed window to the trace
// sampler, whose tail keep then follows the same P99 the alerts use.
func (s *Sidecar) feedP99(ctx context.Context) {
	t := time.NewTicker(s.cfg.Alerting.Window.D())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, v := range s.engine.Stats() {
			if v.Previous.Count > 0 {
				s.sampler.SetP99(v.Model, time.Duration(v.Previous.P99*float64(time.Second)))
			}
		}
	}
}

type closer interface{ Close() error }

// newEngine builds the live window statistics and alert rules, and the
// notifiers they report to.
func (s *Sidecar) newEngine() error {
	a := s.cfg.Alerting
	var notifiers []alerting.Notifier
	no := alertmanager.Options{Metrics: s.metrics.Metrics(), Logger: s.logger}
	if len(a.AlertmanagerURLs) > 0 {
		no.ResolveTimeout = 4 * a.Resend.D()
		c, err := alertmanager.NewClient(s.bg, a.AlertmanagerURLs, no)
		if err != nil {
			return fmt.Errorf("alerting.alertmanager_urls: %w", err)
		}
		notifiers = append(notifiers, c)
		s.notifiers = append(s.notifiers, c)
	}
	if a.WebhookURL != "" {
		w, err := alertmanager.NewWebhook(s.bg, a.WebhookURL, alertmanager.Options{Metrics: s.metrics.Metrics(), Logger: s.logger})
		if err != nil {
			return fmt.Errorf("alerting.webhook_url: %w", err)
		}
		notifiers = append(notifiers, w)
		s.notifiers = append(s.notifiers, w)
	}
	var band func(model, version string, w *windowstats.WindowView) (float64, float64, bool)
	if !a.Baseline.Disabled {
		ho := a.Baseline.HistoryOptions(s.cfg.Limits.MaxModels)
		ho.Logger = s.logger
		h, err := history.New(ho)
		if err != nil {
			return fmt.Errorf("alerting.baseline: %w", err)
		}
		s.history = h
		band = s.baselineBand
	}
	eng, err := alerting.NewEngine(alerting.Options{
		Baseline:  band,
		Stats:     windowstats.Options{Window: a.Window.D(), MaxModels: s.cfg.Limits.MaxModels},
		Config:    a.Rules,
		Metrics:   s.metrics.Metrics(),
		Notifiers: notifiers,
		InFlight: func(string, string) int64 {
			var n int64
			for _, h := range s.handlers {
				n += h.InFlight()
			}
			return n
		},
		Host:         s.snapshotHost,
		Explain:      s.explain,
		Labels:       s.cfg.Push.ExtraLabels,
		GeneratorURL: s.generatorURL(),
		Resend:       a.Resend.D(),
	})
	if err != nil {
		return fmt.Errorf("alerting.rules: %w", err)
	}
	s.engine = eng
	return nil
}

// baselineBand is the engine's Options.Baseline: the history's band, with
// inferwatch_latency_baseline_seconds registered for each model the first
// time it has one (the history bounds the models).
func (s *Sidecar) baselineBand(model, version string, w *windowstats.WindowView) (float64, float64, bool) {
	exp, up, ok := s.history.Baseline(model, version, w)
	if ok {
		s.bandGauges.Do(func() { s.bandSeen = map[[2]string]bool{} })
		k := [2]string{model, version}
		if !s.bandSeen[k] {
			s.bandSeen[k] = true
			for _, bound := range []string{"expected", "lower", "upper"} {
				get := func() float64 {
					b, _ := s.history.Band(model, version)
					switch bound {
					case "lower":
						return b.Lower
					case "upper":
						return b.Upper
					}
					return b.Expected
				}
				s.metrics.Metrics().GetOrCreateGauge(bandGaugeName(model, version, bound), get)
			}
		}
	} else if len(s.bandSeen) > 0 {
		// No band here: a model arrived (which may have evicted another) or
		// this one's refit fell back to the trailing baseline. Gauges of
		// models without a band would read 0 s, a band every window is over.
		for k := range s.bandSeen {
			if _, has := s.history.Band(k[0], k[1]); !has {
				for _, bound := range []string{"expected", "lower", "upper"} {
					s.metrics.Metrics().UnregisterMetric(bandGaugeName(k[0], k[1], bound))
				}
				delete(s.bandSeen, k)
			}
		}
	}
	return exp, up, ok
}

func bandGaugeName(model, version, bound string) string {
	return fmt.Sprintf(`inferwatch_latency_baseline_seconds{model=%q,version=%q,bound=%q}`, model, version, bound)
}

// saveBaselineHistory saves the baseline history every five minutes until ctx ends.
func (s *Sidecar) saveBaselineHistory(ctx context.Context) {
	t := time.NewTicker(5 * time.Minute)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := s.history.Save(); err != nil {
				s.logger.Warn("baseline history not saved", "err", err)
			}
		}
	}
}

// pollRoutes says which routes poll their upstream's statistics extension.
// An explicit setting wins; otherwise each upstream host is polled once,
// through its gRPC route if it has one, because the exported counters carry
// the model, not the route, and two pollers of one server would count twice.
func pollRoutes(routes []config.Route) []bool {
	poll := make([]bool, len(routes))
	covered := map[string]bool{}
	for _, proto := range []string{"grpc", "http"} {
		for i, r := range routes {
			if r.Protocol != proto {
				continue
			}
			host, _, _ := net.SplitHostPort(r.Upstream)
			switch {
			case r.TritonStats.Enabled != nil:
				poll[i] = *r.TritonStats.Enabled
			default:
				poll[i] = !covered[host]
			}
			if poll[i] {
				covered[host] = true
			}
		}
	}
	return poll
}

func (s *Sidecar) route(r config.Route, poll bool) (proxy.Listener, proxy.Probe, *tritonstats.Poller, error) {
	var l proxy.Listener
	var probe proxy.Probe
	to := proxy.TransportOptions{DialTimeout: r.DialTimeout.D(), Protocol: proxy.UpstreamHTTP1, Addr: r.Upstream}
	if r.Protocol == "grpc" || r.UpstreamProtocol == "h2c" {
		to.Protocol = proxy.UpstreamHTTP2
	}
	if t := r.UpstreamTLS; t != nil {
		tc, err := proxy.ClientTLS(proxy.TLSFiles{CertFile: t.CertFile, KeyFile: t.KeyFile, CAFile: t.CAFile}, t.ServerName, t.InsecureSkipVerify, s.logger)
		if err != nil {
			return l, probe, nil, fmt.Errorf("upstream_tls: %w", err)
		}
		to.TLS = tc
	}
	tr := proxy.NewTransport(to)
	h := proxy.NewHandler(proxy.Options{
		Route:           r.Name,
		Upstream:        r.Upstream,
		TLS:             to.TLS != nil,
		Transport:       tr,
		Pipeline:        s.pipeline,
		Logger:          s.logger,
		MaxMessageBytes: r.MaxMessageBytes,
		Trace:           s.traceHook(),
		CaptureBytes:    s.cfg.Limits.CaptureBytes,
		CaptureBudget:   s.cfg.Limits.CaptureBudget,
		DecodeSample:    s.cfg.Limits.DecodeSample,
		DecodeMaxBytes:  s.cfg.Limits.DecodeMaxBytes,
		APIHint:         r.APIHint,
		UpstreamRTT:     tr.RTT,
	})
	s.handlers = append(s.handlers, h)
	s.metrics.Metrics().NewGauge(fmt.Sprintf(`inferwatch_inflight_requests{route="%s"}`, metricset.EscapeLabelValue(r.Name)), func() float64 {
		return float64(h.InFlight())
	})
	l = proxy.Listener{Name: r.Name, Addr: r.Listen, Handler: h}
	if s.cfg.DataPlane == config.DataPlaneFrame {
		l.HTTP1 = proxy.NewHTTP1Plane(h)
		if r.Protocol == "grpc" {
			f, err := proxy.NewFramePlane(h, tr, r.Upstream, r.DialTimeout.D())
			if err != nil {
				return l, probe, nil, fmt.Errorf("data_plane: %w", err)
			}
			l.Frames = f
		}
	}
	if t := r.TLS; t != nil {
		tc, err := proxy.ServerTLS(proxy.TLSFiles{CertFile: t.CertFile, KeyFile: t.KeyFile, CAFile: t.ClientCAFile}, s.logger)
		if err != nil {
			return l, probe, nil, fmt.Errorf("tls: %w", err)
		}
		l.TLS = tc
	}
	probe = proxy.Probe{Name: r.Name, Upstream: r.Upstream, GRPC: r.Protocol == "grpc", TLS: to.TLS != nil, Kind: r.Readiness, Transport: tr}
	var poller *tritonstats.Poller
	if poll {
		po := tritonstats.Options{Interval: r.TritonStats.Interval.D(), Set: s.metrics.Metrics(), MaxModels: s.cfg.Limits.MaxModels}
		scheme := "http"
		if to.TLS != nil {
			scheme = "https"
		}
		po.TLS = to.TLS
		if r.Protocol == "grpc" {
			po.GRPCAddr = r.Upstream
		} else {
			po.HTTPBase = scheme + "://" + r.Upstream
		}
		p, err := tritonstats.New(po)
		if err != nil {
			return l, probe, nil, fmt.Errorf("triton_stats: %w", err)
		}
		poller = p
	}
	return l, probe, poller, nil
}

// traceHook is the proxy's trace-context hook, nil when tracing is off (an
// interface holding a nil *Tracer would not be nil).
func (s *Sidecar) traceHook() proxy.TraceContext {
	if s.tracer == nil {
		return nil
	}
	return s.tracer
}

// Start binds every listener (failing with the address that could not be
// bound) and starts serving, probing, polling and pushing.
func (s *Sidecar) Start(ctx context.Context) error {
	al, err := net.Listen("tcp", s.cfg.AdminListen)
	if err != nil {
		return fmt.Errorf("admin_listen %s: %w", s.cfg.AdminListen, err)
	}
	if err := s.server.Listen(); err != nil {
		al.Close()
		return err
	}
	s.adminLn = al
	ctx, s.cancel = context.WithCancel(ctx)
	// A failed start leaves nothing behind: the caller exits or retries
	// without Shutdown, and bound route ports would refuse the next bind.
	fail := func(err error) error {
		s.cancel()
		s.wg.Wait()
		s.stopHost()
		s.server.Close()
		al.Close()
		return err
	}
	if err := s.startHost(ctx); err != nil {
		return fail(fmt.Errorf("host: %w", err))
	}
	if s.cfg.Push.URL != "" {
		if err := s.metrics.InitPush(ctx, s.cfg.Push.URL, s.cfg.Push.Interval.D(), s.cfg.Push.ExtraLabels); err != nil {
			return fail(fmt.Errorf("push: %w", err))
		}
	}
	s.adminSrv = &http.Server{Handler: s.admin, ReadHeaderTimeout: 5 * time.Second}
	if s.sampler != nil {
		s.wg.Add(2)
		go func() {
			defer s.wg.Done()
			s.sampler.Run(ctx)
		}()
		go func() {
			defer s.wg.Done()
			s.feedP99(ctx)
		}()
	}
	if s.history != nil && s.cfg.Alerting.Baseline.HistoryPath != "" {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.saveBaselineHistory(ctx)
		}()
	}
	s.wg.Add(4 + len(s.pollers))
	go func() {
		defer s.wg.Done()
		s.runHistory(ctx)
	}()
	go func() {
		defer s.wg.Done()
		s.engine.Run(ctx)
	}()
	go func() {
		defer s.wg.Done()
		if err := s.adminSrv.Serve(al); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.logger.Error("admin server stopped", "err", err)
		}
	}()
	go func() {
		defer s.wg.Done()
		s.readiness.Run(ctx, time.Second)
	}()
	for _, p := range s.pollers {
		go func() {
			defer s.wg.Done()
			p.Run(ctx)
		}()
	}
	s.runModelPollers(ctx)
	go func() { s.serveErr <- s.server.Serve() }()
	for i, a := range s.server.Addrs() {
		s.logger.Info("proxying", "route", s.cfg.Routes[i].Name, "protocol", s.cfg.Routes[i].Protocol, "listen", a.String(), "upstream", s.cfg.Routes[i].Upstream, "data_plane", s.cfg.DataPlane)
	}
	s.logger.Info("admin endpoints", "url", "http://"+al.Addr().String()+"/")
	return nil
}

// Err reports a listener that stopped on its own.
func (s *Sidecar) Err() <-chan error { return s.serveErr }

// RouteAddrs returns the bound addresses of the routes, in config order.
func (s *Sidecar) RouteAddrs() []net.Addr { return s.server.Addrs() }

// AdminAddr returns the bound admin address.
func (s *Sidecar) AdminAddr() net.Addr { return s.adminLn.Addr() }

// Metrics returns the metric set, for embedding (the demo's table).
func (s *Sidecar) Metrics() *metricset.Set { return s.metrics }

// Admin returns the admin handler, for features that add endpoints.
func (s *Sidecar) Admin() *admin.Server { return s.admin }

// Engine returns the live window statistics and alert rules.
func (s *Sidecar) Engine() *alerting.Engine { return s.engine }

// Tracer returns the tracer, nil when tracing is disabled.
func (s *Sidecar) Tracer() *tracing.Tracer { return s.tracer }

// Pollers returns the Triton statistics pollers.
func (s *Sidecar) Pollers() []*tritonstats.Poller { return s.pollers }

// Ready reports readiness as /readyz does.
func (s *Sidecar) Ready() (bool, []string) { return s.readiness.Ready() }

// Shutdown drains: readiness turns false, after the drain delay listeners
// stop accepting, in-flight calls finish until the drain timeout, then the
// pipeline delivers what it holds and everything stops.
func (s *Sidecar) Shutdown(ctx context.Context) error {
	s.readiness.SetDraining()
	if d := s.cfg.DrainDelay.D(); d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
	}
	dctx, cancel := context.WithTimeout(ctx, s.cfg.DrainTimeout.D())
	defer cancel()
	inflight := int64(0)
	for _, h := range s.handlers {
		inflight += h.InFlight()
	}
	s.logger.Info("draining", "in_flight", inflight, "timeout", s.cfg.DrainTimeout.D().String())
	err := s.server.Shutdown(dctx)
	s.pipeline.Close()
	if s.tracer != nil {
		tctx, tcancel := context.WithTimeout(context.Background(), 5*time.Second)
		s.tracer.Close(tctx) // exports what it holds, within the bound
		tcancel()
	}
	s.cancel()
	actx, acancel := context.WithTimeout(context.Background(), time.Second)
	defer acancel()
	s.adminSrv.Shutdown(actx)
	s.wg.Wait()
	if s.history != nil {
		if herr := s.history.Save(); herr != nil {
			s.logger.Warn("baseline history not saved", "err", herr)
		}
	}
	for _, p := range s.pollers {
		p.Close()
	}
	s.closeModelPollers()
	s.stopHost()
	for _, n := range s.notifiers {
		n.Close() // flushes what it can within its own timeout
	}
	s.bgCancel()
	if err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	return nil
}

// generatorURL is the alerts' source link: alerting.external_url, else the
// admin server's address, an unspecified host named by this host's name
// (Alertmanager's UI showed http://:9901/… for admin_listen ":9901").
func (s *Sidecar) generatorURL() string {
	const path = "api/v1/alerts"
	if u := s.cfg.Alerting.ExternalURL; u != "" {
		return strings.TrimSuffix(u, "/") + "/" + path
	}
	addr := s.cfg.AdminListen
	if host, port, err := net.SplitHostPort(addr); err == nil {
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			if name, err := os.Hostname(); err == nil && name != "" {
				addr = net.JoinHostPort(name, port)
			}
		}
	}
	return "http://" + addr + "/" + path
}
