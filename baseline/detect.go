package baseline

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// Anomaly kinds a Detector names.
const (
	KindBurst           = "burst"            // a short run of large excesses (noisy neighbour)
	KindLevelShift      = "level_shift"      // a step (deploy regression), CUSUM
	KindDrift           = "drift"            // a gradual rise (leak)
	KindSpread          = "spread"           // variance increase, median unchanged
	KindPeriodic        = "periodic"         // exceedances recurring at a fixed period
	KindLoadSensitivity = "load_sensitivity" // latency's response to load changed
)

// DetectorOptions configure a Detector. Zero fields take the defaults shown.
type DetectorOptions struct {
	Fit FitOptions
	// History is the span of points kept and fitted: 14 days (two weekly
	// cycles).
	History time.Duration
	// RefitEvery is the refit schedule once the model is seasonal: 7 days.
	// Before that the model is refitted daily, as cycles accrue.
	RefitEvery time.Duration
	// Band is the prediction interval's half-width in residual scales: 3.
	Band float64
	// MinExcess is the smallest relative excess of latency over the
	// expected that can be an incident: 0.2 (harmless shifts are under 10%,
	// and the fit's own error at an hour can add 5–10%).
	MinExcess float64
	// LevelHalfLife is the half-life of the cheap level update between
	// fits: 12h.
	LevelHalfLife time.Duration
	// BurstMinutes is how many consecutive points must exceed the band (and
	// the expected by 25%) for a burst: 3, so a two-minute GC pause passes.
	BurstMinutes int
	// SpikeExcess: two consecutive points this far over the expected
	// (relative) and a scale over the band are a burst already: 1 (a
	// doubling). GC-like pauses (+30% to +60% for two minutes) stay under
	// it, noise included.
	SpikeExcess float64
}

func (o DetectorOptions) withDefaults() DetectorOptions {
	if o.History == 0 {
		o.History = 2 * week
	}
	if o.RefitEvery == 0 {
		o.RefitEvery = week
	}
	if o.Band == 0 {
		o.Band = 3
	}
	if o.MinExcess == 0 {
		o.MinExcess = 0.2
	}
	if o.LevelHalfLife == 0 {
		o.LevelHalfLife = 12 * time.Hour
	}
	if o.BurstMinutes == 0 {
		o.BurstMinutes = 3
	}
	if o.SpikeExcess == 0 {
		o.SpikeExcess = 1
	}
	o.Fit = o.Fit.withDefaults()
	return o
}

// Validate reports the first invalid settings, naming each field.
func (o DetectorOptions) Validate() error {
	o = o.withDefaults()
	var errs []error
	if err := o.Fit.validate(); err != nil {
		errs = append(errs, err)
	}
	if o.History < 2*day {
		errs = append(errs, fmt.Errorf("history %v: must be at least 48h", o.History))
	}
	if o.RefitEvery < time.Hour {
		errs = append(errs, fmt.Errorf("refit_every %v: must be at least 1h", o.RefitEvery))
	}
	if !(o.Band > 0) { // NaN too
		errs = append(errs, fmt.Errorf("band %g: must be positive", o.Band))
	}
	if !(o.MinExcess > 0 && o.MinExcess < 10) {
		errs = append(errs, fmt.Errorf("min_excess %g: must be in (0, 10)", o.MinExcess))
	}
	if o.LevelHalfLife < 0 {
		errs = append(errs, fmt.Errorf("level_half_life %v: must not be negative", o.LevelHalfLife))
	}
	if !(o.SpikeExcess > 0) {
		errs = append(errs, fmt.Errorf("spike_excess %g: must be positive", o.SpikeExcess))
	}
	if o.BurstMinutes < 1 {
		errs = append(errs, fmt.Errorf("burst_minutes %d: must be at least 1", o.BurstMinutes))
	}
	return errors.Join(errs...)
}

// Output is the detector's verdict on one point.
type Output struct {
	T                      time.Time
	Value                  float64
	Expected, Lower, Upper float64       // in the value's unit; NaN before any model
	Score                  float64       // in [0,1]; 0.5 and over while alerting
	Alert                  bool          //
	Kind                   string        // the alerting detector's kind, "" when not alerting
	Period                 time.Duration // KindPeriodic: the recurrence found
	Model                  string        // the model kind in use ("" before any)
}

// KindText is Kind with the period for periodic alerts ("periodic/30m").
func (o Output) KindText() string {
	if o.Kind == KindPeriodic && o.Period > 0 {
		return fmt.Sprintf("%s/%dm", o.Kind, int(o.Period.Round(time.Minute)/time.Minute))
	}
	return o.Kind
}

// recent is one point of the detector's short memory.
type recent struct {
	t    time.Time
	r, z float64
	s    float64 // the residual scale then
	u    float64 // (QPS/QPS_ref)², NaN without load
}

// Detector runs the baseline and the detectors over points in time order.
// It is not safe for concurrent use.
type Detector struct {
	o       DetectorOptions
	hist    []Point
	model   *Model
	nextFit time.Time
	fits    int
	level   float64
	alpha   float64 // per-minute weight of the level update
	prevR   float64
	prevT   time.Time
	ring    []recent // last 180 minutes
	scratch []float64

	burstRun   int
	burstZ     [3]float64 // z of the last three points of the run
	bigRun     int
	burstOn    bool
	burstClear int

	cusum      float64
	levelOn    bool
	levelKind  string
	levelAt    time.Time // when levelKind was last decided
	levelClear int
	span       []spanMean // quarter-hour means since three hours before the level alert
	spanAcc    spanMean   // the quarter hour being summed

	spread      []float64 // last spreadWindow differences: 1 when large
	spreadSum   float64
	spreadOn    bool
	prevBig     float64 // the previous difference if it was large, else 0
	spreadClear int

	spikeRun   int
	spikes     []time.Time // starts of recent exceedance runs
	periodOn   bool
	period     time.Duration
	lastSpike  time.Time
	alertSince time.Time
}

const (
	ringSpan = 180 * time.Minute
	// Spread: of the last spreadWindow successive differences, spreadOn or
	// more beyond spreadK of their standard deviation fire, at most
	// spreadOff for 10 minutes clear. A null difference is that large 1.2%
	// of the time; an outlier or a GC pause makes two at most; a spread
	// ×2.5 makes a third of them that large.
	spreadWindow = 12
	spreadK      = 2.5
	spreadOn     = 4
	spreadOff    = 1
	cusumK       = 1.0
	cusumH       = 10.0
)

// NewDetector returns a detector, or the first invalid option.
func NewDetector(o DetectorOptions) (*Detector, error) {
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("baseline: detector options: %w", err)
	}
	o = o.withDefaults()
	d := &Detector{o: o}
	if hl := o.LevelHalfLife.Minutes(); hl > 0 {
		d.alpha = 1 - math.Exp2(-1/hl)
	}
	return d, nil
}

// Model returns the model in use (nil before one could be fitted).
func (d *Detector) Model() *Model { return d.model }

// Fits returns how many times the detector has fitted its model.
func (d *Detector) Fits() int { return d.fits }

// Step judges one point, using only the points before it and itself.
func (d *Detector) Step(p Point) Output {
	out := Output{T: p.T, Value: p.V, Expected: math.NaN(), Lower: math.NaN(), Upper: math.NaN()}
	d.maybeRefit(p.T)
	p.Exclude = false
	if !usable(p) || d.model == nil {
		d.remember(p)
		if d.model != nil {
			out.Model = d.model.Kind
		}
		return out
	}
	m := d.model
	out.Model = m.Kind
	mu, s := m.Predict(p.T, p.Q)
	mu += d.level
	lv := math.Log(p.V)
	r := lv - mu
	z := r / s
	out.Expected = math.Exp(mu)
	out.Lower = math.Exp(mu - d.o.Band*s)
	out.Upper = math.Exp(mu + d.o.Band*s)

	u := math.NaN()
	if m.UsesLoad && knownLoad(p.Q) {
		x := p.Q / m.qref
		u = x * x
	}
	d.push(recent{t: p.T, r: r, z: z, s: s, u: u})
	minEx := math.Log1p(d.o.MinExcess)
	score := max(0, z) / d.o.Band

	// Burst: consecutive large excesses; or two minutes of a spike too
	// large for a GC pause.
	if z > d.o.Band && r > math.Log(1.25) {
		d.burstRun++
		d.burstZ[d.burstRun%3] = z
	} else {
		d.burstRun = 0
	}
	// Three points over the band in a row happen in AR(1) noise about once
	// in ten days; asking their sum to reach four bands makes it rare.
	sustained := d.burstRun >= d.o.BurstMinutes && d.burstZ[0]+d.burstZ[1]+d.burstZ[2] >= 4*d.o.Band
	if z > d.o.Band+1 && r > math.Log1p(d.o.SpikeExcess) {
		d.bigRun++
	} else {
		d.bigRun = 0
	}
	switch {
	case sustained || d.bigRun >= 2:
		d.burstOn, d.burstClear = true, 0
	case d.burstOn && z < d.o.Band:
		d.burstClear++
		if d.burstClear >= 5 {
			d.burstOn = false
		}
	}
	score = max(score, float64(d.burstRun)/float64(d.o.BurstMinutes))

	// Level: CUSUM of clipped z, confirmed by the median excess.
	d.cusum = max(0, d.cusum+min(z, 4)-cusumK)
	med15, se15 := d.medianR(15*time.Minute, m.Phi)
	med60, se60 := d.medianR(60*time.Minute, m.Phi)
	sig15 := med15 > minEx && med15 > 4*se15
	slow := med15 > minEx && med15 > 3*se15 && med60 > minEx && med60 > 3*se60
	fire := (d.cusum > cusumH && sig15) || slow
	switch {
	case fire && !d.levelOn:
		d.levelOn, d.levelClear, d.levelAt = true, 0, p.T
		d.seedSpan()
		d.levelKind = d.classify(med15, minEx)
	case d.levelOn && (med15 < minEx/2 || med15 < se15):
		d.levelClear++
		if d.levelClear >= 10 {
			d.levelOn, d.cusum = false, 0
		}
	case d.levelOn:
		d.levelClear = 0
		d.addSpan(d.ring[len(d.ring)-1])
		if p.T.Sub(d.levelAt) >= 15*time.Minute {
			// Evidence accrues: name it again (a load effect shows once
			// load has moved).
			d.levelKind, d.levelAt = d.classify(med15, minEx), p.T
		}
	}
	if !math.IsNaN(med15) {
		score = max(score, d.cusum/cusumH*min(1, max(0, med15/minEx)))
	}

	// Spread: mean of capped squared successive differences over a window.
	if !d.prevT.IsZero() && p.T.Sub(d.prevT) <= 2*time.Minute {
		dd := r - d.prevR
		v := 0.0
		if dd*dd > spreadK*spreadK*2*(1-m.Phi)*s*s {
			v = 1
			// Up then straight down again is one isolated spike (an
			// outlier, a pause), not two signs of spread.
			if d.prevBig*dd < 0 {
				v = 0
			}
			d.prevBig = dd
		} else {
			d.prevBig = 0
		}
		d.spread = append(d.spread, v)
		d.spreadSum += v
		if len(d.spread) > spreadWindow {
			d.spreadSum -= d.spread[0]
			d.spread = d.spread[1:]
		}
	}
	d.prevR, d.prevT = r, p.T
	if len(d.spread) == spreadWindow {
		sv := d.spreadSum
		// Two-sided: points beyond the band on both sides within ten
		// minutes, three at least. Outliers and bursts go up only, and a
		// level shift moves all points one way.
		pos, neg := 0, 0
		from := p.T.Add(-10 * time.Minute)
		for i := len(d.ring) - 1; i >= 0 && d.ring[i].t.After(from); i-- {
			switch z := d.ring[i].z; {
			case z > d.o.Band:
				pos++
			case z < -d.o.Band:
				neg++
			}
		}
		if pos >= 1 && neg >= 1 && pos+neg >= 3 {
			sv = max(sv, spreadOn)
		}
		switch {
		case sv >= spreadOn && !d.spreadOn:
			d.spreadOn, d.spreadClear = true, 0
		case d.spreadOn && sv <= spreadOff:
			d.spreadClear++
			if d.spreadClear >= 10 {
				d.spreadOn = false
			}
		case d.spreadOn:
			d.spreadClear = 0
		}
		score = max(score, sv/spreadOn)
	}

	// Periodic: starts of exceedance runs recurring at a fixed period.
	// A spike counts when the level around it is normal: exceedances
	// inside a step or a drift are not a recurrence.
	if z > d.o.Band+0.5 && r > math.Log(1.6) {
		d.spikeRun++
		if d.spikeRun == 1 && !d.levelOn && !(med60 > minEx/2) {
			d.spike(p.T)
		}
	} else {
		d.spikeRun = 0
	}
	if d.periodOn && p.T.Sub(d.lastSpike) > d.period+3*time.Minute {
		d.periodOn, d.period = false, 0
	}

	out.Alert = d.burstOn || d.levelOn || d.spreadOn || d.periodOn
	switch {
	case d.periodOn:
		out.Kind, out.Period = KindPeriodic, d.period
	case d.levelOn:
		out.Kind = d.levelKind
	case d.spreadOn:
		out.Kind = KindSpread
	case d.burstOn:
		out.Kind = KindBurst
	}
	out.Score = score / (1 + score)
	if out.Alert {
		out.Score = max(out.Score, 0.5)
		if d.alertSince.IsZero() {
			d.alertSince = p.T
		}
	} else {
		d.alertSince = time.Time{}
	}

	// Cheap level update between fits: a slow mean of the residuals,
	// each clipped to ±2.5 scales, skipping runs over the band (spikes).
	// It goes on while alerting, at a quarter of the rate, so that a
	// lasting change (a harmless deploy's 10%) becomes the new normal
	// instead of holding its own alert up.
	if d.burstRun == 0 && d.spikeRun == 0 {
		a := d.alpha
		if out.Alert {
			a /= 4 // slower while alerting: the alert's own evidence
		}
		d.level += a * max(-2.5*s, min(2.5*s, r))
	}
	p.Exclude = out.Alert || d.burstRun > 0
	d.remember(p)
	return out
}

// spike records an exceedance-run start and looks for a recurrence: three
// starts a period apart (±1 minute), the period between 10 minutes and an
// hour (what CronJobs and schedulers use). A spike is a run over the band by half a scale more and 60% over
// the expected, which GC pauses (30–60%) do not reach.
func (d *Detector) spike(t time.Time) {
	cut := t.Add(-7 * time.Hour)
	i := 0
	for i < len(d.spikes) && d.spikes[i].Before(cut) {
		i++
	}
	d.spikes = append(d.spikes[:0], d.spikes[i:]...)
	if d.periodOn {
		// A spike near the expected time keeps the alert alive.
		k := float64(t.Sub(d.lastSpike)) / float64(d.period)
		if k >= 0.5 && math.Abs(k-math.Round(k))*float64(d.period) <= float64(2*time.Minute) {
			d.lastSpike = t
		}
	}
	for j := len(d.spikes) - 1; j >= 0 && !d.periodOn; j-- {
		per := t.Sub(d.spikes[j])
		if per < 10*time.Minute {
			continue
		}
		if per > time.Hour+2*time.Minute {
			break
		}
		want := d.spikes[j].Add(-per)
		for _, e := range d.spikes[:j] {
			if dt := e.Sub(want); dt >= -time.Minute && dt <= time.Minute {
				d.periodOn, d.period, d.lastSpike = true, per.Round(time.Minute), t
				break
			}
		}
	}
	d.spikes = append(d.spikes, t)
}

// classify names a sustained excess from the last three hours of
// residuals: load_sensitivity when the residuals follow load, drift when
// they rose gradually, level_shift otherwise.
func (d *Detector) classify(med15, minEx float64) string {
	now := d.ring[len(d.ring)-1].t
	if followsLoad(d.span) {
		return KindLoadSensitivity
	}
	early := d.medianBetween(now.Add(-180*time.Minute), now.Add(-120*time.Minute))
	mid := d.medianBetween(now.Add(-120*time.Minute), now.Add(-60*time.Minute))
	if !math.IsNaN(early) && !math.IsNaN(mid) && mid > 0.2*med15 && mid < 0.9*med15 && early < mid {
		return KindDrift
	}
	return KindLevelShift
}

// spanMean is a quarter hour of residuals and load, averaged: averaging
// takes out most of AR(1) noise and the minute's QPS jitter (latency
// follows the load, the model's prediction the jitter, so every residual
// carries minus the jitter's effect).
type spanMean struct {
	from   time.Time
	r, u   float64 // sums while being summed, then means
	nr, nu int     // the points summed (u: those with load)
}

const (
	spanStep = 15 * time.Minute
	maxSpan  = 96 // a day of quarter hours
)

// seedSpan starts the level alert's span with the ring's three hours.
func (d *Detector) seedSpan() {
	d.span, d.spanAcc = d.span[:0], spanMean{}
	for _, e := range d.ring {
		d.addSpan(e)
	}
}

// addSpan adds one point to the span, closing a quarter hour when due.
func (d *Detector) addSpan(e recent) {
	a := &d.spanAcc
	if a.nr > 0 && e.t.Sub(a.from) >= spanStep {
		if a.nu > 0 {
			m := spanMean{from: a.from, r: a.r / float64(a.nr), u: a.u / float64(a.nu)}
			if len(d.span) == maxSpan {
				d.span = append(d.span[:0], d.span[1:]...)
			}
			d.span = append(d.span, m)
		}
		*a = spanMean{}
	}
	if a.nr == 0 {
		a.from = e.t
	}
	a.r += e.r
	a.nr++
	if !math.IsNaN(e.u) {
		a.u += e.u
		a.nu++
	}
}

// followsLoad tells whether a level alert's excess is latency's response
// to load having changed: r = c1·ū + c2·ū², through the origin (no load,
// no excess) and rising with load, fits the quarter-hour means clearly
// better (BIC, by a strong margin) than a constant, a ramp in time, or a
// step at any quarter hour. Within a morning load and time rise together
// and all describe the rise alike; the load shape wins once the span holds
// load's turn, which a ramp or a step cannot follow, and it needs load to
// have moved by half.
func followsLoad(span []spanMean) bool {
	n := len(span)
	if n < 12 {
		return false
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	var sr, srr float64
	for _, m := range span {
		lo, hi = min(lo, m.u), max(hi, m.u)
		sr += m.r
		srr += m.r * m.r
	}
	if hi <= 0 || hi < 1.5*lo {
		return false
	}
	var s11, s12, s22, s1r, s2r float64
	for _, m := range span {
		u := m.u
		s11 += u * u
		s12 += u * u * u
		s22 += u * u * u * u
		s1r += u * m.r
		s2r += u * u * m.r
	}
	det := s11*s22 - s12*s12
	if det <= 1e-12*s11*s22 {
		return false
	}
	c1 := (s1r*s22 - s2r*s12) / det
	c2 := (s2r*s11 - s1r*s12) / det
	// Rising with load over the range seen (it may flatten at the top).
	f := func(u float64) float64 { return c1*u + c2*u*u }
	if f(hi) <= f(lo) || f(lo) < 0 || c1+2*c2*lo <= 0 {
		return false
	}
	rssLoad := srr - c1*s1r - c2*s2r

	fn := float64(n)
	rssConst := srr - sr*sr/fn
	best := rssConst
	// A ramp: r = a + b·t.
	var st, stt, str float64
	for _, m := range span {
		t := m.from.Sub(span[0].from).Minutes()
		st += t
		stt += t * t
		str += t * m.r
	}
	if vt := stt - st*st/fn; vt > 0 {
		cov := str - st*sr/fn
		best = min(best, rssConst-cov*cov/vt)
	}
	// A step: r = a0 before quarter j, a1 from it.
	var pre, preSq float64
	for j := 1; j < n; j++ {
		pre += span[j-1].r
		preSq += span[j-1].r * span[j-1].r
		post := sr - pre
		best = min(best, (preSq-pre*pre/float64(j))+(srr-preSq-post*post/float64(n-j)))
	}
	bic := func(rss float64, params int) float64 {
		return fn*math.Log(max(rss, 1e-12)/fn) + float64(params)*math.Log(fn)
	}
	const strong = 6 // a BIC difference read as strong evidence
	return bic(rssLoad, 2)+strong < bic(best, 2)
}

func (d *Detector) push(e recent) {
	d.ring = append(d.ring, e)
	cut := e.t.Add(-ringSpan)
	i := 0
	for i < len(d.ring) && d.ring[i].t.Before(cut) {
		i++
	}
	if i > 0 {
		d.ring = append(d.ring[:0], d.ring[i:]...)
	}
}

// medianR is the median residual of the last span and its standard error
// under AR(1) noise of lag-1 correlation phi (the median's efficiency is
// 2/π of the mean's; n correlated points are worth n(1−φ)/(1+φ)).
func (d *Detector) medianR(span time.Duration, phi float64) (med, se float64) {
	now := d.ring[len(d.ring)-1].t
	from := now.Add(-span)
	var ss float64
	n := 0
	for i := len(d.ring) - 1; i >= 0 && d.ring[i].t.After(from); i-- {
		ss += d.ring[i].s
		n++
	}
	med = d.medianBetween(from, now.Add(time.Nanosecond))
	if n == 0 {
		return med, math.Inf(1)
	}
	neff := float64(n) * (1 - phi) / (1 + phi)
	return med, 1.2533 * ss / float64(n) / math.Sqrt(max(neff, 1))
}

func (d *Detector) medianBetween(from, to time.Time) float64 {
	s := d.scratch[:0]
	for i := len(d.ring) - 1; i >= 0; i-- {
		e := d.ring[i]
		if !e.t.After(from) {
			break
		}
		if e.t.Before(to) {
			s = append(s, e.r)
		}
	}
	d.scratch = s
	if len(s) < 3 {
		return math.NaN()
	}
	return medianInPlace(s)
}

// remember keeps p in the fitting history, bounded by History.
func (d *Detector) remember(p Point) {
	d.hist = append(d.hist, p)
	cut := p.T.Add(-d.o.History)
	if len(d.hist) > 64 && d.hist[0].T.Before(cut) {
		i, _ := slices.BinarySearchFunc(d.hist, cut, func(p Point, t time.Time) int { return p.T.Compare(t) })
		// Compact only when the dead prefix is large, so that appends stay amortised O(1).
		if i > len(d.hist)/8 {
			d.hist = append(d.hist[:0], d.hist[i:]...)
		}
	}
}

// maybeRefit fits when the schedule says so: every 30 minutes while the
// model is trailing, daily until it is seasonal, then every RefitEvery.
func (d *Detector) maybeRefit(now time.Time) {
	if len(d.hist) == 0 || now.Before(d.nextFit) {
		return
	}
	cut := now.Add(-d.o.History)
	i, _ := slices.BinarySearchFunc(d.hist, cut, func(p Point, t time.Time) int { return p.T.Compare(t) })
	m, err := Fit(d.hist[i:], d.o.Fit)
	if err != nil {
		d.nextFit = now.Add(30 * time.Minute)
		return
	}
	d.model, d.fits, d.level = m, d.fits+1, 0
	switch m.Kind {
	case KindTrailing:
		d.nextFit = now.Add(30 * time.Minute)
		if start := d.hist[0].T.Add(2 * day); d.nextFit.After(start) && now.Before(start) {
			d.nextFit = start
		}
	case KindDaily:
		d.nextFit = now.Add(day)
		if start := d.hist[0].T.Add(2 * week); d.nextFit.After(start) && now.Before(start) {
			d.nextFit = start
		}
	default:
		d.nextFit = now.Add(d.o.RefitEvery)
	}
}
