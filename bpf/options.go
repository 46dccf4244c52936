package bpf

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// Defaults and limits of Options.
const (
	DefaultBudget    = 0.03 // of one core
	DefaultPeriod    = time.Second
	DefaultMinDuty   = 0.01
	DefaultSample    = 250 * time.Millisecond
	MinSample        = 100 * time.Millisecond
	MaxSample        = time.Second
	DefaultRescan    = time.Second
	DefaultRetention = 10 * time.Minute

	// firstPeriod is how long the launch probes run before the first duty
	// decision: long enough to see a launch rate, short enough that an
	// unknown rate costs little.
	firstPeriod = 100 * time.Millisecond
	// maxRingSamples bounds each part of the sample ring whatever the
	// retention.
	maxRingSamples = 36000
	// fineSpan is how much of the retention the ring keeps at the sample
	// interval; older samples are merged coarsePer to one. Calls and
	// windows being judged are all this recent.
	fineSpan  = 2 * time.Minute
	coarsePer = 8
	// maxSyncSpans bounds the synchronisation waits kept for Window.
	maxSyncSpans = 1 << 16
	// maxOOMKills bounds the OOM kills kept for Window.
	maxOOMKills = 256
)

// Options configures Probes. The zero value probes nothing but the
// machine's OOM kills and pressure; set PIDs to follow an upstream.
type Options struct {
	// PIDs returns the upstream's processes (TGIDs) as this PID namespace
	// numbers them; gpu/pids.Spec.Resolve fits. It is called every Rescan,
	// so a restarted upstream (a new PID) is followed. A failure keeps the
	// last set.
	PIDs func() ([]int, error)

	// Budget is the share of one CPU core the probes may cost, estimated
	// as Σ hit rate × per-hit cost; default DefaultBudget (3%).
	Budget float64
	// Period is the duty cycle of the launch probes: attached for the
	// first duty×Period of each Period; default 1s.
	Period time.Duration
	// MinDuty is the least fraction of a Period the launch probes stay
	// attached, however far over budget; default 1%.
	MinDuty float64

	// Sample is how often the in-kernel aggregates are read into the ring
	// Window joins calls to: 100ms–1s, default 250ms.
	Sample time.Duration
	// Rescan is how often the upstream's PIDs are resolved and their
	// /proc/PID/maps read for CUDA libraries; default 1s.
	Rescan time.Duration
	// Retention is how far back Window can look; default 10m. The last 2
	// minutes of it are kept at the Sample interval, older samples merged
	// 8 to one.
	Retention time.Duration

	// Costs are the per-hit costs; nil measures them at start (Calibrate).
	Costs *Costs

	Set    *metrics.Set // where the metrics go; nil: no metrics
	Logger *slog.Logger // default slog.Default()
}

func (o Options) withDefaults() (Options, error) {
	switch {
	case o.Budget == 0:
		o.Budget = DefaultBudget
	case o.Budget < 0:
		return o, fmt.Errorf("bpf: negative overhead budget %v", o.Budget)
	}
	switch {
	case o.Period == 0:
		o.Period = DefaultPeriod
	case o.Period < 10*time.Millisecond:
		return o, fmt.Errorf("bpf: duty-cycle period %v is below 10ms", o.Period)
	}
	switch {
	case o.MinDuty == 0:
		o.MinDuty = DefaultMinDuty
	case o.MinDuty < 0 || o.MinDuty > 1:
		return o, fmt.Errorf("bpf: minimum duty %v is not within [0, 1]", o.MinDuty)
	}
	switch {
	case o.Sample == 0:
		o.Sample = DefaultSample
	case o.Sample < MinSample || o.Sample > MaxSample:
		return o, fmt.Errorf("bpf: sample interval %v is not within [%v, %v]", o.Sample, MinSample, MaxSample)
	}
	switch {
	case o.Rescan == 0:
		o.Rescan = DefaultRescan
	case o.Rescan < 10*time.Millisecond:
		return o, fmt.Errorf("bpf: rescan interval %v is below 10ms", o.Rescan)
	}
	switch {
	case o.Retention == 0:
		o.Retention = DefaultRetention
	case o.Retention < 0:
		return o, fmt.Errorf("bpf: negative retention %v", o.Retention)
	}
	if o.Costs != nil && (o.Costs.Uprobe <= 0 || o.Costs.Uretprobe <= 0 || o.Costs.Tracepoint <= 0) {
		return o, fmt.Errorf("bpf: per-hit costs must be positive: %+v", *o.Costs)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o, nil
}

// ringShape sizes the sample ring (see ring): the newest fineSpan of the
// retention at the sample interval, the rest in samples of coarsePer.
func (o Options) ringShape() (fine, coarse, per int) {
	span := min(o.Retention, fineSpan)
	fine = min(int((span+o.Sample-1)/o.Sample)+1, maxRingSamples)
	if rest := o.Retention - span; rest > 0 {
		step := coarsePer * o.Sample
		coarse, per = min(int((rest+step-1)/step)+1, maxRingSamples), coarsePer
	}
	return fine, coarse, per // per 0: no coarse part
}
