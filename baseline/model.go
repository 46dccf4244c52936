package baseline

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"
)

// Point is one observation: a latency (any unit, > 0) at a time, with the
// request rate then (NaN when unknown). Exclude keeps it out of fits (the
// Detector sets it on points it flagged).
type Point struct {
	T       time.Time
	V       float64
	Q       float64
	Exclude bool
}

// Model kinds: what the history allowed the model to claim.
const (
	KindTrailing = "trailing" // under two days: robust trailing median
	KindDaily    = "daily"    // two days or more: trend + daily + load
	KindSeasonal = "seasonal" // two weeks or more: trend + daily + weekly + load
)

const (
	day  = 24 * time.Hour
	week = 7 * day
)

// FitOptions shape a fit. Zero fields take the defaults shown.
type FitOptions struct {
	DailyOrder  int           // Fourier order of the daily term: 4
	WeeklyOrder int           // Fourier order of the weekly term: 3
	FitBin      time.Duration // the regression runs on medians of bins this long: 5m (1m or less: every point)
	Iterations  int           // IRLS passes after the least-squares start (one Huber, then bisquare): 3
	Ridge       float64       // penalty on every coefficient but the intercept, relative: 1e-6
}

func (o FitOptions) withDefaults() FitOptions {
	if o.DailyOrder == 0 {
		o.DailyOrder = 4
	}
	if o.WeeklyOrder == 0 {
		o.WeeklyOrder = 3
	}
	if o.FitBin == 0 {
		o.FitBin = 5 * time.Minute
	}
	if o.Iterations == 0 {
		o.Iterations = 3
	}
	if o.Ridge == 0 {
		o.Ridge = 1e-6
	}
	return o
}

func (o FitOptions) validate() error {
	var errs []error
	if o.DailyOrder < 1 || o.DailyOrder > 24 {
		errs = append(errs, fmt.Errorf("daily_order %d: must be 1..24", o.DailyOrder))
	}
	if o.WeeklyOrder < 1 || o.WeeklyOrder > 24 {
		errs = append(errs, fmt.Errorf("weekly_order %d: must be 1..24", o.WeeklyOrder))
	}
	if o.FitBin < 0 {
		errs = append(errs, fmt.Errorf("fit_bin %v: must not be negative", o.FitBin))
	}
	if o.Iterations < 0 || o.Iterations > 50 {
		errs = append(errs, fmt.Errorf("iterations %d: must be 0..50", o.Iterations))
	}
	if o.Ridge < 0 {
		errs = append(errs, fmt.Errorf("ridge %g: must not be negative", o.Ridge))
	}
	return errors.Join(errs...)
}

// Model is a fitted baseline. The zero Model is not usable; get one from Fit.
type Model struct {
	Kind     string    // KindTrailing, KindDaily or KindSeasonal
	From, To time.Time // the span fitted
	N        int       // points used
	UsesLoad bool      // QPS is a regressor
	Phi      float64   // lag-1 autocorrelation of the standardised residuals

	o      FitOptions
	coef   []float64
	t0, t1 float64 // trend span, unix seconds
	qref   float64 // load scale: QPS / qref is the regressor
	// typical is the fitted span's mean load terms by hour of the week
	// (Monday 00:00 UTC first), for a point whose load is unknown: taken as
	// zero, a missing minute at peak was predicted at no traffic at all.
	// Hours the span lacks take their hour of the day (fitTypical).
	typical [168]loadTerms
	daily   bool
	weekly  bool
	scaleA  float64     // residual scale: scaleA + scaleB/sqrt(QPS) (with load)
	scaleB  float64     //
	hourSc  [24]float64 // residual scale per UTC hour (without load)
	level   float64     // trailing: median log latency
	tscale  float64     // trailing: robust scale
	minSc   float64     // floor on the scale
	dTab    []float64   // Fourier tables by minute of the day and week
	wTab    []float64   //
	scratch []float64
}

// ErrTooFew is returned by Fit for fewer than 30 usable points.
var ErrTooFew = errors.New("baseline: fewer than 30 usable points")

// Fit fits a model to pts (in time order; points with V <= 0, NaN or
// Exclude set are skipped). Under two days of history it returns a
// trailing model.
func Fit(pts []Point, o FitOptions) (*Model, error) {
	o = o.withDefaults()
	if err := o.validate(); err != nil {
		return nil, fmt.Errorf("baseline: fit options: %w", err)
	}
	var first, last time.Time
	n, withQ := 0, 0
	for _, p := range pts {
		if !usable(p) {
			continue
		}
		if n == 0 {
			first = p.T
		}
		last = p.T
		n++
		if p.Q > 0 && !math.IsInf(p.Q, 0) {
			withQ++
		}
	}
	if n < 30 {
		return nil, ErrTooFew
	}
	m := &Model{From: first, To: last, N: n, o: o}
	span := last.Sub(first)
	if span < 2*day-time.Hour {
		m.fitTrailing(pts)
		return m, nil
	}
	m.Kind = KindDaily
	m.daily = true
	if span >= 2*week-time.Hour {
		m.Kind = KindSeasonal
		m.weekly = true
	}
	m.UsesLoad = withQ >= n*9/10
	if m.UsesLoad {
		qs := make([]float64, 0, n)
		for _, p := range pts {
			if usable(p) && knownLoad(p.Q) {
				qs = append(qs, p.Q)
			}
		}
		m.qref = quantile(qs, 0.99)
		if m.qref <= 0 {
			m.UsesLoad = false
		} else {
			m.fitTypical(pts)
		}
	}
	m.dTab = fourierTable(86400, o.DailyOrder)
	if m.weekly {
		m.wTab = fourierTable(7*86400, o.WeeklyOrder)
	}
	m.t0 = float64(first.UnixNano()) / 1e9
	m.t1 = float64(last.UnixNano()) / 1e9
	logs := make([]float64, 0, n) // log latency of the usable points, in order
	for _, p := range pts {
		if usable(p) {
			logs = append(logs, math.Log(p.V))
		}
	}
	if err := m.regress(pts, logs); err != nil {
		return nil, err
	}
	m.fitScale(pts, logs)
	return m, nil
}

func usable(p Point) bool {
	return !p.Exclude && p.V > 0 && !math.IsNaN(p.V) && !math.IsInf(p.V, 0)
}

// cols is the number of regressors.
func (m *Model) cols() int {
	c := 2 // intercept, trend
	if m.daily {
		c += 2 * m.o.DailyOrder
	}
	if m.weekly {
		c += 2 * m.o.WeeklyOrder
	}
	if m.UsesLoad {
		c += 2
	}
	return c
}

// row fills x with the regressors at unix time t (seconds) and load q.
func (m *Model) row(x []float64, t, q float64) {
	x[0] = 1
	tt := min(max(t, m.t0), m.t1)
	x[1] = 0
	if m.t1 > m.t0 {
		x[1] = 2*(tt-m.t0)/(m.t1-m.t0) - 1
	}
	k := 2
	if m.daily {
		k = fourier(x, k, t, 86400, m.o.DailyOrder, m.dTab)
	}
	if m.weekly {
		// The epoch is a Thursday; shift so that phase 0 is Monday 00:00 UTC.
		k = fourier(x, k, t+3*86400, 7*86400, m.o.WeeklyOrder, m.wTab)
	}
	if m.UsesLoad {
		l := m.load(t, q)
		x[k], x[k+1] = l.u, l.u2
	}
}

// loadTerms are a point's load regressors: u = QPS/qref and u², and
// 1/sqrt(QPS) for the residual scale.
type loadTerms struct{ u, u2, inv float64 }

// knownLoad reports whether q is a measured load.
func knownLoad(q float64) bool { return q > 0 && !math.IsInf(q, 1) }

// load returns the load terms at unix time t for load q, or the fitted
// span's typical ones at that hour of the week when q is unknown.
func (m *Model) load(t, q float64) loadTerms {
	if knownLoad(q) {
		u := q / m.qref
		return loadTerms{u, u * u, 1 / math.Sqrt(q)}
	}
	return m.typical[hourOfWeek(t)]
}

// hourOfWeek is the hour of the week of unix time t, Monday 00:00 UTC = 0.
func hourOfWeek(t float64) int {
	// The epoch is a Thursday: three days in.
	h := int64(math.Floor((t+3*86400)/3600)) % 168
	if h < 0 {
		h += 168
	}
	return int(h)
}

// fitTypical sets typical from the usable points with a known load; an
// hour of the week without any takes that hour of the day's mean, else the
// span's.
func (m *Model) fitTypical(pts []Point) {
	var sum [168]loadTerms
	var n [168]float64
	var all loadTerms
	var nAll float64
	for _, p := range pts {
		if !usable(p) || !knownLoad(p.Q) {
			continue
		}
		h := hourOfWeek(float64(p.T.UnixNano()) / 1e9)
		u := p.Q / m.qref
		l := loadTerms{u, u * u, 1 / math.Sqrt(p.Q)}
		sum[h].u += l.u
		sum[h].u2 += l.u2
		sum[h].inv += l.inv
		n[h]++
		all.u += l.u
		all.u2 += l.u2
		all.inv += l.inv
		nAll++
	}
	// An hour of the week not in the span (a daily model's history is
	// under two weeks) takes the same hour of the other days: latency rises
	// with load, and the span's mean would put a peak hour at the daily
	// average load, under its latency, and a night hour over it.
	var daySum [24]loadTerms
	var dayN [24]float64
	for h := range sum {
		daySum[h%24].u += sum[h].u
		daySum[h%24].u2 += sum[h].u2
		daySum[h%24].inv += sum[h].inv
		dayN[h%24] += n[h]
	}
	for h := range m.typical {
		s, c := sum[h], n[h]
		if c == 0 {
			s, c = daySum[h%24], dayN[h%24]
		}
		if c == 0 {
			s, c = all, nAll
		}
		m.typical[h] = loadTerms{s.u / c, s.u2 / c, s.inv / c}
	}
}

// fourier writes sin/cos of orders 1..order of the phase of t in period:
// from a precomputed table when t is on a whole minute (the usual case),
// else by the angle-addition recurrence from one Sincos.
func fourier(x []float64, k int, t, period float64, order int, tab []float64) int {
	if tab != nil {
		if tm := t / 60; tm == math.Trunc(tm) && math.Abs(tm) < 1<<52 {
			per := int64(period) / 60
			i := int64(tm) % per
			if i < 0 {
				i += per
			}
			copy(x[k:k+2*order], tab[int(i)*2*order:(int(i)+1)*2*order])
			return k + 2*order
		}
	}
	ph := (t - math.Floor(t/period)*period) / period * 2 * math.Pi
	s1, c1 := math.Sincos(ph)
	s, c := s1, c1
	for j := 0; j < order; j++ {
		x[k], x[k+1] = s, c
		k += 2
		s, c = s*c1+c*s1, c*c1-s*s1
	}
	return k
}

// fourierTables caches, per (period in seconds, order), the Fourier terms
// of every minute of the period: the daily and weekly bases are the same
// for every fit, so a fit copies rows instead of computing sines.
var (
	fourierMu     sync.Mutex
	fourierTables = map[[2]int][]float64{}
)

func fourierTable(period, order int) []float64 {
	if period%60 != 0 || period > 7*86400 {
		return nil
	}
	fourierMu.Lock()
	defer fourierMu.Unlock()
	key := [2]int{period, order}
	if tab, ok := fourierTables[key]; ok {
		return tab
	}
	n := period / 60
	tab := make([]float64, n*2*order)
	for i := range n {
		ph := float64(i) / float64(n) * 2 * math.Pi
		for j := range order {
			s, c := math.Sincos(ph * float64(j+1))
			tab[i*2*order+2*j], tab[i*2*order+2*j+1] = s, c
		}
	}
	fourierTables[key] = tab
	return tab
}

// regress fits the coefficients on bin medians by IRLS.
func (m *Model) regress(pts []Point, logs []float64) error {
	p := m.cols()
	// Bin: median log latency, mean load and mean time of each bin.
	bin := m.o.FitBin.Seconds()
	var ys, ts, qs []float64
	var buf []float64
	var bt, bq float64
	bk := math.Inf(-1)
	flush := func() {
		if len(buf) == 0 {
			return
		}
		k := float64(len(buf))
		ys = append(ys, medianInPlace(buf))
		ts = append(ts, bt/k)
		qs = append(qs, bq/k)
		buf, bt, bq = buf[:0], 0, 0
	}
	j := 0
	for _, pt := range pts {
		if !usable(pt) {
			continue
		}
		lv := logs[j]
		j++
		t := float64(pt.T.UnixNano()) / 1e9
		key := t
		if bin > 60 {
			key = math.Floor((t - m.t0) / bin)
		}
		if key != bk {
			flush()
			bk = key
		}
		buf = append(buf, lv)
		bt += t
		q := pt.Q
		if !(q > 0) || math.IsInf(q, 0) {
			q = 0
		}
		bq += q
	}
	flush()
	n := len(ys)
	if n < 2*p {
		return fmt.Errorf("baseline: %d bins for %d coefficients", n, p)
	}
	X := make([]float64, n*p)
	for i := range n {
		m.row(X[i*p:(i+1)*p], ts[i], qs[i])
	}
	w := make([]float64, n)
	for i := range w {
		w[i] = 1
	}
	r := make([]float64, n)
	ata := make([]float64, p*p)
	aty := make([]float64, p)
	coef := make([]float64, p)
	for it := 0; it <= m.o.Iterations; it++ {
		if err := solveWeighted(X, ys, w, n, p, m.o.Ridge, ata, aty, coef); err != nil {
			return fmt.Errorf("baseline: iteration %d: %w", it, err)
		}
		if it == m.o.Iterations {
			break
		}
		for i := range n {
			r[i] = ys[i] - dot(X[i*p:(i+1)*p], coef)
		}
		sigma := 1.4826 * madAbout(r, 0, &m.scratch)
		if sigma <= 0 {
			break
		}
		bisquare := it >= 1
		for i, ri := range r {
			a := math.Abs(ri) / sigma
			switch {
			case bisquare:
				const c = 4.685
				if a >= c {
					w[i] = 0
				} else {
					u := 1 - (a/c)*(a/c)
					w[i] = u * u
				}
			case a <= 1.345:
				w[i] = 1
			default:
				w[i] = 1.345 / a
			}
		}
	}
	m.coef = coef
	return nil
}

// solveWeighted solves (XᵀWX + λ·diag) β = XᵀWy by Cholesky, into coef.
func solveWeighted(X, y, w []float64, n, p int, ridge float64, ata, aty, coef []float64) error {
	clear(ata)
	clear(aty)
	// Rows go in blocks of four, so that each element of the upper
	// triangle is loaded and stored once per four rows.
	var blk [4][]float64
	var bw [4]float64
	nb := 0
	for i := 0; i <= n; i++ {
		if i < n {
			if w[i] == 0 {
				continue
			}
			x := X[i*p : (i+1)*p : (i+1)*p]
			wy := w[i] * y[i]
			for a, xa := range x {
				aty[a] += wy * xa
			}
			blk[nb], bw[nb] = x, w[i]
			nb++
			if nb < 4 {
				continue
			}
		}
		for ; nb < 4; nb++ { // the tail: pad with zero-weight rows
			blk[nb], bw[nb] = X[:p], 0
		}
		x0, x1, x2, x3 := blk[0][:p], blk[1][:p], blk[2][:p], blk[3][:p]
		for a := range p {
			c0, c1, c2, c3 := bw[0]*x0[a], bw[1]*x1[a], bw[2]*x2[a], bw[3]*x3[a]
			row := ata[a*p+a : a*p+p]
			y0, y1, y2, y3 := x0[a:], x1[a:], x2[a:], x3[a:]
			y1, y2, y3 = y1[:len(y0)], y2[:len(y0)], y3[:len(y0)]
			row = row[:len(y0)]
			for b, v := range y0 {
				row[b] += c0*v + c1*y1[b] + c2*y2[b] + c3*y3[b]
			}
		}
		nb = 0
	}
	tr := 0.0
	for a := range p {
		tr += ata[a*p+a]
	}
	lam := ridge * tr / float64(p)
	for a := 1; a < p; a++ {
		ata[a*p+a] += lam
	}
	// Cholesky in place on the upper triangle: ata = RᵀR.
	for j := range p {
		s := ata[j*p+j]
		for k := range j {
			s -= ata[k*p+j] * ata[k*p+j]
		}
		if s <= 0 {
			return errors.New("normal equations not positive definite")
		}
		d := math.Sqrt(s)
		ata[j*p+j] = d
		for i := j + 1; i < p; i++ {
			s := ata[j*p+i]
			for k := range j {
				s -= ata[k*p+j] * ata[k*p+i]
			}
			ata[j*p+i] = s / d
		}
	}
	// Rᵀz = aty, then Rβ = z.
	for i := range p {
		s := aty[i]
		for k := range i {
			s -= ata[k*p+i] * coef[k]
		}
		coef[i] = s / ata[i*p+i]
	}
	for i := p - 1; i >= 0; i-- {
		s := coef[i]
		for k := i + 1; k < p; k++ {
			s -= ata[i*p+k] * coef[k]
		}
		coef[i] = s / ata[i*p+i]
	}
	return nil
}

func dot(a, b []float64) float64 {
	s := 0.0
	for i, x := range a {
		s += x * b[i]
	}
	return s
}

// mean returns the fitted mean log latency at t with load q.
func (m *Model) mean(t time.Time, q float64) float64 {
	if m.Kind == KindTrailing {
		return m.level
	}
	var x [80]float64
	p := m.cols()
	m.row(x[:p], float64(t.UnixNano())/1e9, q)
	return dot(x[:p], m.coef)
}

// scale returns the residual scale (of log latency) at t with load q.
func (m *Model) scale(t time.Time, q float64) float64 {
	switch {
	case m.Kind == KindTrailing:
		return m.tscale
	case m.UsesLoad:
		u := m.load(float64(t.UnixNano())/1e9, q).inv
		return max(m.scaleA+m.scaleB*u, m.minSc)
	}
	return max(m.hourSc[t.UTC().Hour()], m.minSc)
}

// Predict returns the expected log latency and the residual scale at t with
// load q (NaN when unknown).
func (m *Model) Predict(t time.Time, q float64) (mu, scale float64) {
	return m.mean(t, q), m.scale(t, q)
}

// fitScale fits the residual scale of the one-minute points.
func (m *Model) fitScale(pts []Point, logs []float64) {
	res := make([]float64, 0, len(pts))
	us := make([]float64, 0, len(pts))
	var hours []int8
	if !m.UsesLoad {
		hours = make([]int8, 0, len(pts))
	}
	var x [80]float64
	p := m.cols()
	j := 0
	for _, pt := range pts {
		if !usable(pt) {
			continue
		}
		m.row(x[:p], float64(pt.T.UnixNano())/1e9, pt.Q)
		r := logs[j] - dot(x[:p], m.coef)
		j++
		res = append(res, r)
		if m.UsesLoad {
			us = append(us, m.load(float64(pt.T.UnixNano())/1e9, pt.Q).inv)
		} else {
			hours = append(hours, int8(pt.T.UTC().Hour()))
		}
	}
	sigma := 1.4826 * madAbout(res, 0, &m.scratch)
	m.minSc = max(sigma*0.2, 1e-4)
	if m.UsesLoad {
		// E|r| = s·sqrt(2/π) for normal residuals: fit |r| = a' + b'·u by
		// least squares over points within 4σ (σ from the previous pass).
		a, b := sigma, 0.0
		for pass := 0; pass < 2; pass++ {
			var sw, su, suu, sy, suy float64
			for i, r := range res {
				lim := 4 * max(a+b*us[i], m.minSc)
				ar := math.Abs(r)
				if ar > lim {
					continue
				}
				u := us[i]
				sw++
				su += u
				suu += u * u
				sy += ar
				suy += ar * u
			}
			det := sw*suu - su*su
			if sw < 10 || det <= 0 {
				break
			}
			bb := (sw*suy - su*sy) / det
			aa := (sy - bb*su) / sw
			const k = 1.2533 // sqrt(π/2)
			a, b = aa*k, bb*k
		}
		m.scaleA, m.scaleB = a, b
	} else {
		m.fitHourScale(res, hours, sigma)
	}
	// The autocorrelation the detectors see: from the spread of successive
	// differences of the standardised residuals against their own spread,
	// var(Δe) = 2(1−φ)·var(e), both robustly.
	e := make([]float64, len(res))
	for i, r := range res {
		sc := m.minSc
		if m.UsesLoad {
			sc = max(sc, m.scaleA+m.scaleB*us[i])
		} else {
			sc = max(sc, m.hourSc[hours[i]])
		}
		e[i] = r / sc
	}
	de := make([]float64, 0, len(e))
	for i := 1; i < len(e); i++ {
		de = append(de, e[i]-e[i-1])
	}
	se := madAbout(e, 0, &m.scratch)
	sd := madAbout(de, 0, &m.scratch)
	if se > 0 {
		m.Phi = max(0, min(0.95, 1-(sd/se)*(sd/se)/2))
	}
}

// fitHourScale fits the residual scale per UTC hour.
func (m *Model) fitHourScale(res []float64, hours []int8, sigma float64) {
	var byHour [24][]float64
	for i, r := range res {
		byHour[hours[i]] = append(byHour[hours[i]], r)
	}
	for h := range byHour {
		if len(byHour[h]) < 20 {
			m.hourSc[h] = sigma
			continue
		}
		m.hourSc[h] = 1.4826 * madAbout(byHour[h], median(byHour[h]), &m.scratch)
	}
}

// fitTrailing makes a trailing model: median and MAD of the last six hours.
func (m *Model) fitTrailing(pts []Point) {
	m.Kind = KindTrailing
	var ys []float64
	cut := m.To.Add(-6 * time.Hour)
	for _, p := range pts {
		if usable(p) && !p.T.Before(cut) {
			ys = append(ys, math.Log(p.V))
		}
	}
	m.level = median(ys)
	m.tscale = 1.4826 * madAbout(ys, m.level, &m.scratch)
	// Trailing residuals carry the whole daily pattern: floor the scale.
	m.minSc = max(m.tscale, 0.02)
	m.tscale = m.minSc
	m.Phi = 0.5
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	return medianInPlace(s)
}

// medianInPlace returns the median of s, reordering it (quickselect, O(n)).
func medianInPlace(s []float64) float64 {
	k := len(s)
	switch {
	case k == 0:
		return math.NaN()
	case k < 16:
		for i := 1; i < k; i++ { // insertion sort: bins hold a handful
			v := s[i]
			j := i - 1
			for ; j >= 0 && s[j] > v; j-- {
				s[j+1] = s[j]
			}
			s[j+1] = v
		}
		if k%2 == 1 {
			return s[k/2]
		}
		return (s[k/2-1] + s[k/2]) / 2
	}
	hi := nth(s, k/2)
	if k%2 == 1 {
		return hi
	}
	// The lower middle is the largest of the left part.
	lo := s[0]
	for _, v := range s[1 : k/2] {
		lo = max(lo, v)
	}
	return (lo + hi) / 2
}

// nth reorders s so that s[n] is its n-th smallest, everything before it
// no larger and everything after no smaller, and returns s[n].
func nth(s []float64, n int) float64 {
	lo, hi := 0, len(s)-1
	for lo < hi {
		// Median of three as the pivot.
		mid := lo + (hi-lo)/2
		if s[mid] < s[lo] {
			s[mid], s[lo] = s[lo], s[mid]
		}
		if s[hi] < s[lo] {
			s[hi], s[lo] = s[lo], s[hi]
		}
		if s[hi] < s[mid] {
			s[hi], s[mid] = s[mid], s[hi]
		}
		pv := s[mid]
		i, j := lo, hi
		for i <= j {
			for s[i] < pv {
				i++
			}
			for s[j] > pv {
				j--
			}
			if i <= j {
				s[i], s[j] = s[j], s[i]
				i++
				j--
			}
		}
		switch {
		case n <= j:
			hi = j
		case n >= i:
			lo = i
		default:
			return s[n]
		}
	}
	return s[n]
}

// madAbout is the median absolute deviation of v from c.
func madAbout(v []float64, c float64, scratch *[]float64) float64 {
	s := (*scratch)[:0]
	for _, x := range v {
		s = append(s, math.Abs(x-c))
	}
	*scratch = s
	return medianInPlace(s)
}

// quantile is the q-quantile (nearest rank below) of v, by selection.
func quantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	return nth(slices.Clone(v), int(q*float64(len(v)-1)))
}
