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
	Taken    time.Time          `json:"taken"`
	Current  Breakdown          `json:"current"`
	Previous Breakdown          `json:"previous"`
	Moved    []string           `json:"moved"` // phases/stages whose mean moved most, largest first
	Slowest  []SlowCall         `json:"slowest"`
	InFlight int64              `json:"inFlight"`
	Extra    map[string]float64 `json:"extra,omitempty"` // later: GPU, run-queue delay, throttling
}

// Breakdown is one window's per-phase and per-stage means, in seconds.
type Breakdown struct {
	Start  time.Time          `json:"start"`
	Count  int64              `json:"count"`
	Mean   float64            `json:"mean"`
	StdDev float64            `json:"stddev"`
	P99    float64            `json:"p99"`
	Phases map[string]float64 `json:"phases"`
	Stages map[string]float64 `json:"stages"`
}

// SlowCall is one of the slowest recent calls.
type SlowCall struct {
	At       time.Time `json:"at"`
	Duration float64   `json:"duration"` // seconds
	Code     string    `json:"code"`
	TraceID  string    `json:"traceId,omitempty"` // when tracing kept the call
}

// Notifier receives every alert transition (pending ones excepted) and
// periodic re-sends of firing alerts. It must not block the caller for long:
// queue and retry on its own, bounded, counting what it drops.
type Notifier interface {
	Notify(ctx context.Context, alerts []Alert)
}
