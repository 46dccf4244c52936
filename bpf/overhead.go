package bpf

import (
	"time"

	"golang.org/x/sys/unix"
)

// Costs are what one hit of each kind of hook costs the process that hits
// it, in CPU time.
type Costs struct {
	Uprobe     time.Duration `json:"uprobe_ns"`
	Uretprobe  time.Duration `json:"uretprobe_ns"`
	Tracepoint time.Duration `json:"tracepoint_ns"`
	// Plain is the calibration's no-op call without probes.
	Plain time.Duration `json:"plain_call_ns,omitempty"`
	// Calibrated is false when DefaultCosts stand in for a failed
	// calibration.
	Calibrated bool `json:"calibrated"`
}

// DefaultCosts are used when calibration fails: the costs measured on a
// small VM (a uprobe trap is dear under virtualisation), so that the
// estimate errs high on bare metal.
var DefaultCosts = Costs{Uprobe: 20 * time.Microsecond, Uretprobe: 20 * time.Microsecond, Tracepoint: 300 * time.Nanosecond}

// Overhead is the budget controller's view of the last period.
type Overhead struct {
	Budget float64 `json:"budget"` // share of one core allowed
	// Estimated is the share of one core the probes cost over the last
	// period: Σ hit rate × per-hit cost, plus the time spent attaching
	// and detaching the duty-cycled probes.
	Estimated float64 `json:"estimated"`
	// Spent is the estimated CPU time the probes have cost since Start.
	Spent time.Duration `json:"spent_ns"`
	// LaunchDuty is the fraction of the coming period the launch probes
	// are attached; 1 means always, and exact counts.
	LaunchDuty float64 `json:"launch_duty"`
	// LaunchRate is the launch probe's hits per second while attached.
	LaunchRate float64            `json:"launch_rate"`
	HitRates   map[string]float64 `json:"hit_rates"` // per second, by counter
	Costs      Costs              `json:"costs"`
}

// decideDuty returns the fraction of a period the launch probes may stay
// attached: all of it when their cost fits in what the always-on probes
// leave of the budget, else the fraction that fits, but not below minDuty.
// Rates are per second, costs in seconds per hit, the budget and the
// result in shares of one core.
func decideDuty(budget, alwaysOn, launchRate, launchCost, minDuty float64) float64 {
	need := launchRate * launchCost
	left := budget - alwaysOn
	if need <= 0 || need <= left {
		return 1
	}
	return min(max(left/need, minDuty), 1)
}

// gateLog remembers when the launch gate was open, so that a sample can
// tell how much of its interval was observed and how much is estimated.
type gateLog struct {
	open   bool
	since  time.Time
	closed [][2]time.Time // the last few closed on-phases, oldest first
}

func (g *gateLog) openAt(t time.Time) {
	if !g.open {
		g.open, g.since = true, t
	}
}

func (g *gateLog) closeAt(t time.Time) {
	if !g.open {
		return
	}
	g.open = false
	g.closed = append(g.closed, [2]time.Time{g.since, t})
	if len(g.closed) > 8 {
		g.closed = g.closed[1:]
	}
}

// onWithin is how long the gate was open within [a, b].
func (g *gateLog) onWithin(a, b time.Time) time.Duration {
	var d time.Duration
	add := func(s, e time.Time) {
		if ov := overlap(s, e, a, b); ov > 0 {
			d += ov
		}
	}
	for _, c := range g.closed {
		add(c[0], c[1])
	}
	if g.open {
		add(g.since, b)
	}
	return d
}

// threadCPU is the CPU time of the calling thread; callers lock their
// goroutine to it.
func threadCPU() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return time.Duration(ts.Nano())
}
