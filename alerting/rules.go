package alerting

import (
	"math"
	"slices"
	"time"

	"github.com/inferwatch/inferwatch/windowstats"
)

// ruleNames in evaluation order; a rule's index is its slot in per-model
// arrays.
var ruleNames = [...]string{RuleLatencyMeanOverSLA, RuleP99OverBaseline, RuleLatencyStdDevJump, RuleThroughputLatencySlopeChange, RuleTTFTOverSLO}

const (
	ruleMean = iota
	ruleP99
	ruleStdDev
	ruleSlope
	ruleTTFT
	numRules
)

// verdict is one rule's judgement of one window.
type verdict int8

const (
	unknown verdict = iota // not enough data: the state machine holds
	clear
	breach
)

// check is a verdict with the figures behind it, for annotations.
type check struct {
	v         verdict
	value     float64 // the statistic judged
	threshold float64 // what it had to exceed
	ref       float64 // the SLA, baseline or reference behind the threshold
}

// transition is what a window did to a rule's state.
type transition int8

const (
	none transition = iota
	toPending
	toFiring
	toResolved
	dropped // pending that cleared before firing
)

// machine moves one rule of one model through pending → firing → resolved:
// a breach must hold forN windows in a row to fire, and a firing rule must be
// clear for hold windows in a row to resolve, so that one noisy window
// neither fires nor ends an alert. A window without enough data neither
// extends nor breaks a pending streak; while firing it counts as clear, so
// that an alert does not outlive the traffic that raised it.
type machine struct {
	state  State // "" when inactive
	hits   int   // consecutive breaches
	clears int   // consecutive clear windows while firing
}

func (m *machine) step(v verdict, forN, hold int) transition {
	switch {
	case v == breach:
		m.clears = 0
		m.hits++
		switch m.state {
		case "":
			if m.hits >= forN {
				m.state = StateFiring
				return toFiring
			}
			m.state = StatePending
			return toPending
		case StatePending:
			if m.hits >= forN {
				m.state = StateFiring
				return toFiring
			}
		}
	case v == clear:
		m.hits = 0
		switch m.state {
		case StatePending:
			m.state = ""
			return dropped
		case StateFiring:
			m.clears++
			if m.clears >= hold {
				m.state, m.clears = "", 0
				return toResolved
			}
		}
	}
	return none
}

// reference is a robust trailing reference of a statistic: the median of the
// last n values judged clear. Values in a breach streak are held out, so that
// a spike does not raise its own baseline; once a streak outlasts adapt
// windows its oldest values are let in, so that a lasting change becomes the
// new normal after about adapt windows.
type reference struct {
	n, adapt int
	clean    []float64
	streak   []float64
	scratch  []float64
}

func (r *reference) median() float64 {
	r.scratch = append(r.scratch[:0], r.clean...)
	slices.Sort(r.scratch)
	k := len(r.scratch)
	if k%2 == 1 {
		return r.scratch[k/2]
	}
	return (r.scratch[k/2-1] + r.scratch[k/2]) / 2
}

// mad returns the median absolute deviation of the clean values from med.
func (r *reference) mad(med float64) float64 {
	r.scratch = append(r.scratch[:0], r.clean...)
	for i, x := range r.scratch {
		r.scratch[i] = math.Abs(x - med)
	}
	slices.Sort(r.scratch)
	k := len(r.scratch)
	if k%2 == 1 {
		return r.scratch[k/2]
	}
	return (r.scratch[k/2-1] + r.scratch[k/2]) / 2
}

func (r *reference) push(x float64, isBreach bool) {
	if isBreach {
		r.streak = append(r.streak, x)
		if len(r.streak) <= r.adapt {
			return
		}
		x = r.streak[0]
		r.streak = append(r.streak[:0], r.streak[1:]...)
	} else {
		r.streak = r.streak[:0]
	}
	r.clean = append(r.clean, x)
	if len(r.clean) > r.n {
		r.clean = append(r.clean[:0], r.clean[len(r.clean)-r.n:]...)
	}
}

// rules holds one model's rule state between windows.
type rules struct {
	th       Thresholds
	machines [numRules]machine
	p99      reference
	std      reference
	fits     []windowstats.Fit // last fitSpan+SlopeReference fits, oldest first
	fitSpan  int               // windows one fit covers: its reference ends this many windows back
	idle     int               // consecutive windows without calls
}

func newRules(th Thresholds, fitSpan int) *rules {
	return &rules{
		th:      th,
		p99:     reference{n: th.BaselineWindows, adapt: th.AdaptAfter},
		std:     reference{n: th.StdDevReference, adapt: th.AdaptAfter},
		fitSpan: fitSpan,
	}
}

// checkMean: LatencyMeanOverSLA. The EMA holds its level through empty
// windows, so sparse traffic keeps a steady verdict; a model silent for
// AdaptAfter windows is no longer judged, and an alert on it resolves.
func (r *rules) checkMean(w *windowstats.WindowView) check {
	if w.Count == 0 {
		r.idle++
	} else {
		r.idle = 0
	}
	sla := r.th.SLA.Seconds()
	c := check{value: w.EMA, threshold: r.th.SLAFactor * sla, ref: sla}
	switch {
	case sla <= 0 || w.EMA <= 0 || r.idle >= r.th.AdaptAfter:
		c.v = unknown
	case w.EMA > c.threshold:
		c.v = breach
	default:
		c.v = clear
	}
	return c
}

// checkP99: P99OverBaseline; it also feeds the baseline.
func (r *rules) checkP99(p99 float64, count int64) check {
	if count < int64(r.th.MinCount) {
		return check{v: unknown, value: p99}
	}
	if len(r.p99.clean) < r.th.BaselineMin {
		r.p99.push(p99, false)
		return check{v: unknown, value: p99}
	}
	base := r.p99.median()
	c := check{value: p99, threshold: r.th.P99Factor * base, ref: base, v: clear}
	if k := r.th.P99NoiseK; k > 0 {
		c.threshold = max(c.threshold, base+k*1.4826*r.p99.mad(base))
	}
	if f := r.th.P99MinExcess.Seconds(); f > 0 {
		c.threshold = max(c.threshold, base+f)
	}
	if p99 > c.threshold {
		c.v = breach
	}
	r.p99.push(p99, c.v == breach)
	return c
}

// checkP99Band: P99OverBaseline against a seasonal band: the expected P99
// at this time and load and the band's upper edge. A breach exceeds the
// upper edge, P99Factor × expected and the absolute floor. The trailing
// reference is fed all the same, so that it is warm should the band go.
func (r *rules) checkP99Band(p99 float64, count int64, expected, upper float64) check {
	if count < int64(r.th.MinCount) || !(expected > 0) {
		return check{v: unknown, value: p99}
	}
	c := check{value: p99, threshold: max(r.th.P99Factor*expected, upper), ref: expected, v: clear}
	if f := r.th.P99MinExcess.Seconds(); f > 0 {
		c.threshold = max(c.threshold, expected+f)
	}
	if p99 > c.threshold {
		c.v = breach
	}
	r.p99.push(p99, c.v == breach)
	return c
}

// checkStdDev: LatencyStdDevJump; it also feeds the reference.
func (r *rules) checkStdDev(w *windowstats.WindowView) check {
	if w.Count < int64(r.th.MinCount) {
		return check{v: unknown, value: w.StdDev}
	}
	if len(r.std.clean) < r.th.StdDevReference {
		r.std.push(w.StdDev, false)
		return check{v: unknown, value: w.StdDev}
	}
	ref := r.std.median()
	c := check{value: w.StdDev, threshold: (1 + r.th.StdDevJump) * ref, ref: ref, v: clear}
	if f := r.th.StdDevMinExcess.Seconds(); f > 0 {
		c.threshold = max(c.threshold, ref+f)
	}
	if w.StdDev > c.threshold && w.StdDev >= r.th.MinStdDev.Seconds() {
		c.v = breach
	}
	r.std.push(w.StdDev, c.v == breach)
	return c
}

// checkSlope: ThroughputLatencySlopeChange. The current fit and its
// reference fits cover disjoint windows, so their errors are independent
// and the band is k·sqrt(SE² + SE_ref²), SE_ref being the mean of the
// reference fits' errors (they overlap each other, so averaging does not
// shrink it).
func (r *rules) checkSlope(f windowstats.Fit) check {
	keep := r.fitSpan + r.th.SlopeReference
	r.fits = append(r.fits, f)
	if len(r.fits) > keep {
		r.fits = append(r.fits[:0], r.fits[len(r.fits)-keep:]...)
	}
	c := check{v: unknown, value: f.Slope}
	usable := func(f windowstats.Fit) bool { return f.OK && f.N >= r.th.SlopeMinWindows }
	if len(r.fits) < keep || !usable(f) {
		return c
	}
	var refSlope, refSE float64
	for _, rf := range r.fits[:r.th.SlopeReference] {
		if !usable(rf) {
			return c
		}
		refSlope += rf.Slope
		refSE += rf.SlopeStdErr
	}
	n := float64(r.th.SlopeReference)
	refSlope, refSE = refSlope/n, refSE/n
	band := r.th.SlopeK * math.Hypot(f.SlopeStdErr, refSE)
	c.ref, c.threshold = refSlope, band
	d := math.Abs(f.Slope - refSlope)
	// A change too small to matter over the throughput actually seen is not
	// news, however tight the fit.
	effect := d*(f.MaxX-f.MinX) >= r.th.SlopeMinEffect*f.MeanY
	c.v = clear
	if d > band && effect {
		c.v = breach
	}
	return c
}

// forWindows returns a rule's "for" in windows.
func (t Thresholds) forWindows(rule int) int {
	switch rule {
	case ruleMean:
		return t.MeanFor
	case ruleP99:
		return t.P99For
	case ruleStdDev:
		return t.StdDevFor
	case ruleTTFT:
		return t.TTFTFor
	}
	return t.SlopeFor
}

// checkTTFT: LLMTimeToFirstTokenOverSLO, the window's P99 time to first
// token (windowstats' llm_ttft part) over the model's TTFT SLO. No SLO, or
// fewer than MinTTFTCount generations in the window, no verdict.
func (r *rules) checkTTFT(w *windowstats.WindowView) check {
	slo := r.th.TTFTSLO.Seconds()
	if slo <= 0 {
		return check{v: unknown}
	}
	var p windowstats.PartView
	for _, s := range w.Stages {
		if s.Name == windowstats.PartTTFT {
			p = s
			break
		}
	}
	c := check{value: p.P99, threshold: slo, ref: slo}
	switch {
	case p.Count < int64(r.th.MinTTFTCount):
		c.v = unknown
	case p.P99 > slo:
		c.v = breach
	default:
		c.v = clear
	}
	return c
}

// durationText renders seconds for annotations.
func durationText(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(10 * time.Microsecond).String()
}
