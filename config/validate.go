package config

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
)

var labelName = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// Validate checks everything and returns one error listing every mistake,
// each naming its field.
func (c *Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	if err := checkAddr(c.AdminListen, true); err != nil {
		bad("admin_listen", "%v", err)
	}
	if c.DrainTimeout < 0 {
		bad("drain_timeout", "must not be negative")
	}
	if c.DrainDelay < 0 {
		bad("drain_delay", "must not be negative")
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		bad("log_level", "%q is not one of debug, info, warn, error", c.LogLevel)
	}
	switch c.DataPlane {
	case DataPlaneStdlib, DataPlaneFrame:
	default:
		bad("data_plane", "%q is not stdlib or frame (INFERWATCH_DATA_PLANE sets the default)", c.DataPlane)
	}
	if len(c.Routes) == 0 {
		bad("routes", "no listen/upstream pair: give --grpc-listen with --grpc-upstream, --http-listen with --http-upstream, or routes in --config")
	}
	seen := map[string]string{}
	// A route's name is its metrics' route label: two routes of one name
	// would register one series twice, which the metrics library refuses
	// with a panic.
	names := map[string]int{}
	for i, r := range c.Routes {
		f := fmt.Sprintf("routes[%d]", i)
		if r.Name != "" {
			f = fmt.Sprintf("routes[%d] (%s)", i, r.Name)
			if j, dup := names[r.Name]; dup {
				bad(f+".name", "%q is also the name of routes[%d]", r.Name, j)
			} else {
				names[r.Name] = i
			}
		}
		switch r.Protocol {
		case "grpc", "http":
		default:
			bad(f+".protocol", "%q is not grpc or http", r.Protocol)
		}
		if err := checkAddr(r.Listen, true); err != nil {
			bad(f+".listen", "%v", err)
		} else if other, dup := seen[r.Listen]; dup && !strings.HasSuffix(r.Listen, ":0") {
			bad(f+".listen", "%s is also the listen address of %s", r.Listen, other)
		} else {
			seen[r.Listen] = f
		}
		if err := checkAddr(r.Upstream, false); err != nil {
			bad(f+".upstream", "%v", err)
		}
		switch {
		case r.Protocol == "http" && r.UpstreamProtocol != "http1" && r.UpstreamProtocol != "h2c":
			bad(f+".upstream_protocol", "%q is not http1 or h2c", r.UpstreamProtocol)
		case r.Protocol == "grpc" && r.UpstreamProtocol != "" && r.UpstreamProtocol != "h2":
			bad(f+".upstream_protocol", "gRPC upstreams speak HTTP/2; leave it empty or h2")
		}
		if r.MaxMessageBytes < 0 || r.MaxMessageBytes > MaxGRPCMessage {
			bad(f+".max_message_bytes", "%d is outside 1..%d", r.MaxMessageBytes, int64(MaxGRPCMessage))
		}
		switch r.APIHint {
		case "", "tfserving", "kserve_v1":
		default:
			bad(f+".api_hint", "%q is not tfserving or kserve_v1", r.APIHint)
		}
		switch r.Readiness {
		case "auto", "tcp", "none":
		default:
			bad(f+".readiness", "%q is not auto, tcp or none", r.Readiness)
		}
		if r.DialTimeout < 0 {
			bad(f+".dial_timeout", "must not be negative")
		}
		if r.TritonStats.Interval < 0 {
			bad(f+".triton_stats.interval", "must not be negative")
		}
		if t := r.TLS; t != nil {
			if t.CertFile == "" || t.KeyFile == "" {
				bad(f+".tls", "cert_file and key_file are both required")
			}
			checkFile(bad, f+".tls.cert_file", t.CertFile)
			checkFile(bad, f+".tls.key_file", t.KeyFile)
			checkFile(bad, f+".tls.client_ca_file", t.ClientCAFile)
		}
		if t := r.UpstreamTLS; t != nil {
			if (t.CertFile == "") != (t.KeyFile == "") {
				bad(f+".upstream_tls", "cert_file and key_file go together")
			}
			checkFile(bad, f+".upstream_tls.ca_file", t.CAFile)
			checkFile(bad, f+".upstream_tls.cert_file", t.CertFile)
			checkFile(bad, f+".upstream_tls.key_file", t.KeyFile)
		}
	}
	if c.Push.URL != "" {
		if !httpURL(c.Push.URL) {
			bad("push.url", "%q is not an http(s) URL", c.Push.URL)
		}
		if c.Push.Interval <= 0 {
			bad("push.interval", "must be positive")
		}
	}
	for k := range c.Push.ExtraLabels {
		if !labelName.MatchString(k) {
			bad("push.extra_labels", "%q is not a valid label name", k)
		}
	}
	if c.Alerting.Window <= 0 {
		bad("alerting.window", "must be positive")
	}
	if b := c.Alerting.Baseline; !b.Disabled {
		if err := b.HistoryOptions(max(c.Limits.MaxModels, 1)).Validate(); err != nil {
			bad("alerting.baseline", "%v", err)
		}
	}
	if m := c.Alerting.MemoryLeak; !m.Disabled {
		for _, f := range []struct {
			name string
			v    Duration
		}{{"interval", m.Interval}, {"span", m.Span}, {"min_span", m.MinSpan}, {"horizon", m.Horizon}} {
			if f.v < 0 {
				bad("alerting.memory_leak."+f.name, "must not be negative")
			}
		}
		if !nonNegative(m.MinRise) {
			bad("alerting.memory_leak.min_rise", "must not be negative")
		}
		if !nonNegative(m.DeviceMinRiseMiB) {
			bad("alerting.memory_leak.device_min_rise_mib", "must not be negative")
		}
		if m.Span > 0 && m.MinSpan > m.Span {
			bad("alerting.memory_leak.min_span", "%v is longer than span %v", m.MinSpan.D(), m.Span.D())
		}
	}
	if c.Alerting.Resend <= 0 {
		bad("alerting.resend", "must be positive")
	}
	for i, u := range c.Alerting.AlertmanagerURLs {
		if !httpURL(u) {
			bad(fmt.Sprintf("alerting.alertmanager_urls[%d]", i), "%q is not an http(s) URL", u)
		}
	}
	if c.Alerting.WebhookURL != "" && !httpURL(c.Alerting.WebhookURL) {
		bad("alerting.webhook_url", "%q is not an http(s) URL", c.Alerting.WebhookURL)
	}
	if u := c.Alerting.ExternalURL; u != "" && !httpURL(u) {
		bad("alerting.external_url", "%q is not an http(s) URL", u)
	} else if strings.ContainsAny(u, "?#") {
		// The alerts' link is this URL + "/api/v1/alerts": after a query
		// or a fragment that path is no longer the path.
		bad("alerting.external_url", "%q has a query or fragment: give the base URL the alerts' /api/v1/alerts is appended to", u)
	}
	t := c.Tracing
	switch t.Protocol {
	case "grpc", "http":
	default:
		bad("tracing.protocol", "%q is not grpc or http (or, in %s, grpc or http/protobuf)", t.Protocol, EnvOTLPProtocol)
	}
	if !nonNegative(t.TargetPerSecond) {
		bad("tracing.target_per_second", "must not be negative")
	}
	if !(t.Floor >= 0 && t.Floor <= 1 && t.Ceiling >= 0 && t.Ceiling <= 1) || (t.Ceiling > 0 && t.Floor > t.Ceiling) {
		bad("tracing.floor", "floor %v and ceiling %v must lie in 0..1, floor below ceiling", t.Floor, t.Ceiling)
	}
	if !nonNegative(t.TailBudgetPerSecond) {
		bad("tracing.tail_budget_per_second", "must not be negative")
	}
	for m, d := range t.SLO {
		if d <= 0 {
			bad("tracing.slo."+m, "must be positive")
		}
	}
	if !c.Host.GPUDisabled && c.Host.GPUInterval < Duration(100*time.Millisecond) {
		bad("host.gpu_interval", "must be at least 100ms")
	}
	if !(c.Host.BPFBudget > 0 && c.Host.BPFBudget <= 1) {
		bad("host.bpf_budget", "%v is outside (0, 1]", c.Host.BPFBudget)
	}
	for i, pid := range c.Host.UpstreamPIDs {
		if pid <= 0 {
			bad(fmt.Sprintf("host.upstream_pids[%d]", i), "%d is not a PID", pid)
		}
	}
	l := c.Limits
	if l.MaxModels < 1 {
		bad("limits.max_models", "must be at least 1")
	}
	if l.CaptureBytes < 0 {
		bad("limits.capture_bytes", "must not be negative")
	}
	if l.CaptureBudget < int64(l.CaptureBytes) {
		bad("limits.capture_budget", "%d is below capture_bytes (%d)", l.CaptureBudget, l.CaptureBytes)
	}
	if !(l.DecodeSample >= 0 && l.DecodeSample <= 1) {
		bad("limits.decode_sample", "%v is outside 0..1", l.DecodeSample)
	}
	if l.DecodeMaxBytes < 0 {
		bad("limits.decode_max_bytes", "must not be negative")
	}
	// Sampled gRPC messages draw on the same budget: one it could never
	// hold would silently never be decoded.
	if l.DecodeSample > 0 && l.CaptureBudget < int64(l.DecodeMaxBytes) {
		bad("limits.capture_budget", "%d is below decode_max_bytes (%d)", l.CaptureBudget, l.DecodeMaxBytes)
	}
	if l.PipelineQueue < 1 {
		bad("limits.pipeline_queue", "must be at least 1")
	}
	return errors.Join(errs...)
}

// checkAddr wants host:port; a listen address may leave the host empty.
func checkAddr(a string, listen bool) error {
	if a == "" {
		return errors.New("missing (want host:port)")
	}
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("%q is not host:port", a)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 || (!listen && p == 0) {
		return fmt.Errorf("%q has no valid port", a)
	}
	if !listen && host == "" {
		return fmt.Errorf("%q has no host", a)
	}
	return nil
}

func checkFile(bad func(string, string, ...any), field, path string) {
	if path == "" {
		return
	}
	if _, err := os.Stat(path); err != nil {
		bad(field, "%v", err)
	}
}

func httpURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// nonNegative says v is a number, finite, and not below zero. Float
// settings are checked as what must hold: YAML's .nan and a flag's "NaN"
// fail every comparison, so a check for what is wrong lets them through.
func nonNegative(v float64) bool { return v >= 0 && !math.IsInf(v, 1) }
