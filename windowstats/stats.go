package windowstats

import (
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/inferwatch/inferwatch/metricset"
	"github.com/inferwatch/inferwatch/record"
)

// Options sets the windows and bounds of a Stats. Zero fields take the
// defaults.
type Options struct {
	Window     time.Duration // length of a window; default 10s
	View       time.Duration // the rolled-up view, rounded down to whole windows; default 1m, or one window if longer
	History    int           // closed windows kept and fitted by the regression; default 30
	EMATau     time.Duration // time constant of the EMA; default 1m
	Accuracy   float64       // relative accuracy α of the quantiles; default 0.01
	MaxBuckets int           // buckets per sketch before the lowest collapse; default 2048
	MaxModels  int           // distinct (model, version) kept; beyond, model="other"; default 100
	MaxStages  int           // distinct server-stage names per model; beyond, "other"; default 16
	SlowCalls  int           // slowest calls kept per window; default 5
}

func (o Options) withDefaults() (Options, error) {
	if o.Window <= 0 {
		o.Window = 10 * time.Second
	}
	if o.View <= 0 {
		// A window longer than a minute (a slow model's) is a valid choice;
		// the view nobody set then covers that one window.
		o.View = max(time.Minute, o.Window)
	}
	if o.View < o.Window {
		return o, fmt.Errorf("windowstats: view %v is shorter than the window %v", o.View, o.Window)
	}
	o.View = o.View / o.Window * o.Window
	if o.History <= 0 {
		o.History = 30
	}
	if o.EMATau <= 0 {
		o.EMATau = time.Minute
	}
	if o.Accuracy == 0 {
		o.Accuracy = 0.01
	}
	if o.MaxBuckets == 0 {
		o.MaxBuckets = 2048
	}
	if _, err := NewSketch(o.Accuracy, o.MaxBuckets); err != nil {
		return o, err
	}
	if o.MaxModels <= 0 {
		o.MaxModels = 100
	}
	if o.MaxStages <= 0 {
		o.MaxStages = 16
	}
	if o.SlowCalls <= 0 {
		o.SlowCalls = 5
	}
	return o, nil
}

// Quantiles are the quantiles every view reports, as P50, P90, P99, P999.
var Quantiles = [4]float64{0.5, 0.9, 0.99, 0.999}

// WindowView is one window (or the rolled-up view) as numbers: durations in
// seconds, rates per second.
type WindowView struct {
	Start   time.Time `json:"start"`
	Seconds float64   `json:"seconds"`           // the span the view covers
	Partial bool      `json:"partial,omitempty"` // the series began inside it: its QPS is low and it is left out of the fit
	Count   int64     `json:"count"`
	QPS     float64   `json:"qps"`
	Mean    float64   `json:"mean"`
	StdDev  float64   `json:"stddev"`
	EMA     float64   `json:"ema"` // the EMA of the mean latency as of the view's end
	Min     float64   `json:"min"`
	Max     float64   `json:"max"`
	P50     float64   `json:"p50"`
	P90     float64   `json:"p90"`
	P99     float64   `json:"p99"`
	P999    float64   `json:"p999"`
	Fit     Fit       `json:"fit"` // latency against throughput over the closed windows up to this one
	// Phases holds the measured record phases in record.Phases order, Stages
	// the server-reported stages in order of first sight.
	Phases  []PartView `json:"phases"`
	Stages  []PartView `json:"stages"`
	Slowest []SlowCall `json:"slowest"` // slowest first
	// Welford is the exact running moments behind Mean and StdDev, for
	// merging views outside this package.
	Welford Welford `json:"-"`
}

// End returns when the view's span ends.
func (v WindowView) End() time.Time {
	return v.Start.Add(time.Duration(v.Seconds * float64(time.Second)))
}

// PartView is one phase or server stage of a window.
type PartView struct {
	Name  string  `json:"name"`
	Count int64   `json:"count"`
	Mean  float64 `json:"mean"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	P999  float64 `json:"p999"`
}

// SlowCall is one of a window's slowest calls.
type SlowCall struct {
	At      time.Time `json:"at"` // the call's start
	Seconds float64   `json:"seconds"`
	Code    string    `json:"code"`
	// TraceID is set when the tracer kept the call's trace (head-sampled
	// or kept by a tail rule: record.Call.TraceKept), so it links to a
	// trace that was exported.
	TraceID TraceID `json:"traceId,omitzero"`
}

// TraceID is a W3C trace id; its JSON is the 32 hex digits. Held as bytes so
// that keeping a slow call costs no allocation.
type TraceID [16]byte

// IsZero reports whether the id is absent.
func (t TraceID) IsZero() bool { return t == TraceID{} }

// String returns the id in lower-case hex.
func (t TraceID) String() string { return hex.EncodeToString(t[:]) }

// MarshalText returns the id in lower-case hex.
func (t TraceID) MarshalText() ([]byte, error) {
	b := make([]byte, hex.EncodedLen(len(t)))
	hex.Encode(b, t[:])
	return b, nil
}

// UnmarshalText reads 32 hex digits.
func (t *TraceID) UnmarshalText(b []byte) error {
	if hex.DecodedLen(len(b)) != len(t) {
		return fmt.Errorf("windowstats: trace id %q is not 32 hex digits", b)
	}
	if _, err := hex.Decode(t[:], b); err != nil {
		return fmt.Errorf("windowstats: trace id %q: %w", b, err)
	}
	return nil
}

// ModelView is one (model, version): its open window so far, the last closed
// one, the closed ones kept (oldest first, Previous last) and the rolled-up
// view over the last View of closed windows.
type ModelView struct {
	Model    string       `json:"model"`
	Version  string       `json:"version"`
	Current  WindowView   `json:"current"`
	Previous WindowView   `json:"previous,omitzero"`
	Minute   WindowView   `json:"minute,omitzero"`
	Closed   []WindowView `json:"closed"`
}

// part is one phase or stage of a window: count, sum and sketch. The
// phases need only a mean, so they skip Welford's division.
type part struct {
	n   int64
	sum float64
	sk  *Sketch
}

func (p *part) add(x float64) {
	p.n++
	p.sum += x
	p.sk.Add(x)
}

func (p *part) view(name string) PartView {
	v := PartView{Name: name, Count: p.n, Mean: p.sum / float64(p.n)}
	var q [len(Quantiles)]float64
	p.sk.Quantiles(Quantiles[:], q[:])
	v.P50, v.P90, v.P99, v.P999 = q[0], q[1], q[2], q[3]
	return v
}

// window accumulates one window of one series.
type window struct {
	start, end time.Time
	last       time.Time // latest observation
	partial    bool
	total      Welford
	sk         *Sketch
	phases     [len(record.Phases)]part
	stages     []part // by the series' stage index, grown on first sight
	slow       []SlowCall
}

func (s *Stats) newWindow() *window {
	w := &window{sk: mustSketch(s.o.Accuracy, s.o.MaxBuckets), slow: make([]SlowCall, 0, s.o.SlowCalls)}
	for i := range w.phases {
		w.phases[i].sk = mustSketch(s.o.Accuracy, s.o.MaxBuckets)
	}
	return w
}

func (w *window) reset(start, end time.Time) {
	w.start, w.end, w.last, w.partial = start, end, time.Time{}, false
	w.total = Welford{}
	w.sk.Reset()
	for i := range w.phases {
		w.phases[i].n, w.phases[i].sum = 0, 0
		w.phases[i].sk.Reset()
	}
	for i := range w.stages {
		w.stages[i].n, w.stages[i].sum = 0, 0
		w.stages[i].sk.Reset()
	}
	w.slow = w.slow[:0]
}

func (s *Stats) stage(w *window, i int) *part {
	for len(w.stages) <= i {
		w.stages = append(w.stages, part{sk: mustSketch(s.o.Accuracy, s.o.MaxBuckets)})
	}
	return &w.stages[i]
}

// addSlow keeps the window's slowest calls, ascending, in place.
func (w *window) addSlow(c SlowCall) {
	n := len(w.slow)
	if n == cap(w.slow) {
		if c.Seconds <= w.slow[0].Seconds {
			return
		}
		// Drop the fastest and slide c into place.
		i := 0
		for ; i+1 < n && w.slow[i+1].Seconds < c.Seconds; i++ {
			w.slow[i] = w.slow[i+1]
		}
		w.slow[i] = c
		return
	}
	w.slow = append(w.slow, c)
	i := n
	for ; i > 0 && w.slow[i-1].Seconds > c.Seconds; i-- {
		w.slow[i] = w.slow[i-1]
	}
	w.slow[i] = c
}

func (s *Stats) merge(dst, src *window) {
	dst.total.Merge(src.total)
	mustMerge(dst.sk, src.sk)
	for i := range dst.phases {
		dst.phases[i].n += src.phases[i].n
		dst.phases[i].sum += src.phases[i].sum
		mustMerge(dst.phases[i].sk, src.phases[i].sk)
	}
	for i := range src.stages {
		p := s.stage(dst, i)
		p.n += src.stages[i].n
		p.sum += src.stages[i].sum
		mustMerge(p.sk, src.stages[i].sk)
	}
	for _, c := range src.slow {
		dst.addSlow(c)
	}
}

func mustMerge(dst, src *Sketch) {
	if err := dst.Merge(src); err != nil {
		panic(err) // every sketch of a Stats has the same accuracy
	}
}

// series is one (model, version).
type series struct {
	model, version string
	stageNames     []string
	stageAlias     []stageAlias
	parts          int // of stageNames, the sidecar's own (partIndex)

	cur    *window
	recent []*window // the last closed windows, at most View/Window, oldest first
	scrap  *window   // scratch for the rolled-up view
	hist   []WindowView
	hpos   int // next slot of hist once it is full
	minute WindowView

	// EMA state: decayed call-weighted sums, see the package doc.
	emaS, emaW float64
	emaAt      time.Time
	ema        float64
}

type stageAlias struct {
	raw string
	idx int
}

type mvKey struct{ model, version string }

// aliasFactor bounds the raw-name caches relative to their caps: several raw
// names may sanitise to one, but an endless stream of new names must not grow
// memory.
const aliasFactor = 4

// Stats keeps window statistics per (model, version). It is a record.Sink and
// is safe for concurrent use; Observe does not allocate once a model's
// windows have warmed up.
type Stats struct {
	o Options
	k int // windows in the rolled-up view

	mu      sync.Mutex
	byRaw   map[mvKey]*series
	byLabel map[mvKey]*series
	order   []*series
	last    *series
	lastKey mvKey
	xs, ys  []float64 // scratch for the fit
}

// New returns an empty Stats.
func New(o Options) (*Stats, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Stats{
		o:       o,
		k:       int(o.View / o.Window),
		byRaw:   make(map[mvKey]*series),
		byLabel: make(map[mvKey]*series),
	}, nil
}

// Window returns the window length.
func (s *Stats) Window() time.Duration { return s.o.Window }

// History returns how many closed windows are kept and fitted.
func (s *Stats) History() int { return s.o.History }

// Observe adds a finished call to its model's open window. The call's end
// (Start+End) is its time: when it is past the open window's end, the window
// closes first (a record that arrives late lands in the open window). Calls
// that never completed (End == 0) are not latencies and are skipped, and so
// are control calls (record.Call.Control: a model load is not a latency).
func (s *Stats) Observe(c *record.Call) {
	if c.End <= 0 || c.Control() {
		return
	}
	t := c.Start.Add(c.End)
	total := c.End.Seconds()
	s.mu.Lock()
	defer s.mu.Unlock()
	x := s.last
	if x == nil || c.Model != s.lastKey.model || c.Version != s.lastKey.version {
		x = s.lookup(c.Model, c.Version, t)
		s.last, s.lastKey = x, mvKey{c.Model, c.Version}
	}
	if !t.Before(x.cur.end) {
		s.advance(x, t)
	}
	w := x.cur
	if t.After(w.last) {
		w.last = t
	}
	w.total.Add(total)
	w.sk.Add(total)
	for i, name := range record.Phases {
		if d, ok := c.Phase(name); ok {
			w.phases[i].add(d.Seconds())
		}
	}
	for i := range c.Stages {
		st := &c.Stages[i]
		s.stage(w, s.stageIndex(x, st.Name)).add(st.Duration.Seconds())
	}
	s.observeLLM(x, w, c)
	if len(w.slow) < cap(w.slow) || total > w.slow[0].Seconds {
		sc := SlowCall{At: c.Start, Seconds: total, Code: c.Code}
		if c.TraceKept {
			sc.TraceID = c.TraceID
		}
		w.addSlow(sc)
	}
}

// lookup finds or makes the series of a raw (model, version), capping the
// number of series. Held: s.mu.
func (s *Stats) lookup(model, version string, t time.Time) *series {
	if x := s.byRaw[mvKey{model, version}]; x != nil {
		return x
	}
	label := mvKey{metricset.SanitizeLabelValue(model), metricset.SanitizeLabelValue(version)}
	x := s.byLabel[label]
	if x == nil && len(s.byLabel) >= s.o.MaxModels {
		label = mvKey{metricset.Other, metricset.Other}
		x = s.byLabel[label]
	}
	if x == nil {
		x = s.newSeries(label, t)
		s.byLabel[label] = x
		s.order = append(s.order, x)
	}
	// Past the alias bound a raw name is looked up the slow way every time.
	if len(s.byRaw) < aliasFactor*s.o.MaxModels {
		s.byRaw[mvKey{strings.Clone(model), strings.Clone(version)}] = x
	}
	return x
}

func (s *Stats) newSeries(label mvKey, t time.Time) *series {
	x := &series{model: label.model, version: label.version, scrap: s.newWindow()}
	x.cur = s.newWindow()
	start := t.Truncate(s.o.Window)
	x.cur.reset(start, start.Add(s.o.Window))
	x.cur.partial = true
	return x
}

// stageIndex returns the series' index of a raw stage name. Held: s.mu.
func (s *Stats) stageIndex(x *series, raw string) int {
	for _, a := range x.stageAlias {
		if a.raw == raw {
			return a.idx
		}
	}
	name := metricset.SanitizeLabelValue(raw)
	if isPart(name) { // the sidecar's own parts are not the server's to fill
		name = metricset.Other
	}
	idx := slices.Index(x.stageNames, name)
	if idx < 0 && len(x.stageNames)-x.parts >= s.o.MaxStages {
		name = metricset.Other
		idx = slices.Index(x.stageNames, name)
	}
	if idx < 0 {
		idx = len(x.stageNames)
		x.stageNames = append(x.stageNames, name)
	}
	if len(x.stageAlias) < aliasFactor*s.o.MaxStages {
		x.stageAlias = append(x.stageAlias, stageAlias{strings.Clone(raw), idx})
	}
	return idx
}

// partIndex returns the series' index of one of the sidecar's own parts
// (PartTTFT, PartITL). They take slots beside the MaxStages server stages:
// folded into "other" by a server's many stage names, the TTFT SLO rule
// would go silent. Held: s.mu.
func (s *Stats) partIndex(x *series, name string) int {
	if idx := slices.Index(x.stageNames, name); idx >= 0 {
		return idx
	}
	x.stageNames = append(x.stageNames, name)
	x.parts++
	return len(x.stageNames) - 1
}

func isPart(name string) bool { return name == PartTTFT || name == PartITL }

// Roll closes every window whose end is not after now. It is idempotent and
// meant to be called by the owner's ticker just after each window's end (and
// again any time: a window closes once).
func (s *Stats) Roll(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, x := range s.order {
		if !now.Before(x.cur.end) {
			s.advance(x, now)
		}
	}
}

// advance closes windows of x until the open one holds now. Held: s.mu.
func (s *Stats) advance(x *series, now time.Time) {
	// Past this many empty windows nothing older survives in either ring.
	limit := time.Duration(s.o.History+s.k+1) * s.o.Window
	for !now.Before(x.cur.end) {
		s.close(x)
		if now.Sub(x.cur.start) > limit {
			start := now.Truncate(s.o.Window).Add(-limit)
			x.cur.reset(start, start.Add(s.o.Window))
		}
	}
}

// close ends x's open window and opens the next one. Held: s.mu.
func (s *Stats) close(x *series) {
	w := x.cur
	s.updateEMA(x, w)
	v := s.view(x, w, s.o.Window, x.ema)
	v.Fit = s.fit(x, v)
	if len(x.hist) < s.o.History {
		x.hist = append(x.hist, v)
	} else {
		x.hist[x.hpos] = v
		x.hpos = (x.hpos + 1) % s.o.History
	}

	// The closed window joins the recent ring; the oldest one's storage
	// becomes the new open window.
	var next *window
	if len(x.recent) < s.k {
		x.recent = append(x.recent, w)
		next = s.newWindow()
	} else {
		next = x.recent[0]
		copy(x.recent, x.recent[1:])
		x.recent[len(x.recent)-1] = w
	}
	next.reset(w.end, w.end.Add(s.o.Window))
	x.cur = next

	m := x.scrap
	m.reset(x.recent[0].start, w.end)
	m.partial = len(x.recent) < s.k || x.recent[0].partial
	for _, r := range x.recent {
		s.merge(m, r)
	}
	x.minute = s.view(x, m, time.Duration(len(x.recent))*s.o.Window, x.ema)
	x.minute.Fit = v.Fit
}

// updateEMA folds the closing window into the EMA (see the package doc).
func (s *Stats) updateEMA(x *series, w *window) {
	d := 0.0
	if !x.emaAt.IsZero() {
		d = math.Exp(-float64(w.end.Sub(x.emaAt)) / float64(s.o.EMATau))
	}
	x.emaS = d*x.emaS + float64(w.total.N)*w.total.Mean
	x.emaW = d*x.emaW + float64(w.total.N)
	x.emaAt = w.end
	// An empty window decays S and W alike and leaves their ratio where it
	// was; recomputing it would read the ratio of two sums that a long idle
	// (about 12 hours of windows at τ = 1 minute) has decayed into
	// subnormals, where it is rounding noise.
	if w.total.N > 0 {
		x.ema = x.emaS / x.emaW
	}
}

// provisionalEMA is the EMA as if the open window closed at its latest call.
func (s *Stats) provisionalEMA(x *series) float64 {
	w := x.cur
	if w.total.N == 0 {
		return x.ema
	}
	d := 0.0
	if !x.emaAt.IsZero() {
		d = math.Exp(-float64(w.last.Sub(x.emaAt)) / float64(s.o.EMATau))
	}
	return (d*x.emaS + float64(w.total.N)*w.total.Mean) / (d*x.emaW + float64(w.total.N))
}

// fit regresses mean latency on throughput over the kept closed windows and
// v, the one closing. Held: s.mu.
func (s *Stats) fit(x *series, v WindowView) Fit {
	s.xs, s.ys = s.xs[:0], s.ys[:0]
	add := func(h *WindowView) {
		if h.Count > 0 && !h.Partial {
			s.xs = append(s.xs, h.QPS)
			s.ys = append(s.ys, h.Mean)
		}
	}
	// The oldest kept window falls out as v comes in.
	n := len(x.hist)
	skip := 0
	if n == s.o.History {
		skip = 1
	}
	for i := skip; i < n; i++ {
		add(&x.hist[(x.hpos+i)%n])
	}
	add(&v)
	return FitLine(s.xs, s.ys)
}

// view turns a window into numbers. Held: s.mu.
func (s *Stats) view(x *series, w *window, span time.Duration, ema float64) WindowView {
	v := WindowView{
		Start:   w.start,
		Seconds: span.Seconds(),
		Partial: w.partial,
		Count:   w.total.N,
		Mean:    w.total.Mean,
		StdDev:  w.total.StdDev(),
		EMA:     ema,
		Welford: w.total,
	}
	if v.Count > 0 {
		v.QPS = float64(v.Count) / v.Seconds
		v.Min, v.Max = w.sk.min, w.sk.max
		var q [len(Quantiles)]float64
		w.sk.Quantiles(Quantiles[:], q[:])
		v.P50, v.P90, v.P99, v.P999 = q[0], q[1], q[2], q[3]
	}
	// Empty lists rather than null, for the JSON API.
	v.Phases = make([]PartView, 0, len(w.phases))
	v.Stages = make([]PartView, 0, len(w.stages))
	v.Slowest = make([]SlowCall, 0, len(w.slow))
	for i := range w.phases {
		if p := &w.phases[i]; p.n > 0 {
			v.Phases = append(v.Phases, p.view(record.Phases[i]))
		}
	}
	for i := range w.stages {
		if p := &w.stages[i]; p.n > 0 {
			v.Stages = append(v.Stages, p.view(x.stageNames[i]))
		}
	}
	for i := len(w.slow) - 1; i >= 0; i-- {
		v.Slowest = append(v.Slowest, w.slow[i])
	}
	return v
}

// Snapshot returns every (model, version) in order of first sight.
func (s *Stats) Snapshot() []ModelView {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]ModelView, 0, len(s.order))
	for _, x := range s.order {
		mv := ModelView{Model: x.model, Version: x.version, Minute: x.minute}
		var fit Fit
		mv.Closed = make([]WindowView, 0, len(x.hist))
		if n := len(x.hist); n > 0 {
			mv.Closed = append(mv.Closed, x.hist[x.hpos:]...)
			mv.Closed = append(mv.Closed, x.hist[:x.hpos]...)
			mv.Previous = mv.Closed[n-1]
			fit = mv.Previous.Fit
		}
		mv.Current = s.view(x, x.cur, s.o.Window, s.provisionalEMA(x))
		mv.Current.Fit = fit
		out = append(out, mv)
	}
	return out
}

// Parts of a window for generative calls, beside the server's stages: the
// time to first token of each generation and each inter-token gap, so that
// window statistics and rules (an SLO on TTFT P99) apply to them as to
// latency.
const (
	PartTTFT = "llm_ttft"
	PartITL  = "llm_itl"
)

// observeLLM adds c's generations to w: a streamed answer's TTFT and gaps,
// or each ModelStreamInfer request's first response and gaps. Held: s.mu.
func (s *Stats) observeLLM(x *series, w *window, c *record.Call) {
	add := func(ttft time.Duration, gaps *record.Gaps) {
		s.stage(w, s.partIndex(x, PartTTFT)).add(ttft.Seconds())
		if len(gaps.Kept) > 0 {
			itl := s.stage(w, s.partIndex(x, PartITL))
			for _, g := range gaps.Kept {
				itl.add(g.Seconds())
			}
		}
	}
	if l := c.LLM; l != nil {
		if d, ok := l.TTFT(); ok {
			add(d, &l.Gaps)
		}
	}
	for i := range c.StreamRequests {
		if r := &c.StreamRequests[i]; r.Responses > 0 {
			add(r.FirstResponse-r.Arrived, &r.Gaps)
		}
	}
}
