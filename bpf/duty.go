package bpf

import (
	"slices"
	"time"
)

// watchInterval is how often an open launch gate checks its spending: the
// most a sudden burst of launches can run over the budget before the gate
// closes.
const watchInterval = 50 * time.Millisecond

// headroom is the share of the budget the controller aims at; the rest
// absorbs the error of the per-hit costs (calibrated on this process, not
// on the upstream) and the overshoot before an open gate closes. On the
// development VM the calibrated uprobe cost came out 20% under and 7% over
// what a hit cost the workload in the same run, and 0.8 let a 20 s run
// reach 3.6% of a core against the 3% budget.
const headroom = 0.7

// rateTail is how much of the end of an on-phase (at least) its launch
// rate is taken over, for the time the launch probes are detached.
const rateTail = 100 * time.Millisecond

// launchMark is a count (a target's launches, or the launch probes' hits)
// at a watch tick.
type launchMark struct {
	at       time.Time
	launches uint64
}

// tailRate is the rate from the latest mark at least rateTail before end,
// or from start when there is none: a workload that started or stopped
// during a long on-phase is extrapolated as it is at the end, and a short
// window's jitter is kept out.
func tailRate(marks []launchMark, start, end launchMark) float64 {
	from := start
	for i := len(marks) - 1; i >= 0; i-- {
		if m := marks[i]; end.at.Sub(m.at) >= rateTail && m.at.After(start.at) {
			from = m
			break
		}
	}
	d := end.at.Sub(from.at).Seconds()
	if d <= 0 {
		return 0
	}
	return float64(end.launches-from.launches) / d
}

// account reads the hit counters and charges the hits since the last read,
// at their per-hit costs, to the period and to the running total.
func (p *Probes) account() {
	hits, err := p.k.readHits()
	if err != nil {
		p.log.Warn("bpf: cannot read the hit counters", "err", err)
		return
	}
	var cost float64
	for i := range hits {
		d := hits[i] - p.lastHits[i]
		p.per.hits[i] += d
		cost += float64(d) * p.costs.hit(i)
	}
	p.lastHits = hits
	detach := time.Duration(p.detachCPU.Swap(0))
	p.per.attach += detach
	p.spent.Add(int64(time.Duration(cost*float64(time.Second)) + detach))
}

// openGate attaches the launch probes (if they are not) and opens the
// gate: from now on launches count.
func (p *Probes) openGate() {
	if !p.launchOn {
		t0 := threadCPU()
		for _, t := range p.targets {
			for _, pl := range t.libs {
				if pl.file != nil && pl.launch == nil {
					if err := p.attachLaunch(t.pid, pl); err != nil {
						p.log.Warn("bpf: cannot attach the launch probes", "pid", t.pid, "path", pl.lib.path, "err", err)
					}
				}
			}
		}
		p.launchOn = true
		d := threadCPU() - t0
		p.per.attach += d
		p.spent.Add(int64(d))
	}
	if p.gate.open {
		return
	}
	for _, t := range p.targets {
		if c, err := p.k.readCUDA(t.pid); err == nil {
			t.atGate = c.launches()
		}
	}
	if err := p.k.setGate(true); err != nil {
		p.log.Warn("bpf: cannot open the launch gate", "err", err)
		return
	}
	// After attaching, which can take a while: the on-phase is the time the
	// gate was open, and the launch rate is counted over it.
	p.gate.openAt(time.Now())
	p.gateHits = p.lastHits[hitLaunch]
	p.hitMarks = p.hitMarks[:0]
}

// closeGate ends an on-phase: the launch rate it saw stands in for the
// rest of the period, and the launch probes are detached.
func (p *Probes) closeGate() {
	if !p.gate.open {
		return
	}
	if err := p.k.setGate(false); err != nil {
		p.log.Warn("bpf: cannot close the launch gate", "err", err)
		return
	}
	now := time.Now()
	on := now.Sub(p.gate.since).Seconds()
	p.gate.closeAt(now)
	for _, t := range p.targets {
		c, err := p.k.readCUDA(t.pid)
		if err != nil || on <= 0 {
			continue
		}
		r := tailRate(t.marks, launchMark{p.gate.since, t.atGate}, launchMark{now, c.launches()})
		t.marks = t.marks[:0]
		// The median of the last three on-phases: a phase of a few tens
		// of milliseconds in which the process was kept off the CPU (and
		// caught up after) must not set the rate for a whole period.
		if len(t.rates) == 3 {
			t.rates = append(t.rates[:0], t.rates[1:]...)
		}
		t.rates = append(t.rates, r)
		sorted := slices.Sorted(slices.Values(t.rates))
		t.rate, t.rateOK = sorted[len(sorted)/2], true
		p.log.Debug("bpf: on-phase", "pid", t.pid, "on", on, "launches", c.launches()-t.atGate, "measured", r, "rate", t.rate)
	}
	for _, t := range p.targets {
		for _, pl := range t.libs {
			p.detach(pl.launch)
			pl.launch = nil
		}
	}
	p.launchOn = false
}

// appendMark keeps the last eight marks: 400 ms of watch ticks.
func appendMark(ms []launchMark, m launchMark) []launchMark {
	if len(ms) == 8 {
		ms = append(ms[:0], ms[1:]...)
	}
	return append(ms, m)
}

// watch closes the gate early when the launch probes have spent what the
// budget leaves them for the period: a launch rate that jumps while the
// probes are attached costs at most one watchInterval over budget. The
// period then runs out detached, as after a normal on-phase, and the next
// period's duty comes from the rate this on-phase measured. (Ending the
// period at once instead, as this did first, handed the next period a fresh
// allowance while the probes were still attached: at start-up, with no rate
// known yet, the probes stayed attached for 0.4 s, several periods' worth.)
func (p *Probes) watch(now time.Time) {
	if !p.gate.open {
		return
	}
	p.account()
	p.hitMarks = appendMark(p.hitMarks, launchMark{now, p.lastHits[hitLaunch]})
	for _, t := range p.targets {
		if c, err := p.k.readCUDA(t.pid); err == nil {
			t.marks = appendMark(t.marks, launchMark{now, c.launches()})
		}
	}
	if now.Sub(p.gate.since) < time.Duration(p.o.MinDuty*float64(p.per.length)) {
		return
	}
	allowance := (headroom*p.o.Budget - p.alwaysRate) * p.per.length.Seconds()
	if float64(p.per.hits[hitLaunch])*p.costs.Uprobe.Seconds() < allowance {
		return
	}
	p.dutyTimer.Stop()
	p.closeGate()
}

// endPeriod estimates what the period that ends cost, decides the launch
// probes' duty for the next one, and starts its on-phase.
func (p *Probes) endPeriod(now time.Time) {
	p.account()
	elapsed := now.Sub(p.per.start).Seconds()
	if elapsed <= 0 {
		return
	}
	on := p.gate.onWithin(p.per.start, now).Seconds()
	rates := make(map[string]float64, nHits)
	var always float64
	for i, n := range p.per.hits {
		rates[hitNames[i]] = float64(n) / elapsed
		if i != hitLaunch {
			always += float64(n) * p.costs.hit(i)
		}
	}
	launches := float64(p.per.hits[hitLaunch])
	attach := p.per.attach.Seconds()
	switch {
	case p.gate.open:
		// Still attached (always on, or a period cut short): the rate as
		// it is now.
		p.launchRate = tailRate(p.hitMarks, launchMark{p.gate.since, p.gateHits}, launchMark{now, p.lastHits[hitLaunch]})
	case on > 0:
		p.launchRate = launches / on
	}
	p.alwaysRate = (always + attach) / elapsed
	p.duty = decideDuty(headroom*p.o.Budget, p.alwaysRate, p.launchRate, p.costs.Uprobe.Seconds(), p.o.MinDuty)
	over := Overhead{
		Budget:     p.o.Budget,
		Estimated:  (always + launches*p.costs.Uprobe.Seconds() + attach) / elapsed,
		Spent:      time.Duration(p.spent.Load()),
		LaunchDuty: p.duty,
		LaunchRate: p.launchRate,
		HitRates:   rates,
		Costs:      p.costs,
	}
	p.log.Debug("bpf: period", "elapsed", elapsed, "on", on, "launch_hits", launches, "always", always, "attach", attach, "launch_rate", p.launchRate, "estimated", over.Estimated, "next_duty", p.duty)
	p.mu.Lock()
	p.over = over
	p.mu.Unlock()
	p.exp.overhead(over, p.cudaOn, p.schedOn, p.oomOn)
	p.exp.dropped(p.k.dropped())

	p.per = periodState{start: now, length: p.o.Period}
	p.openGate()
	if p.duty < 1 {
		p.dutyTimer.Reset(time.Duration(p.duty * float64(p.o.Period)))
	}
}
