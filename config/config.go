// Package config holds the sidecar's settings, read from a YAML file and
// flags, defaulted and validated before anything starts: a mistake stops
// start-up with a message naming the field.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/inferwatch/inferwatch/alerting"
	"github.com/inferwatch/inferwatch/history"
)

// Config is the whole sidecar.
type Config struct {
	AdminListen    string   `yaml:"admin_listen"`     // /metrics, /healthz, /readyz; loopback by default
	AdminRemoteAPI bool     `yaml:"admin_remote_api"` // the rest (profiles, traces, diagnosis, JSON API) to peers off loopback too
	DrainTimeout   Duration `yaml:"drain_timeout"`    // how long SIGTERM waits for in-flight calls
	DrainDelay     Duration `yaml:"drain_delay"`      // readiness false this long before listeners close
	LogLevel       string   `yaml:"log_level"`        // debug, info, warn, error
	DataPlane      string   `yaml:"data_plane"`       // how routes move bytes: stdlib (net/http) or frame (frame-level HTTP/2, own HTTP/1.1 loop)
	Routes         []Route  `yaml:"routes"`
	Push           Push     `yaml:"push"`
	Limits         Limits   `yaml:"limits"`
	Alerting       Alerting `yaml:"alerting"`
	Tracing        Tracing  `yaml:"tracing"`
	Host           Host     `yaml:"host"`
	Diagnose       Diagnose `yaml:"diagnose"`
}

// Diagnose is the window history /debug/diagnose reads (docs/diagnose.md).
type Diagnose struct {
	HistoryFile    string `yaml:"history_file"`    // where the history is saved each minute and at shutdown, and loaded at start; empty: memory only
	HistoryWindows int    `yaml:"history_windows"` // windows kept per model; default 720 (two hours of 10 s windows)
}

// Host is the GPU (NVML) and kernel (eBPF) facts about the upstream.
type Host struct {
	GPUDisabled    bool     `yaml:"gpu_disabled"`
	GPUInterval    Duration `yaml:"gpu_interval"` // NVML sample period, 100ms..; default 1s
	BPFDisabled    bool     `yaml:"bpf_disabled"`
	BPFBudget      float64  `yaml:"bpf_budget"`      // share of one core the probes may cost; default 0.03
	UpstreamPIDs   []int    `yaml:"upstream_pids"`   // the upstream's processes; default: whoever listens on the first route's upstream port
	UpstreamCgroup bool     `yaml:"upstream_cgroup"` // widen to every process of their cgroup (the pod)
	// UpstreamBySocketUser finds the upstream port's processes by the
	// listening socket's user where their descriptors are not readable: a
	// pod sharing its PID namespace (shareProcessNamespace) with a server
	// of another user. Its processes outside this one's cgroup must be in
	// one cgroup (gpu/pids.SocketUserPIDs).
	UpstreamBySocketUser bool `yaml:"upstream_by_socket_user"`
	// UpstreamMemoryLimit is the memory the upstream may use, which a leak
	// is projected against; default: its cgroup's limit, else MemTotal.
	// Set it where the sidecar cannot see the upstream's cgroup (another
	// container's, in a cgroup namespace): the injector fills it from the
	// server container's limits.memory.
	UpstreamMemoryLimit Bytes `yaml:"upstream_memory_limit"`
}

// Tracing is trace context propagation, sampling and export.
type Tracing struct {
	Disabled            bool                `yaml:"disabled"`               // no propagation, no spans
	Endpoint            string              `yaml:"endpoint"`               // OTLP receiver: host:4317, or http://host:4318/v1/traces; empty: memory only
	Protocol            string              `yaml:"protocol"`               // grpc (default) or http
	Insecure            bool                `yaml:"insecure"`               // clear text to a host:port endpoint
	Headers             map[string]string   `yaml:"headers"`                // sent with every export
	TargetPerSecond     float64             `yaml:"target_per_second"`      // head-kept traces per second per route/model; 100 gives 10% at 1k QPS
	Floor               float64             `yaml:"floor"`                  // lowest head probability
	Ceiling             float64             `yaml:"ceiling"`                // highest head probability
	TailBudgetPerSecond float64             `yaml:"tail_budget_per_second"` // cap on tail keeps (errors, SLO, over P99)
	SLO                 map[string]Duration `yaml:"slo"`                    // per model: slower calls are always kept; default: the alerting SLA
	Keep                int                 `yaml:"keep"`                   // last kept traces held for the admin API
	ServiceName         string              `yaml:"service_name"`           // resource service.name; default OTEL_SERVICE_NAME, else inferwatch
	Resource            map[string]string   `yaml:"resource"`               // more resource attributes; default OTEL_RESOURCE_ATTRIBUTES
}

// Alerting is the live window statistics and the seed's rules over them.
type Alerting struct {
	Window           Duration        `yaml:"window"`            // statistics window, default 10s
	Resend           Duration        `yaml:"resend"`            // re-send of firing alerts, default 1m
	Rules            alerting.Config `yaml:"rules"`             // thresholds: defaults and per model (sla, p99_factor, ...)
	AlertmanagerURLs []string        `yaml:"alertmanager_urls"` // base URLs; alerts go to {url}/api/v2/alerts
	WebhookURL       string          `yaml:"webhook_url"`       // a generic JSON webhook
	ExternalURL      string          `yaml:"external_url"`      // the admin server as alert readers reach it; alerts' generatorURL
	Baseline         Baseline        `yaml:"baseline"`          // the seasonal baseline of P99OverBaseline
	MemoryLeak       MemoryLeak      `yaml:"memory_leak"`       // MemoryLeakSuspected on the upstream's RSS
}

// MemoryLeak samples the upstream's resident memory (from /proc, the
// processes found as host.upstream_pids says) and raises
// MemoryLeakSuspected when a robust trend projects it to reach the cgroup
// memory limit (else MemTotal) within the horizon (docs/alerting.md).
type MemoryLeak struct {
	Disabled bool     `yaml:"disabled"`
	Interval Duration `yaml:"interval"` // one /proc read per interval; default: alerting.window
	Span     Duration `yaml:"span"`     // samples kept and fitted; default 6h
	MinSpan  Duration `yaml:"min_span"` // samples needed before judging; default 30m
	Horizon  Duration `yaml:"horizon"`  // alert when exhaustion is projected within it; default 168h
	MinRise  float64  `yaml:"min_rise"` // smallest rise over the span, relative: default 0.1
	// DeviceMinRiseMiB is the smallest rise of the upstream's outstanding
	// CUDA allocations (eBPF probes) that can be a leak: counted from when
	// the probes attached, the level has no start to be relative to.
	// Default 64; raise it for servers whose allocator pools grow by more
	// as they warm up.
	DeviceMinRiseMiB float64 `yaml:"device_min_rise_mib"`
}

// Baseline is each model's history and seasonal baseline (docs/baseline.md):
// once a model has two daily cycles of history, P99OverBaseline judges
// against the band of a fitted baseline.Model instead of a trailing median.
type Baseline struct {
	Disabled    bool     `yaml:"disabled"`     // keep the trailing median only
	HistoryPath string   `yaml:"history_path"` // file the history survives restarts in; "": memory only
	History     Duration `yaml:"history"`      // history kept per model, default 336h (two weeks)
	RefitEvery  Duration `yaml:"refit_every"`  // refit once seasonal, default 168h
	Speedup     float64  `yaml:"speedup"`      // history seconds per real second (demos), default 1
}

// HistoryOptions are the history package's options from b.
func (b Baseline) HistoryOptions(maxModels int) history.Options {
	return history.Options{Path: b.HistoryPath, Span: b.History.D(), RefitEvery: b.RefitEvery.D(), Speedup: b.Speedup, MaxModels: maxModels}
}

// Route is one listen/upstream pair.
type Route struct {
	Name             string       `yaml:"name"`
	Protocol         string       `yaml:"protocol"` // grpc or http
	Listen           string       `yaml:"listen"`
	Upstream         string       `yaml:"upstream"`
	UpstreamProtocol string       `yaml:"upstream_protocol"` // http routes: http1 (default) or h2c
	TLS              *ListenerTLS `yaml:"tls"`
	UpstreamTLS      *UpstreamTLS `yaml:"upstream_tls"`
	MaxMessageBytes  int64        `yaml:"max_message_bytes"` // gRPC message limit
	APIHint          string       `yaml:"api_hint"`          // tfserving or kserve_v1 for /v1/models/{m}:predict
	Readiness        string       `yaml:"readiness"`         // auto, tcp or none
	DialTimeout      Duration     `yaml:"dial_timeout"`
	TritonStats      TritonStats  `yaml:"triton_stats"`
}

// ListenerTLS serves TLS on a listener; ClientCAFile turns on mTLS.
type ListenerTLS struct {
	CertFile     string `yaml:"cert_file"`
	KeyFile      string `yaml:"key_file"`
	ClientCAFile string `yaml:"client_ca_file"`
}

// UpstreamTLS dials the upstream over TLS.
type UpstreamTLS struct {
	CAFile             string `yaml:"ca_file"`
	CertFile           string `yaml:"cert_file"`
	KeyFile            string `yaml:"key_file"`
	ServerName         string `yaml:"server_name"`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify"`
}

// TritonStats polls the upstream's statistics extension.
type TritonStats struct {
	// Enabled unset means automatic: poll each upstream host once, over its
	// gRPC route when it has one, so a server fronted by both a gRPC and an
	// HTTP route is not counted twice. true polls through this route always.
	Enabled  *bool    `yaml:"enabled"`
	Interval Duration `yaml:"interval"`
}

// Push sends metrics to VictoriaMetrics.
type Push struct {
	URL         string            `yaml:"url"` // e.g. http://vm:8428/api/v1/import/prometheus
	Interval    Duration          `yaml:"interval"`
	ExtraLabels map[string]string `yaml:"extra_labels"` // pod, namespace, ...
}

// Limits bound what the sidecar holds.
type Limits struct {
	MaxModels      int     `yaml:"max_models"`       // distinct model/version label pairs before "other"
	CaptureBytes   int     `yaml:"capture_bytes"`    // HTTP body prefix kept for the decode
	CaptureBudget  int64   `yaml:"capture_budget"`   // bytes all captures of a route (HTTP prefixes, sampled gRPC messages) may hold at once, waiting for their decode
	DecodeSample   float64 `yaml:"decode_sample"`    // share of infer calls fully decoded: gRPC's first message unmarshalled, HTTP's captured bodies validated byte by byte; the decode phase
	DecodeMaxBytes int     `yaml:"decode_max_bytes"` // largest gRPC message captured for that
	PipelineQueue  int     `yaml:"pipeline_queue"`   // finished records waiting for the sinks
}

// Defaults.
const (
	DefaultAdminListen     = "127.0.0.1:9901"
	DefaultMaxMessageBytes = 1<<31 - 1 // 2 GiB: large tensors pass, a runaway prefix does not
	MaxGRPCMessage         = 1<<32 - 1 // the gRPC length prefix is 32 bits
)

// Data planes: how a gRPC route's bytes move (see proxy and proxy/h2).
const (
	DataPlaneStdlib = "stdlib"
	DataPlaneFrame  = "frame"
)

// DefaultDataPlane is INFERWATCH_DATA_PLANE when set (so a whole fleet or a
// test run can switch), else stdlib until the frame plane has held long
// enough to become the default.
func DefaultDataPlane() string {
	if v := os.Getenv("INFERWATCH_DATA_PLANE"); v != "" {
		return v
	}
	return DataPlaneStdlib
}

// Default returns a Config with every default filled and no routes.
//
// Tracing starts from the OpenTelemetry SDK's OTEL_* environment variables
// (otelenv.go); the YAML file and the flags override them.
func Default() Config {
	c := Config{
		AdminListen:  DefaultAdminListen,
		DrainTimeout: Duration(30 * time.Second),
		LogLevel:     "info",
		DataPlane:    DefaultDataPlane(),
		Push:         Push{Interval: Duration(10 * time.Second)},
		Alerting:     Alerting{Window: Duration(10 * time.Second), Resend: Duration(time.Minute)},
		Tracing:      Tracing{Protocol: "grpc", Insecure: true, Keep: 200},
		Host:         Host{GPUInterval: Duration(time.Second), BPFBudget: 0.03},
		Limits: Limits{
			MaxModels:      100,
			CaptureBytes:   1 << 20,
			CaptureBudget:  64 << 20,
			DecodeSample:   0.01,
			DecodeMaxBytes: 4 << 20,
			PipelineQueue:  8192,
		},
	}
	applyOTELEnv(&c.Tracing, osGetenv)
	return c
}

// Load reads a YAML file over the defaults. Unknown fields are errors.
func Load(path string) (Config, error) {
	cfg := Default()
	b, err := os.ReadFile(path)
	if err != nil {
		return cfg, fmt.Errorf("read config: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		var ve *valueError
		if errors.As(err, &ve) {
			var root yaml.Node
			if yaml.Unmarshal(b, &root) == nil {
				if field := fieldAt(&root, ve.line, ve.column); field != "" {
					return cfg, fmt.Errorf("config %s: %s: %w", path, field, ve)
				}
			}
		}
		var te *yaml.TypeError
		if errors.As(err, &te) {
			var root yaml.Node
			if yaml.Unmarshal(b, &root) == nil {
				return cfg, fmt.Errorf("config %s: %s", path, nameTypeErrors(&root, te))
			}
		}
		return cfg, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, nil
}

// typeErrorLine is how yaml.v3 starts each message of a TypeError.
var typeErrorLine = regexp.MustCompile(`^line (\d+): `)

// nameTypeErrors rewrites yaml's "line 4: cannot unmarshal ..." messages
// (a value of the wrong type in a field of a type without its own
// unmarshaller, such as time.Duration) to name the field as well.
func nameTypeErrors(root *yaml.Node, te *yaml.TypeError) string {
	msgs := make([]string, len(te.Errors))
	for i, m := range te.Errors {
		msgs[i] = m
		sub := typeErrorLine.FindStringSubmatch(m)
		if sub == nil {
			continue
		}
		line, _ := strconv.Atoi(sub[1])
		if field := fieldOnLine(root, line); field != "" {
			msgs[i] = field + ": " + m
		}
	}
	return strings.Join(msgs, "; ")
}

// Finish fills per-route defaults; call it after flags are applied.
func (c *Config) Finish() {
	for i := range c.Routes {
		r := &c.Routes[i]
		if r.Name == "" {
			r.Name = fmt.Sprintf("%s-%d", r.Protocol, i)
		}
		if r.Protocol == "http" && r.UpstreamProtocol == "" {
			r.UpstreamProtocol = "http1"
		}
		if r.MaxMessageBytes == 0 {
			r.MaxMessageBytes = DefaultMaxMessageBytes
		}
		if r.Readiness == "" {
			r.Readiness = "auto"
		}
		if r.DialTimeout == 0 {
			r.DialTimeout = Duration(time.Second)
		}
		if r.TritonStats.Interval == 0 {
			r.TritonStats.Interval = Duration(5 * time.Second)
		}
	}
}

// Duration is a time.Duration written as "30s" in YAML.
type Duration time.Duration

// UnmarshalYAML parses a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return &valueError{line: n.Line, column: n.Column, err: fmt.Errorf("want a duration such as \"30s\": %w", err)}
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return &valueError{line: n.Line, column: n.Column, err: err}
	}
	*d = Duration(v)
	return nil
}

// Bytes is a size in bytes, written as a number or with a Kubernetes
// quantity's suffix: "268435456", "256Mi", "1G".
type Bytes int64

// ParseBytes reads a Bytes value.
func ParseBytes(s string) (Bytes, error) {
	s = strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40}, {"k", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}} {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = v, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("%q is not a size in bytes (a number, or with Ki, Mi, Gi, Ti, k, M, G, T)", s)
	}
	return Bytes(n * mult), nil
}

// UnmarshalYAML parses a number or a quantity.
func (b *Bytes) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return &valueError{line: n.Line, column: n.Column, err: fmt.Errorf("want a size such as \"256Mi\": %w", err)}
	}
	v, err := ParseBytes(s)
	if err != nil {
		return &valueError{line: n.Line, column: n.Column, err: err}
	}
	*b = v
	return nil
}

// String writes the number of bytes.
func (b Bytes) String() string { return strconv.FormatInt(int64(b), 10) }

// Set reads a flag's value.
func (b *Bytes) Set(s string) error {
	v, err := ParseBytes(s)
	if err != nil {
		return err
	}
	*b = v
	return nil
}

// valueError is a bad value at a place in the file; Load names its field.
type valueError struct {
	line, column int
	err          error
}

func (e *valueError) Error() string { return fmt.Sprintf("line %d: %v", e.line, e.err) }
func (e *valueError) Unwrap() error { return e.err }

// D returns the time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// fieldAt returns the path ("routes[0].triton_stats.interval") of the value
// at line:column, so an error about a value names its field.
func fieldAt(root *yaml.Node, line, column int) string {
	return fieldWhere(root, "", func(v *yaml.Node) bool { return v.Line == line && v.Column == column })
}

// fieldOnLine returns the path of the first scalar value on line.
func fieldOnLine(root *yaml.Node, line int) string {
	return fieldWhere(root, "", func(v *yaml.Node) bool { return v.Kind == yaml.ScalarNode && v.Line == line })
}

// fieldWhere returns the path of the first value under n that matches is
// (depth first, in file order); "" when none is.
func fieldWhere(n *yaml.Node, prefix string, is func(*yaml.Node) bool) string {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if f := fieldWhere(c, prefix, is); f != "" {
				return f
			}
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			path := k.Value
			if prefix != "" {
				path = prefix + "." + k.Value
			}
			if is(v) {
				return path
			}
			if f := fieldWhere(v, path, is); f != "" {
				return f
			}
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			path := fmt.Sprintf("%s[%d]", prefix, i)
			if is(c) {
				return path
			}
			if f := fieldWhere(c, path, is); f != "" {
				return f
			}
		}
	}
	return ""
}
