package alertmanager

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/inferwatch/inferwatch/alerting"
)

// Options tunes a Client or a Webhook. The zero value is usable.
type Options struct {
	// Name is the notifier label of inferwatch_notifications_total and of
	// log lines; default "alertmanager" for a Client, "webhook" for a
	// Webhook.
	Name string
	// Metrics is where inferwatch_notifications_total is counted; nil
	// means a private set (counts then only reach the logs). Pass the
	// sidecar's set (metricset.Set.Metrics()) to export them.
	Metrics *metrics.Set
	// Logger gets one line when a destination starts failing and one when
	// it recovers; default slog.Default().
	Logger *slog.Logger
	// HTTPClient sends the requests; default a plain http.Client. Its own
	// Timeout, if any, applies on top of RequestTimeout.
	HTTPClient *http.Client
	// Header is added to every request (e.g. Authorization).
	Header http.Header

	QueueSize      int           // alerts queued per destination before the oldest is dropped; default 1024
	BatchSize      int           // alerts per request at most; default 64
	RequestTimeout time.Duration // per attempt; default 10s
	MaxAttempts    int           // attempts per batch, the first included; default 5
	MinBackoff     time.Duration // wait after the first failed attempt; default 500ms, doubled each retry
	MaxBackoff     time.Duration // cap of the wait between attempts; default 30s
	FlushTimeout   time.Duration // after stop, how long queued alerts may still be sent; default 5s

	// ResolveTimeout (Client only) is how far ahead of each send a firing
	// alert's endsAt is set, so that Alertmanager resolves it by itself if
	// the re-sends stop (the sidecar died). Make it a few re-send
	// intervals: default 4m, four times a 1-minute re-send.
	ResolveTimeout time.Duration

	hidePath bool // logs name the destination by scheme and host only (webhooks)
}

func (o Options) withDefaults(name string) (Options, error) {
	if o.Name == "" {
		o.Name = name
	}
	if o.Metrics == nil {
		o.Metrics = metrics.NewSet()
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{}
	}
	for _, d := range []struct {
		v    *int
		def  int
		name string
	}{
		{&o.QueueSize, 1024, "QueueSize"},
		{&o.BatchSize, 64, "BatchSize"},
		{&o.MaxAttempts, 5, "MaxAttempts"},
	} {
		if *d.v < 0 {
			return o, fmt.Errorf("negative %s %d", d.name, *d.v)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	for _, d := range []struct {
		v    *time.Duration
		def  time.Duration
		name string
	}{
		{&o.RequestTimeout, 10 * time.Second, "RequestTimeout"},
		{&o.MinBackoff, 500 * time.Millisecond, "MinBackoff"},
		{&o.MaxBackoff, 30 * time.Second, "MaxBackoff"},
		{&o.FlushTimeout, 5 * time.Second, "FlushTimeout"},
		{&o.ResolveTimeout, 4 * time.Minute, "ResolveTimeout"},
	} {
		if *d.v < 0 {
			return o, fmt.Errorf("negative %s %v", d.name, *d.v)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if o.MaxBackoff < o.MinBackoff {
		return o, fmt.Errorf("MaxBackoff %v below MinBackoff %v", o.MaxBackoff, o.MinBackoff)
	}
	return o, nil
}

// encodeFunc turns a batch into a request body. It runs on every attempt,
// with the attempt's time, so time-relative fields are fresh.
type encodeFunc func(batch []alerting.Alert, now time.Time) ([]byte, error)

// validateFunc rejects an alert the destination would refuse, before it is
// queued: one bad alert must not sink the batch it would travel in.
type validateFunc func(a alerting.Alert) error

// dispatcher is the machinery a Client and a Webhook share: one queue and
// one worker per destination, retries, counting, stopping.
type dispatcher struct {
	o        Options
	encode   encodeFunc
	validate validateFunc // nil: everything goes
	// split400: a 400 for a batch of several alerts is followed by each
	// alert alone. Alertmanager stores a batch's valid alerts and refuses
	// the request for its invalid ones, so only single sends tell which
	// were stored; re-posting a stored alert is idempotent there.
	split400 bool
	targets  []*target

	sent, failed, dropped *metrics.Counter

	runCtx     context.Context    // done once stopped: flushing begins
	stop       context.CancelFunc // cancels runCtx
	flushCtx   context.Context    // cancelled FlushTimeout after stop
	workers    sync.WaitGroup
	done       chan struct{} // closed when every worker has returned
	lost       atomic.Int64  // alerts failed or dropped after stop
	closeOnce  sync.Once
	closeError error
}

// target is one destination URL.
type target struct {
	d    *dispatcher
	url  string
	name string // url with its password redacted, for logs and errors: basic auth can only be given in the URL
	q    *queue
}

// permanentError is a refusal that retrying will not change (a 4xx other
// than 408 and 429).
type permanentError struct {
	err    error
	status int // the HTTP status, 0 for a refusal made here
}

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// logName is how logs and errors name a destination: its URL with the
// password redacted (basic auth can only be given in the URL); with
// hidePath (a webhook: Slack-style URLs carry their secret in the path or
// the query), only its scheme and host.
func logName(u string, hidePath bool) string {
	pu, err := url.Parse(u)
	if err != nil {
		return "(unparsable URL)"
	}
	if hidePath && (strings.Trim(pu.Path, "/") != "" || pu.RawQuery != "") {
		return (&url.URL{Scheme: pu.Scheme, Host: pu.Host}).String() + "/…"
	}
	return pu.Redacted()
}

// newDispatcher validates the URLs and starts one worker per destination,
// living until ctx is done or close is called.
func newDispatcher(ctx context.Context, urls []string, o Options, encode encodeFunc, validate validateFunc) (*dispatcher, error) {
	if len(urls) == 0 {
		return nil, errors.New("no URL")
	}
	seen := make(map[string]bool, len(urls))
	for _, u := range urls {
		if err := checkURL(u); err != nil {
			return nil, err
		}
		if seen[u] {
			return nil, fmt.Errorf("URL %q given twice", u)
		}
		seen[u] = true
	}
	counter := func(result string) *metrics.Counter {
		return o.Metrics.GetOrCreateCounter(fmt.Sprintf(`inferwatch_notifications_total{notifier=%q,result=%q}`, o.Name, result))
	}
	runCtx, stop := context.WithCancel(ctx)
	flushCtx, cancelFlush := context.WithCancel(context.WithoutCancel(ctx))
	d := &dispatcher{
		o:        o,
		encode:   encode,
		validate: validate,
		sent:     counter("sent"),
		failed:   counter("failed"),
		dropped:  counter("dropped"),
		runCtx:   runCtx,
		stop:     stop,
		flushCtx: flushCtx,
		done:     make(chan struct{}),
	}
	for _, u := range urls {
		d.targets = append(d.targets, &target{d: d, url: u, name: logName(u, o.hidePath), q: newQueue(o.QueueSize)})
	}
	for _, t := range d.targets {
		d.workers.Add(1)
		go func() {
			defer d.workers.Done()
			t.run(runCtx)
		}()
	}
	go func() {
		d.workers.Wait()
		close(d.done)
	}()
	// The flush deadline: FlushTimeout after stop, unless the workers
	// finish first.
	go func() {
		defer cancelFlush()
		<-runCtx.Done()
		timer := time.NewTimer(o.FlushTimeout)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-d.done:
		}
	}()
	return d, nil
}

func checkURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("URL %q: %w", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("URL %q: scheme must be http or https", raw)
	}
	if u.Host == "" {
		return fmt.Errorf("URL %q: no host", raw)
	}
	return nil
}

// notify queues the alerts on every destination, pending ones excepted.
func (d *dispatcher) notify(alerts []alerting.Alert) {
	batch := make([]keyed, 0, len(alerts))
	for _, a := range alerts {
		if a.State == alerting.StatePending {
			continue
		}
		if d.validate != nil {
			if err := d.validate(a); err != nil {
				d.failed.Add(len(d.targets))
				d.o.Logger.Warn("alert not sent: invalid", "notifier", d.o.Name, "labels", a.Labels, "err", err)
				continue
			}
		}
		// The caller may reuse its maps once Notify returns.
		a.Labels = maps.Clone(a.Labels)
		a.Annotations = maps.Clone(a.Annotations)
		batch = append(batch, keyed{fp: a.Fingerprint(), alert: a})
	}
	if len(batch) == 0 {
		return
	}
	for _, t := range d.targets {
		if d.runCtx.Err() != nil {
			d.drop(len(batch))
			continue
		}
		if n := t.q.push(batch); n > 0 {
			d.drop(n)
		}
	}
}

func (d *dispatcher) drop(n int) {
	d.dropped.Add(n)
	if d.runCtx.Err() != nil {
		d.lost.Add(int64(n))
	}
}

// close stops the workers, lets them flush for at most FlushTimeout and
// waits for them. It reports the alerts that were not delivered after the
// stop.
func (d *dispatcher) close() error {
	d.closeOnce.Do(func() {
		d.stop()
		<-d.done
		if n := d.lost.Load(); n > 0 {
			d.closeError = fmt.Errorf("%s notifier: %d alerts undelivered at close", d.o.Name, n)
		}
	})
	return d.closeError
}

// run sends batches until ctx is done, then flushes until the queue is
// empty or the flush deadline passes; what is left is dropped.
func (t *target) run(ctx context.Context) {
	failing := false
	for {
		batch := t.q.take(t.d.o.BatchSize)
		if len(batch) == 0 {
			if ctx.Err() != nil {
				break
			}
			select {
			case <-t.q.ready:
				continue
			case <-ctx.Done():
				continue // one more look: alerts may have arrived with the stop
			}
		}
		if t.d.flushCtx.Err() != nil {
			t.d.drop(len(batch))
			break
		}
		err := t.deliver(batch)
		switch {
		case err != nil && !failing:
			t.d.o.Logger.Warn("alert notifications failing", "notifier", t.d.o.Name, "url", t.name, "err", err)
		case err == nil && failing:
			t.d.o.Logger.Info("alert notifications recovered", "notifier", t.d.o.Name, "url", t.name)
		}
		failing = err != nil
	}
	if n := t.q.close(); n > 0 {
		t.d.drop(n)
	}
}

// deliver sends one batch, retrying with backoff, and counts the outcome.
// It gives up after MaxAttempts, on a permanent refusal, or when the flush
// deadline passes.
func (t *target) deliver(batch []alerting.Alert) error {
	o := t.d.o
	ctx := t.d.flushCtx
	var err error
	for attempt := 1; ; attempt++ {
		err = t.post(ctx, batch)
		if err == nil {
			t.d.sent.Add(len(batch))
			return nil
		}
		var perm permanentError
		if errors.As(err, &perm) && perm.status == http.StatusBadRequest && t.d.split400 && len(batch) > 1 {
			return t.deliverEach(batch)
		}
		if errors.As(err, &perm) || attempt >= o.MaxAttempts || ctx.Err() != nil {
			break
		}
		timer := time.NewTimer(backoff(attempt, o.MinBackoff, o.MaxBackoff))
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
		}
		if ctx.Err() != nil {
			break
		}
	}
	t.d.failed.Add(len(batch))
	if t.d.runCtx.Err() != nil {
		t.d.lost.Add(int64(len(batch)))
	}
	return err
}

// deliverEach delivers each alert of a refused batch alone, so that the
// counts say which ones the destination took. It returns the first error.
func (t *target) deliverEach(batch []alerting.Alert) error {
	var first error
	for i, a := range batch {
		if t.d.flushCtx.Err() != nil {
			t.d.drop(len(batch) - i)
			break
		}
		if err := t.deliver([]alerting.Alert{a}); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// backoff is the wait after the given failed attempt (1-based): MinBackoff
// doubled per attempt, capped at MaxBackoff, with "equal jitter" (between
// half and all of it) so that sidecars restarted together do not retry in
// lockstep. Waits never shrink from one attempt to the next.
func backoff(attempt int, lo, hi time.Duration) time.Duration {
	d := lo
	for i := 1; i < attempt && d < hi; i++ {
		d *= 2
	}
	d = min(d, hi)
	half := d / 2
	return half + rand.N(d-half+1)
}

// post makes one attempt.
func (t *target) post(ctx context.Context, batch []alerting.Alert) error {
	body, err := t.d.encode(batch, time.Now())
	if err != nil {
		return permanentError{err: fmt.Errorf("encode %d alerts: %w", len(batch), err)}
	}
	ctx, cancel := context.WithTimeout(ctx, t.d.o.RequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.url, bytes.NewReader(body))
	if err != nil {
		return permanentError{err: fmt.Errorf("build request for %s: %w", t.name, err)}
	}
	for k, vs := range t.d.o.Header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "inferwatch")
	resp, err := t.d.o.HTTPClient.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			ue.URL = t.name // the client's error names the whole URL
		}
		return fmt.Errorf("post %d alerts: %w", len(batch), err)
	}
	defer resp.Body.Close()
	// Read a little of the answer for the error, and drain the rest (up
	// to a bound) so the connection can be reused.
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) //nolint:errcheck // best effort
	if resp.Request != nil && resp.Request.Method != http.MethodPost {
		// A 301, 302 or 303 makes the client follow with a GET and no
		// body: whatever answers it, the alerts were not delivered.
		return permanentError{err: fmt.Errorf("post %d alerts to %s: redirected to %s, which the client follows as %s without the alerts: configure that URL",
			len(batch), t.name, resp.Request.URL.Redacted(), resp.Request.Method)}
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	err = fmt.Errorf("post %d alerts to %s: %s: %s", len(batch), t.name, resp.Status, bytes.TrimSpace(snippet))
	switch {
	case resp.StatusCode == http.StatusRequestTimeout, resp.StatusCode == http.StatusTooManyRequests, resp.StatusCode >= 500:
		return err
	default:
		return permanentError{err: err, status: resp.StatusCode}
	}
}
