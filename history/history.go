// Package history keeps each model's latency history on the sidecar —
// one point per Resolution (the windows' P99 and QPS), bounded in span and
// in models, saved to a file so it survives a restart — and fits a
// baseline.Model from it on a schedule. Seasonal is the alerting engine's
// Options.Baseline: it records every closed window and answers with the
// seasonal P99 band once the model has two daily cycles of history.
//
// Speedup compresses time for demos and tests: with Speedup S, each real
// second of windows is S seconds of history, so two days pass in 48h/S.
package history

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/inferwatch/inferwatch/baseline"
	"github.com/inferwatch/inferwatch/internal/statefile"
	"github.com/inferwatch/inferwatch/windowstats"
)

// Options configure a Seasonal. Zero fields take the defaults shown.
type Options struct {
	Path       string        // file the history is saved to and loaded from; "": memory only
	Span       time.Duration // history kept per model: 14 days
	Resolution time.Duration // one point per this much history: 1m
	MaxModels  int           // models kept: 64 (the least recently seen is dropped)
	RefitEvery time.Duration // refit once seasonal: 7 days (history time); daily before
	Band       float64       // half-width in residual scales: 3
	Speedup    float64       // history seconds per real second: 1
	Fit        baseline.FitOptions
	// Logger gets the warning when a damaged history file is set aside;
	// nil: slog.Default().
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.Span == 0 {
		o.Span = 14 * 24 * time.Hour
	}
	if o.Resolution == 0 {
		o.Resolution = time.Minute
	}
	if o.MaxModels == 0 {
		o.MaxModels = 64
	}
	if o.RefitEvery == 0 {
		o.RefitEvery = 7 * 24 * time.Hour
	}
	if o.Band == 0 {
		o.Band = 3
	}
	if o.Speedup == 0 {
		o.Speedup = 1
	}
	return o
}

// Validate names the first wrong field.
func (o Options) Validate() error {
	o = o.withDefaults()
	var errs []error
	if o.Span < 2*24*time.Hour {
		errs = append(errs, fmt.Errorf("history %v: must be at least 48h (two daily cycles)", o.Span))
	}
	if o.Resolution < time.Second || o.Resolution > time.Hour {
		errs = append(errs, fmt.Errorf("resolution %v: must be 1s..1h", o.Resolution))
	}
	if o.MaxModels < 1 {
		errs = append(errs, fmt.Errorf("max_models %d: must be at least 1", o.MaxModels))
	}
	if o.RefitEvery < time.Hour {
		errs = append(errs, fmt.Errorf("refit_every %v: must be at least 1h", o.RefitEvery))
	}
	if !(o.Band > 0) { // NaN too
		errs = append(errs, fmt.Errorf("band %g: must be positive", o.Band))
	}
	if !(o.Speedup >= 1 && o.Speedup <= 1e6) {
		errs = append(errs, fmt.Errorf("speedup %g: must be 1..1e6", o.Speedup))
	}
	return errors.Join(errs...)
}

// Point is one stored point: history time (Unix seconds), P99 (seconds),
// QPS (0 when unknown, as the fit reads it).
type Point struct {
	T   int64   `json:"t"`
	P99 float64 `json:"p"`
	QPS float64 `json:"q"`
}

type series struct {
	Points []Point `json:"points"`
	// the point being filled: windows of one Resolution step
	acc     Point
	accN    int
	accQN   int       // of them with a known load
	seen    time.Time // real time last seen, for eviction
	model   *baseline.Model
	nextFit int64
}

// Band is the last band given for a model, for the gauges.
type Band struct{ Expected, Lower, Upper float64 }

// Seasonal keeps the history of every model and fits their baselines.
type Seasonal struct {
	o     Options
	mu    sync.Mutex
	s     map[string]*series
	epoch time.Time // real time the compression starts from
	bands map[string]Band
}

// New returns a Seasonal, loading Options.Path when it exists.
func New(o Options) (*Seasonal, error) {
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	o = o.withDefaults()
	h := &Seasonal{o: o, s: map[string]*series{}, bands: map[string]Band{}}
	if o.Path != "" {
		if err := h.load(); err != nil {
			return nil, err
		}
		// A folder that is missing or read-only is a config mistake to name
		// now, not a warning every five minutes and a history lost at each
		// restart.
		if err := statefile.Writable(o.Path); err != nil {
			return nil, fmt.Errorf("history: history_path %s: %w", o.Path, err)
		}
	}
	return h, nil
}

func key(model, version string) string { return model + "\x00" + version }

// historyTime maps a real time to history time under Speedup.
func (h *Seasonal) historyTime(t time.Time) time.Time {
	if h.o.Speedup == 1 {
		return t
	}
	if h.epoch.IsZero() {
		h.epoch = t
	}
	return h.epoch.Add(time.Duration(float64(t.Sub(h.epoch)) * h.o.Speedup))
}

// Baseline records w and returns the model's band for it: the signature of
// alerting.Options.Baseline.
func (h *Seasonal) Baseline(model, version string, w *windowstats.WindowView) (expected, upper float64, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := key(model, version)
	s := h.s[k]
	if s == nil {
		h.evict()
		s = &series{}
		h.s[k] = s
	}
	now := w.End()
	s.seen = now
	at := h.historyTime(now)
	// A view that began before its series (the model's first calls, a
	// restart) counts calls over less time than it spans: its QPS is low.
	// Its load is unknown rather than that: predicted at a fraction of the
	// traffic, the band of a model whose latency rises with load would sit
	// under a normal P99.
	qps := w.QPS
	if w.Partial {
		qps = math.NaN()
	}
	if w.Count > 0 && w.P99 > 0 {
		h.add(s, at, w.P99, qps)
	}
	h.maybeFit(s, at.Unix())
	if s.model == nil || s.model.Kind == baseline.KindTrailing {
		delete(h.bands, k)
		return 0, 0, false
	}
	mu, sc := s.model.Predict(at, qps)
	b := Band{Expected: math.Exp(mu), Lower: math.Exp(mu - h.o.Band*sc), Upper: math.Exp(mu + h.o.Band*sc)}
	h.bands[k] = b
	return b.Expected, b.Upper, true
}

// add folds a window into the current point; a new step starts a new one.
// qps is NaN when unknown.
func (h *Seasonal) add(s *series, at time.Time, p99, qps float64) {
	step := at.Truncate(h.o.Resolution).Unix()
	if s.accN > 0 && s.acc.T != step {
		h.flush(s)
	}
	if s.accN == 0 {
		s.acc = Point{T: step}
	}
	// The point's P99 is the largest window P99 of its step (a P99 of the
	// step's calls is at least that of its busiest window, roughly); QPS the mean.
	s.acc.P99 = max(s.acc.P99, p99)
	if !math.IsNaN(qps) {
		s.acc.QPS += qps
		s.accQN++
	}
	s.accN++
}

func (h *Seasonal) flush(s *series) {
	p := s.acc
	if s.accQN > 0 {
		p.QPS /= float64(s.accQN)
	} // else 0: the fit's unknown load
	s.accN, s.accQN = 0, 0
	if n := len(s.Points); n > 0 && p.T <= s.Points[n-1].T {
		// The wall clock went back (an NTP step after a jump forward). The
		// points after p were timed by the clock that ran ahead: drop them,
		// as load does points from the future, rather than every live
		// point until the clock caught up; and refit without them.
		if keep := since(s.Points, p.T); keep < n {
			s.Points = s.Points[:keep]
			s.nextFit = 0
		}
		if m := len(s.Points); m > 0 && s.Points[m-1].T == p.T {
			return // p's step is stored already
		}
	}
	s.Points = append(s.Points, p)
	// Span bounds time as well as points: a model called now and then
	// fills its budget of points slowly and must not be fitted on older
	// latency than the span (load keeps the same, see usable).
	n, limit := len(s.Points), int(h.o.Span/h.o.Resolution)
	dead := max(n-limit, since(s.Points, p.T-int64(h.o.Span/time.Second)))
	if n > limit+limit/8 || dead > n/8 { // trim in batches: appends stay amortised O(1)
		s.Points = append(s.Points[:0], s.Points[dead:]...)
	}
}

// since is the index of the first point after t (Unix seconds).
func since(pts []Point, t int64) int {
	i, _ := slices.BinarySearchFunc(pts, t+1, func(p Point, t int64) int { return cmp.Compare(p.T, t) })
	return i
}

// maybeFit refits on schedule: daily while under two weeks, then RefitEvery.
func (h *Seasonal) maybeFit(s *series, now int64) {
	if now < s.nextFit || len(s.Points) < 30 {
		return
	}
	// Only the span: flush leaves up to an eighth of older points.
	kept := s.Points[since(s.Points, now-int64(h.o.Span/time.Second)):]
	pts := make([]baseline.Point, len(kept))
	for i, p := range kept {
		pts[i] = baseline.Point{T: time.Unix(p.T, 0).UTC(), V: p.P99, Q: p.QPS}
	}
	m, err := baseline.Fit(pts, h.o.Fit)
	if err != nil {
		s.nextFit = now + 3600
		return
	}
	s.model = m
	switch m.Kind {
	case baseline.KindTrailing:
		s.nextFit = now + 3600
	case baseline.KindDaily:
		s.nextFit = now + 86400
	default:
		s.nextFit = now + int64(h.o.RefitEvery/time.Second)
	}
}

// evict drops the least recently seen model when full. Held: h.mu.
func (h *Seasonal) evict() {
	if len(h.s) < h.o.MaxModels {
		return
	}
	var oldest string
	var t time.Time
	for k, s := range h.s {
		if oldest == "" || s.seen.Before(t) {
			oldest, t = k, s.seen
		}
	}
	delete(h.s, oldest)
	delete(h.bands, oldest)
}

// Bands returns the last band per (model, version).
func (h *Seasonal) Bands() map[[2]string]Band {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[[2]string]Band, len(h.bands))
	for k, b := range h.bands {
		var mv [2]string
		for i := range len(k) {
			if k[i] == 0 {
				mv = [2]string{k[:i], k[i+1:]}
				break
			}
		}
		out[mv] = b
	}
	return out
}

// Band returns the last band given for a model.
func (h *Seasonal) Band(model, version string) (Band, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	b, ok := h.bands[key(model, version)]
	return b, ok
}

// Len returns the points kept for a model.
func (h *Seasonal) Len(model, version string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s := h.s[key(model, version)]; s != nil {
		return len(s.Points)
	}
	return 0
}

// ModelKind returns the kind of the model's fitted baseline, "" if none.
func (h *Seasonal) ModelKind(model, version string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s := h.s[key(model, version)]; s != nil && s.model != nil {
		return s.model.Kind
	}
	return ""
}

type file struct {
	Version int                `json:"version"`
	Series  map[string]*series `json:"series"`
	Epoch   time.Time          `json:"epoch"`
}

// Save writes the history to Options.Path (atomically: a temporary file
// renamed over it). Without a path it does nothing.
func (h *Seasonal) Save() error {
	if h.o.Path == "" {
		return nil
	}
	h.mu.Lock()
	b, err := json.Marshal(file{Version: 1, Series: h.s, Epoch: h.epoch})
	h.mu.Unlock()
	if err != nil {
		return fmt.Errorf("history: save: %w", err)
	}
	if err := statefile.Write(h.o.Path, b); err != nil {
		return fmt.Errorf("history: save %s: %w", h.o.Path, err)
	}
	return nil
}

func (h *Seasonal) logger() *slog.Logger {
	if h.o.Logger != nil {
		return h.o.Logger
	}
	return slog.Default()
}

func (h *Seasonal) load() error {
	b, err := os.ReadFile(h.o.Path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("history: load: %w", err)
	}
	var f file
	err = json.Unmarshal(b, &f)
	if err == nil && f.Version != 1 {
		err = fmt.Errorf("version %d, want 1", f.Version)
	}
	if err != nil {
		// The history is a cache of what the windows taught: a file that
		// cannot be read (cut short by a crash, edited, another version)
		// must not keep the sidecar in front of the model from starting.
		// It is kept beside the path for a look, and the history starts
		// empty; one name, so that repeated crashes do not pile files up.
		aside, rerr := statefile.SetAside(h.o.Path)
		if rerr != nil {
			return fmt.Errorf("history: load %s: %w; setting it aside: %w", h.o.Path, err, rerr)
		}
		h.logger().Warn("baseline history unreadable: set aside, starting empty", "path", h.o.Path, "moved_to", aside, "err", err)
		return nil
	}
	h.epoch = f.Epoch
	now := int64(math.MaxInt64) // no epoch under a speedup: history time starts with the first window
	if h.o.Speedup == 1 || !h.epoch.IsZero() {
		now = h.historyTime(time.Now()).Unix()
	}
	for k, s := range f.Series {
		if s == nil || len(h.s) >= h.o.MaxModels {
			continue
		}
		h.s[k] = &series{Points: h.usable(s.Points, now)}
	}
	return nil
}

// usable is what a loaded series may keep: points with a positive P99 and
// a QPS that is not negative, in time order, one per time, none after now
// (history time) and none more than Span before the last. A file cut short,
// edited by hand or written across a clock jump loses those points, not the
// rest; a point from the future would otherwise hold back every new one
// (flush keeps time order) until the clock caught up.
func (h *Seasonal) usable(pts []Point, now int64) []Point {
	out := pts[:0]
	for _, p := range pts {
		if p.P99 > 0 && !math.IsInf(p.P99, 0) && p.QPS >= 0 && !math.IsInf(p.QPS, 0) && p.T <= now {
			out = append(out, p)
		}
	}
	slices.SortStableFunc(out, func(a, b Point) int { return cmp.Compare(a.T, b.T) })
	out = slices.CompactFunc(out, func(a, b Point) bool { return a.T == b.T })
	if n := len(out); n > 0 {
		out = out[since(out, out[n-1].T-int64(h.o.Span/time.Second)):]
	}
	if max := int(h.o.Span / h.o.Resolution); len(out) > max {
		out = out[len(out)-max:]
	}
	return out
}
