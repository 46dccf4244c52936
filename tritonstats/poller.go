package tritonstats

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// Options configures a Poller. Exactly one of HTTPBase and GRPCAddr is set.
type Options struct {
	HTTPBase  string        // e.g. "http://127.0.0.1:8000" → GET {base}/v2/models/stats
	GRPCAddr  string        // or a gRPC upstream "127.0.0.1:8001" → ModelStatistics
	TLS       *tls.Config   // for an https HTTPBase or a TLS gRPC upstream; nil means plaintext gRPC
	Interval  time.Duration // between polls; default 5s
	Set       *metrics.Set  // where the counters are registered; required
	MaxModels int           // distinct (model, version) label pairs; beyond it "other". Default 100.
	Logger    *slog.Logger  // default slog.Default()
}

// maxTracked bounds the cumulative values kept for models that vanished from
// the upstream's report, so that model churn cannot grow memory forever.
const maxTracked = 10000

// fetcher reads the upstream's cumulative statistics.
type fetcher interface {
	fetch(ctx context.Context) (map[modelKey]counters, error)
	target() string
	close() error
}

// Poller polls one upstream's statistics and exports the deltas.
type Poller struct {
	f        fetcher
	interval time.Duration
	log      *slog.Logger
	errs     *metrics.Counter

	// pollMu serialises polls: deltas need one previous state at a time.
	pollMu   sync.Mutex
	exp      *exporter
	prev     map[modelKey]counters // nil until the baseline poll
	prevTime time.Time

	snapMu sync.RWMutex
	snap   []ModelStats
}

// New validates o and returns a Poller; nothing is contacted until a poll.
func New(o Options) (*Poller, error) {
	if (o.HTTPBase == "") == (o.GRPCAddr == "") {
		return nil, errors.New("tritonstats: set exactly one of HTTPBase and GRPCAddr")
	}
	if o.Set == nil {
		return nil, errors.New("tritonstats: Options.Set is required")
	}
	if o.Interval < 0 {
		return nil, fmt.Errorf("tritonstats: negative interval %v", o.Interval)
	}
	if o.Interval == 0 {
		o.Interval = 5 * time.Second
	}
	if o.MaxModels <= 0 {
		o.MaxModels = 100
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	var (
		f   fetcher
		err error
	)
	if o.HTTPBase != "" {
		f, err = newHTTPFetcher(o.HTTPBase, o.TLS)
	} else {
		f, err = newGRPCFetcher(o.GRPCAddr, o.TLS)
	}
	if err != nil {
		return nil, fmt.Errorf("tritonstats: %w", err)
	}
	return &Poller{
		f:        f,
		interval: o.Interval,
		log:      o.Logger,
		errs:     o.Set.GetOrCreateCounter("inferwatch_triton_poll_errors_total"),
		exp:      newExporter(o.Set, o.MaxModels),
	}, nil
}

// Close releases the upstream connection. The exported counters stay.
func (p *Poller) Close() error {
	if err := p.f.close(); err != nil {
		return fmt.Errorf("tritonstats: close %s: %w", p.f.target(), err)
	}
	return nil
}

// Run polls at once and then every interval until ctx is done. A failed poll
// is counted in inferwatch_triton_poll_errors_total and logged only when the
// poller goes from healthy to failing or back, so a server without the
// statistics extension costs one log line, not one per interval.
func (p *Poller) Run(ctx context.Context) {
	t := time.NewTicker(p.interval)
	defer t.Stop()
	failing := false
	for {
		pctx, cancel := context.WithTimeout(ctx, p.interval)
		err := p.PollOnce(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		switch {
		case err != nil && !failing:
			p.log.Warn("triton statistics poll failing; retrying every interval", "upstream", p.f.target(), "interval", p.interval, "err", err)
		case err == nil && failing:
			p.log.Info("triton statistics poll recovered", "upstream", p.f.target())
		}
		failing = err != nil
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// PollOnce reads the statistics once and exports the deltas since the last
// successful poll. The first success only records the baseline. A failure
// is counted, except a cancellation by the caller.
func (p *Poller) PollOnce(ctx context.Context) error {
	p.pollMu.Lock()
	defer p.pollMu.Unlock()
	cur, err := p.f.fetch(ctx)
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			p.errs.Inc()
		}
		return fmt.Errorf("tritonstats: poll %s: %w", p.f.target(), err)
	}
	now := time.Now()
	if p.prev == nil {
		for k := range cur {
			p.exp.handles(k) // series start at zero from the baseline on
		}
		p.prev, p.prevTime = cur, now
		return nil
	}
	interval := now.Sub(p.prevTime)
	snap := make([]ModelStats, 0, len(cur))
	for k, c := range cur {
		old, ok := p.prev[k]
		if !ok {
			// A model never seen before was loaded since the baseline:
			// all of its counts are new, but added in the poll that made
			// its series they would be its first sample, which increase()
			// and rate() take as the start, not as growth. Like the
			// baseline's, its series shows zero for one interval; its
			// counts so far are added at the next poll, as growth from a
			// zero it is remembered at.
			p.exp.handles(k)
			cur[k] = counters{}
			continue
		}
		d, reset := sub(c, old)
		p.exp.handles(k).add(d)
		snap = append(snap, newModelStats(k, interval, d, reset))
	}
	sortStats(snap)
	// Remember vanished models too: one that reappears with its counters
	// intact must not be counted twice.
	for k, c := range p.prev {
		if _, ok := cur[k]; !ok && len(cur) < maxTracked {
			cur[k] = c
		}
	}
	p.prev, p.prevTime = cur, now

	p.snapMu.Lock()
	p.snap = snap
	p.snapMu.Unlock()
	return nil
}

// Snapshot returns each model's view of the last poll interval, sorted by
// model and version; empty until two polls have succeeded.
func (p *Poller) Snapshot() []ModelStats {
	p.snapMu.RLock()
	defer p.snapMu.RUnlock()
	return append([]ModelStats(nil), p.snap...)
}
