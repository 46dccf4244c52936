// Package alerting evaluates the seed's latency rules over window statistics
// inside the sidecar — mean over SLA, P99 over baseline, std-dev jump,
// throughput–latency slope change — and moves each alert through pending,
// firing and resolved, handing transitions to notifiers (Alertmanager,
// webhook).
//
// In the pipeline, Engine is a record.Sink: each finished call goes into the
// window statistics (package windowstats); the owner's ticker (Engine.Run)
// closes a window every 10 s and the rules judge it, set the gauges and
// notify. Engine.Stats and Engine.Alerts are what /api/v1/stats and
// /api/v1/alerts serve. docs/alerting.md has the rules' definitions and
// defaults.
package alerting

import (
	"context"
	"time"
)

// State of an alert episode.
type State string

// States.
const (
	StatePending  State = "pending"
	StateFiring   State = "firing"
	StateResolved State = "resolved"
)

// Rule names, also the alertname label.
const (
	RuleLatencyMeanOverSLA           = "LatencyMeanOverSLA"
	RuleP99OverBaseline              = "P99OverBaseline"
	RuleLatencyStdDevJump            = "LatencyStdDevJump"
	RuleThroughputLatencySlopeChange = "ThroughputLatencySlopeChange"
	RuleTTFTOverSLO                  = "LLMTimeToFirstTokenOverSLO"
)

// Alert is one episode of one rule for one model, as notifiers see it.
// Labels always hold alertname, model and version; Annotations hold a human
// summary and the figures that fired it.
type Alert struct {
	Labels       map[string]string `json:"labels"`
	Annotations  map[string]string `json:"annotations"`
	State        State             `json:"state"`
	StartsAt     time.Time         `json:"startsAt"`        // when it started firing (pending: when it became pending)
	EndsAt       time.Time         `json:"endsAt,omitzero"` // set when resolved
	GeneratorURL string            `json:"generatorURL,omitempty"`
	// Snapshot is the root-cause capture taken when the alert fired (for
	// LatencyStdDevJump always; others may carry one).
	Snapshot *Snapshot `json:"snapshot,omitempty"`
}

// Fingerprint identifies an alert across notifications: its sorted labels.
func (a Alert) Fingerprint() string {
	return fingerprint(a.Labels)
}

// Snapshot is what the sidecar saw when an alert fired: the breakdown of the
// current window against the previous one, and the slowest recent calls.
type Snapshot struct {
	Taken    time.Time  `json:"taken"`
	Current  Breakdown  `json:"current"`
	Previous Breakdown  `json:"previous"`
	Moved    []string   `json:"moved"` // phases/stages whose mean moved most, largest first
	Slowest  []SlowCall `json:"slowest"`
	InFlight int64      `json:"inFlight"`
}

// Breakdown is one window's per-phase and per-stage means, in seconds, and
// what the upstream's host did over the window's span.
type Breakdown struct {
	Start  time.Time          `json:"start"`
	Count  int64              `json:"count"`
	Mean   float64            `json:"mean"`
	StdDev float64            `json:"stddev"`
	P99    float64            `json:"p99"`
	Phases map[string]float64 `json:"phases"`
	Stages map[string]float64 `json:"stages"`
	// Host is nil when the engine has no host source (Options.Host) or the
	// window has no span (no window before the first).
	Host *HostBreakdown `json:"host,omitempty"`
}

// HostBreakdown is the upstream's GPU and kernel facts over one window's
// span, from the samplers' own rings (gpu/, bpf/), not from the calls: see
// Options.Host. A nil group is absent — its source is off (no NVML, no
// eBPF privilege) or nothing was sampled in the span — and never stands for
// zero. Totals are over the part of the span the group's samples cover
// (Coverage); divide by Seconds×Coverage for a rate.
type HostBreakdown struct {
	Seconds float64     `json:"seconds"` // the span: the window's length
	GPU     *HostGPU    `json:"gpu,omitempty"`
	CUDA    *HostCUDA   `json:"cuda,omitempty"`
	Sched   *HostSched  `json:"sched,omitempty"`
	Cgroup  *HostCgroup `json:"cgroup,omitempty"`
	OOM     *HostOOM    `json:"oom,omitempty"`
}

// HostGPU is NVML's view of the devices the upstream had a context on.
// With several, each figure is the busiest device's.
type HostGPU struct {
	Coverage float64 `json:"coverage"` // share of the span sampled, 0..1
	Devices  int     `json:"devices"`  // the upstream's devices; 0: it had a context on none, and the figures below are absent
	// Util is the upstream's SM utilisation, 0..1, overlap-weighted mean;
	// NeighbourUtil is every other process's on the same devices (0 when
	// none had a context there). Both are absent when the driver does not
	// report per-process utilisation.
	Util          *float64 `json:"util,omitempty"`
	NeighbourUtil *float64 `json:"neighbourUtil,omitempty"`
	// MemoryUsed is the device's memory in use, all processes, the largest
	// seen; UpstreamMemory the upstream's own share of it.
	MemoryUsed     *uint64 `json:"memoryUsedBytes,omitempty"`
	UpstreamMemory *uint64 `json:"upstreamMemoryBytes,omitempty"`
}

// HostCUDA is the upstream's CUDA API activity, from uprobes.
type HostCUDA struct {
	Coverage          float64 `json:"coverage"`
	Launches          float64 `json:"launches"`                    // kernel launches
	LaunchesEstimated bool    `json:"launchesEstimated,omitempty"` // part of the span was extrapolated (duty-cycled probes)
	CopyBytes         float64 `json:"copyBytes"`                   // host↔device, both directions
	SyncWait          float64 `json:"syncWait"`                    // seconds threads spent in CUDA synchronisation, summed over threads
}

// HostSched is the scheduler's treatment of the upstream's threads, summed
// over threads, in seconds.
type HostSched struct {
	Coverage      float64 `json:"coverage"`
	RunqueueDelay float64 `json:"runqueueDelay"` // runnable, waiting for a CPU
	OffCPU        float64 `json:"offCPU"`        // switched out, blocked or waiting
}

// HostCgroup is the CFS throttling of the upstream's cgroup.
type HostCgroup struct {
	Coverage  float64 `json:"coverage"`
	Throttled float64 `json:"throttled"` // seconds
}

// HostOOM is the OOM killer's victims in the span, machine-wide. Present
// whenever the OOM probe runs, so zero kills is a real zero.
type HostOOM struct {
	Upstream int       `json:"upstream"` // the upstream's own processes
	Other    int       `json:"other"`
	Kills    []OOMKill `json:"kills,omitempty"` // the first MaxOOMKills, the upstream's first
}

// MaxOOMKills bounds HostOOM.Kills; the counts stay exact.
const MaxOOMKills = 8

// OOMKill is one victim of the OOM killer.
type OOMKill struct {
	At       time.Time `json:"at"`
	PID      int       `json:"pid"`
	Comm     string    `json:"comm,omitempty"`
	Upstream bool      `json:"upstream"`
}

// SlowCall is one of the slowest recent calls.
type SlowCall struct {
	At       time.Time `json:"at"`
	Duration float64   `json:"duration"` // seconds
	Code     string    `json:"code"`
	// TraceID is the call's trace, in hex, when the tracer kept it (head
	// sample or tail rule), so the id links to an exported trace.
	TraceID string `json:"traceId,omitempty"`
}

// Notifier receives every alert transition (pending ones excepted) and
// periodic re-sends of firing alerts. It must not block the caller for long:
// queue and retry on its own, bounded, counting what it drops.
type Notifier interface {
	Notify(ctx context.Context, alerts []Alert)
}
