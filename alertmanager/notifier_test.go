package alertmanager

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/inferwatch/inferwatch/alerting"
)

// fakeAM is an httptest Alertmanager: it records every POST and answers
// with the status its respond function picks for the request's number
// (0-based), optionally holding requests until released.
type fakeAM struct {
	t       *testing.T
	srv     *httptest.Server
	respond func(n int) int
	hold    chan struct{} // while non-nil and open, requests wait

	mu   sync.Mutex
	reqs []fakeRequest
	got  chan struct{} // signalled on every request
}

type fakeRequest struct {
	at     time.Time
	path   string
	header http.Header
	alerts []postableAlert
}

func newFakeAM(t *testing.T, respond func(n int) int) *fakeAM {
	t.Helper()
	f := &fakeAM{t: t, respond: respond, got: make(chan struct{}, 1000)}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeAM) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		f.t.Errorf("read body: %v", err)
	}
	var alerts []postableAlert
	if err := json.Unmarshal(body, &alerts); err != nil {
		f.t.Errorf("body is not a JSON array of alerts: %v: %s", err, body)
	}
	f.mu.Lock()
	n := len(f.reqs)
	f.reqs = append(f.reqs, fakeRequest{at: time.Now(), path: r.URL.Path, header: r.Header.Clone(), alerts: alerts})
	hold := f.hold
	f.mu.Unlock()
	f.got <- struct{}{}
	if hold != nil {
		select {
		case <-hold:
		case <-r.Context().Done():
		}
	}
	code := http.StatusOK
	if f.respond != nil {
		code = f.respond(n)
	}
	w.WriteHeader(code)
	fmt.Fprintf(w, "status %d", code)
}

func (f *fakeAM) requests() []fakeRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakeRequest(nil), f.reqs...)
}

// waitRequests waits until the server has seen n requests.
func (f *fakeAM) waitRequests(n int, within time.Duration) []fakeRequest {
	f.t.Helper()
	deadline := time.After(within)
	for {
		if r := f.requests(); len(r) >= n {
			return r
		}
		select {
		case <-f.got:
		case <-deadline:
			f.t.Fatalf("server saw %d requests within %v, want %d", len(f.requests()), within, n)
		}
	}
}

// fastOptions retry quickly, so tests take milliseconds.
func fastOptions(ms *metrics.Set) Options {
	return Options{
		Metrics:      ms,
		Logger:       slog.New(slog.DiscardHandler),
		MinBackoff:   20 * time.Millisecond,
		MaxBackoff:   80 * time.Millisecond,
		FlushTimeout: 2 * time.Second,
	}
}

func firing(name, model string) alerting.Alert {
	return alerting.Alert{
		Labels:      map[string]string{"alertname": name, "model": model, "version": "1"},
		Annotations: map[string]string{"summary": name + " on " + model},
		State:       alerting.StateFiring,
		StartsAt:    time.Now().Add(-time.Minute),
	}
}

func resolved(a alerting.Alert) alerting.Alert {
	a.State = alerting.StateResolved
	a.EndsAt = time.Now()
	return a
}

// counts reads inferwatch_notifications_total for a notifier.
func counts(ms *metrics.Set, notifier string) (sent, failed, dropped uint64) {
	get := func(result string) uint64 {
		return ms.GetOrCreateCounter(fmt.Sprintf(`inferwatch_notifications_total{notifier=%q,result=%q}`, notifier, result)).Get()
	}
	return get("sent"), get("failed"), get("dropped")
}

// waitCounts waits until the counters reach the wanted values.
func waitCounts(t *testing.T, ms *metrics.Set, notifier string, sent, failed, dropped uint64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s, f, d := counts(ms, notifier)
		if s == sent && f == failed && d == dropped {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s counts sent/failed/dropped = %d/%d/%d, want %d/%d/%d", notifier, s, f, d, sent, failed, dropped)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// returnsWhileHeld runs f, which must not wait on a destination that
// holds every request (for an hour, or until released after f): a wait
// would never end, so the generous bound fails it however loaded the
// machine, and a quick return passes however slow.
func returnsWhileHeld(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s still blocked 10s on a destination that holds every request", what)
	}
}

func newTestClient(t *testing.T, urls []string, o Options) *Client {
	t.Helper()
	c, err := NewClient(context.Background(), urls, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() }) //nolint:errcheck // some tests close it themselves
	return c
}

func TestBatching(t *testing.T) {
	tests := []struct {
		name      string
		alerts    int
		batchSize int
		want      []int // alerts per request
	}{
		{"one batch", 3, 4, []int{3}},
		{"exact", 8, 4, []int{4, 4}},
		{"split", 10, 4, []int{4, 4, 2}},
		{"one by one", 3, 1, []int{1, 1, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeAM(t, nil)
			ms := metrics.NewSet()
			o := fastOptions(ms)
			o.BatchSize = tt.batchSize
			c := newTestClient(t, []string{f.srv.URL}, o)
			var alerts []alerting.Alert
			for i := range tt.alerts {
				alerts = append(alerts, firing("P99OverBaseline", fmt.Sprint("m", i)))
			}
			c.Notify(context.Background(), alerts)
			reqs := f.waitRequests(len(tt.want), 5*time.Second)
			waitCounts(t, ms, "alertmanager", uint64(tt.alerts), 0, 0)
			var got []int
			seen := map[string]bool{}
			for _, r := range reqs {
				if r.path != "/api/v2/alerts" {
					t.Errorf("POST to %s, want /api/v2/alerts", r.path)
				}
				got = append(got, len(r.alerts))
				for _, a := range r.alerts {
					seen[a.Labels["model"]] = true
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("batches %v, want %v", got, tt.want)
			}
			if len(seen) != tt.alerts {
				t.Errorf("%d distinct alerts delivered, want %d", len(seen), tt.alerts)
			}
		})
	}
}

func TestRetry(t *testing.T) {
	const (
		minBackoff = 20 * time.Millisecond
		maxBackoff = 80 * time.Millisecond
	)
	tests := []struct {
		name        string
		statuses    []int // answer per request; the last repeats
		maxAttempts int
		wantReqs    int
		wantSent    uint64
		wantFailed  uint64
	}{
		{"ok at once", []int{200}, 5, 1, 1, 0},
		{"two 503 then ok", []int{503, 503, 200}, 5, 3, 1, 0},
		{"429 is retried", []int{429, 200}, 5, 2, 1, 0},
		{"408 is retried", []int{408, 204}, 5, 2, 1, 0},
		{"gives up after max attempts", []int{500}, 4, 4, 0, 1},
		{"400 is not retried", []int{400}, 5, 1, 0, 1},
		{"404 is not retried", []int{404}, 5, 1, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeAM(t, func(n int) int { return tt.statuses[min(n, len(tt.statuses)-1)] })
			ms := metrics.NewSet()
			o := fastOptions(ms)
			o.MaxAttempts = tt.maxAttempts
			o.MinBackoff, o.MaxBackoff = minBackoff, maxBackoff
			c := newTestClient(t, []string{f.srv.URL}, o)
			c.Notify(context.Background(), []alerting.Alert{firing("P99OverBaseline", "resnet")})
			waitCounts(t, ms, "alertmanager", tt.wantSent, tt.wantFailed, 0)
			time.Sleep(3 * maxBackoff) // no further attempts may follow
			reqs := f.requests()
			if len(reqs) != tt.wantReqs {
				t.Fatalf("%d requests, want %d", len(reqs), tt.wantReqs)
			}
			// Backoff: each wait at least half its nominal value (equal
			// jitter), never shorter than the previous one's lower bound,
			// capped at maxBackoff (plus scheduling slack).
			for i := 1; i < len(reqs); i++ {
				gap := reqs[i].at.Sub(reqs[i-1].at)
				nominal := min(minBackoff<<(i-1), maxBackoff)
				// The lower bound is the client's own timer; above the cap,
				// the slack is for a loaded machine's scheduling (a CI run
				// of these parallel subtests under -race), still short of
				// the default backoff (500 ms doubling) the options replace.
				if gap < nominal/2 || gap > maxBackoff+400*time.Millisecond {
					t.Errorf("wait before attempt %d: %v, want within [%v, %v]", i+1, gap, nominal/2, maxBackoff)
				}
			}
			// Every attempt carries the same alert.
			for i, r := range reqs {
				if len(r.alerts) != 1 || r.alerts[0].Labels["model"] != "resnet" {
					t.Errorf("attempt %d carried %+v", i+1, r.alerts)
				}
			}
		})
	}
}

func TestBackoffBounds(t *testing.T) {
	tests := []struct {
		attempt int
		lo, hi  time.Duration
	}{
		{1, 50 * time.Millisecond, 100 * time.Millisecond},
		{2, 100 * time.Millisecond, 200 * time.Millisecond},
		{3, 200 * time.Millisecond, 400 * time.Millisecond},
		{4, 250 * time.Millisecond, 500 * time.Millisecond},  // capped
		{70, 250 * time.Millisecond, 500 * time.Millisecond}, // no overflow
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint("attempt ", tt.attempt), func(t *testing.T) {
			for range 200 {
				d := backoff(tt.attempt, 100*time.Millisecond, 500*time.Millisecond)
				if d < tt.lo || d > tt.hi {
					t.Fatalf("backoff = %v, want within [%v, %v]", d, tt.lo, tt.hi)
				}
			}
		})
	}
	// Large bounds must not overflow into short waits.
	if d := backoff(100, 10*time.Second, time.Hour); d < 30*time.Minute || d > time.Hour {
		t.Errorf("backoff(100, 10s, 1h) = %v, want within [30m, 1h]", d)
	}
}

func TestValidateAlert(t *testing.T) {
	tests := []struct {
		name        string
		labels      map[string]string
		annotations map[string]string
		ok          bool
	}{
		{"usual", map[string]string{"alertname": "P99OverBaseline", "model": "resnet", "version": "1"}, map[string]string{"summary": "p99 up"}, true},
		{"bad annotation name", map[string]string{"a": "b"}, map[string]string{"root-cause": "x"}, false},
		{"annotation not UTF-8", map[string]string{"a": "b"}, map[string]string{"summary": "\xfe"}, false},
		{"host facts", map[string]string{"a": "b"}, map[string]string{"host_facts": "runqueue 12µs/s→140ms/s, throttled 0→80ms/s; absent: cuda, gpu"}, true},
		{"underscore and digits", map[string]string{"_a1": "x", "B_2": ""}, nil, true},
		{"none", nil, nil, false},
		{"empty name", map[string]string{"": "x"}, nil, false},
		{"leading digit", map[string]string{"1model": "x"}, nil, false},
		{"dash", map[string]string{"model-name": "x"}, nil, false},
		{"dot", map[string]string{"model.name": "x"}, nil, false},
		{"not UTF-8", map[string]string{"model": "\xff"}, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := validateAlert(alerting.Alert{Labels: tt.labels, Annotations: tt.annotations})
			if (err == nil) != tt.ok {
				t.Errorf("validateAlert(%v, %v) = %v, want ok %v", tt.labels, tt.annotations, err, tt.ok)
			}
		})
	}
}

// TestInvalidAlertAlone checks that an alert Alertmanager would refuse is
// counted as failed for each destination without holding back the others.
func TestInvalidAlertAlone(t *testing.T) {
	a, b := newFakeAM(t, nil), newFakeAM(t, nil)
	ms := metrics.NewSet()
	c := newTestClient(t, []string{a.srv.URL, b.srv.URL}, fastOptions(ms))
	bad := firing("P99OverBaseline", "x")
	bad.Labels["bad-name"] = "1"
	c.Notify(context.Background(), []alerting.Alert{bad, firing("P99OverBaseline", "good")})
	waitCounts(t, ms, "alertmanager", 2, 2, 0)
	for _, f := range []*fakeAM{a, b} {
		if r := f.requests(); len(r) != 1 || len(r[0].alerts) != 1 || r[0].alerts[0].Labels["model"] != "good" {
			t.Errorf("requests %+v, want the good alert alone", r)
		}
	}
}

func TestRetryConnectionRefused(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there now
	ms := metrics.NewSet()
	o := fastOptions(ms)
	o.MaxAttempts = 3
	c := newTestClient(t, []string{url}, o)
	c.Notify(context.Background(), []alerting.Alert{firing("P99OverBaseline", "a"), firing("P99OverBaseline", "b")})
	waitCounts(t, ms, "alertmanager", 0, 2, 0)
}

// TestRedirect: Alertmanager behind a proxy that redirects (http to https,
// a moved path). Go's client follows a 301, 302 or 303 by re-sending a POST
// as a GET without its body; the alerts never arrive, so that must count as
// failed, not sent. A 307 or 308 keeps the POST and its body: delivered.
func TestRedirect(t *testing.T) {
	tests := []struct {
		code       int
		wantSent   uint64
		wantFailed uint64
		wantPosts  int // POSTs carrying the alert that reached the new URL
	}{
		{http.StatusMovedPermanently, 0, 1, 0},
		{http.StatusFound, 0, 1, 0},
		{http.StatusSeeOther, 0, 1, 0},
		{http.StatusTemporaryRedirect, 1, 0, 1},
		{http.StatusPermanentRedirect, 1, 0, 1},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.code), func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			posts := 0
			mux := http.NewServeMux()
			mux.HandleFunc("/old/api/v2/alerts", func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, "/new/api/v2/alerts", tt.code)
			})
			// Like Alertmanager, the new URL answers a GET with 200 too.
			mux.HandleFunc("/new/api/v2/alerts", func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				if r.Method == http.MethodPost && strings.Contains(string(body), `"resnet"`) {
					mu.Lock()
					posts++
					mu.Unlock()
				}
				w.Write([]byte("[]")) //nolint:errcheck // test server
			})
			srv := httptest.NewServer(mux)
			t.Cleanup(srv.Close)
			ms := metrics.NewSet()
			c := newTestClient(t, []string{srv.URL + "/old"}, fastOptions(ms))
			c.Notify(context.Background(), []alerting.Alert{firing("P99OverBaseline", "resnet")})
			waitCounts(t, ms, "alertmanager", tt.wantSent, tt.wantFailed, 0)
			mu.Lock()
			defer mu.Unlock()
			if posts != tt.wantPosts {
				t.Errorf("%d POSTs with the alert reached the new URL, want %d", posts, tt.wantPosts)
			}
		})
	}
}

// TestURLPasswordNotLogged: an Alertmanager behind basic auth is configured
// with the credentials in its URL (the sidecar has no other way). They are
// sent, but the failure and recovery log lines name the URL with the
// password redacted, as Go's own errors do.
func TestURLPasswordNotLogged(t *testing.T) {
	var mu sync.Mutex
	var auth []string
	fail := true
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, _ := r.BasicAuth()
		mu.Lock()
		defer mu.Unlock()
		auth = append(auth, u+":"+p)
		if fail {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(srv.Close)
	withAuth := strings.Replace(srv.URL, "http://", "http://inferwatch:s3cret@", 1)
	var logs strings.Builder
	var logMu sync.Mutex
	ms := metrics.NewSet()
	o := fastOptions(ms)
	o.MaxAttempts = 1
	o.Logger = slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logs}, nil))
	c := newTestClient(t, []string{withAuth}, o)
	c.Notify(context.Background(), []alerting.Alert{firing("P99OverBaseline", "a")})
	waitCounts(t, ms, "alertmanager", 0, 1, 0)
	mu.Lock()
	fail = false
	mu.Unlock()
	c.Notify(context.Background(), []alerting.Alert{firing("P99OverBaseline", "b")})
	waitCounts(t, ms, "alertmanager", 1, 1, 0)
	c.Close() //nolint:errcheck // all delivered

	mu.Lock()
	for _, a := range auth {
		if a != "inferwatch:s3cret" {
			t.Errorf("request carried basic auth %q, want the URL's", a)
		}
	}
	mu.Unlock()
	logMu.Lock()
	defer logMu.Unlock()
	out := logs.String()
	if !strings.Contains(out, "failing") || !strings.Contains(out, "recovered") {
		t.Fatalf("want a failing and a recovered line, logged:\n%s", out)
	}
	if strings.Contains(out, "s3cret") {
		t.Errorf("the password is in the logs:\n%s", out)
	}
	if !strings.Contains(out, "inferwatch:xxxxx@") {
		t.Errorf("the logs do not name the URL, redacted:\n%s", out)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestDropOldest holds the first request so the worker is busy, fills the
// queue beyond its size, and checks that Notify did not block, that the
// oldest alerts were dropped and counted, and that the newest went out.
func TestDropOldest(t *testing.T) {
	f := newFakeAM(t, nil)
	f.hold = make(chan struct{})
	ms := metrics.NewSet()
	o := fastOptions(ms)
	o.QueueSize = 3
	o.RequestTimeout = time.Hour // the held request ends only when released
	c := newTestClient(t, []string{f.srv.URL}, o)

	c.Notify(context.Background(), []alerting.Alert{firing("P99OverBaseline", "inflight")})
	f.waitRequests(1, 5*time.Second) // the worker is now stuck in this request

	returnsWhileHeld(t, "6 Notify calls", func() {
		for i := range 6 {
			c.Notify(context.Background(), []alerting.Alert{firing("P99OverBaseline", fmt.Sprint("m", i))})
		}
	})
	waitCounts(t, ms, "alertmanager", 0, 0, 3)
	close(f.hold)
	waitCounts(t, ms, "alertmanager", 4, 0, 3)
	var got []string
	for _, r := range f.requests()[1:] {
		for _, a := range r.alerts {
			got = append(got, a.Labels["model"])
		}
	}
	if want := "[m3 m4 m5]"; fmt.Sprint(got) != want {
		t.Errorf("delivered after the hang: %v, want %s", got, want)
	}
}

// TestCoalesce checks that a queued alert is replaced by a newer
// notification of the same alert, in place.
func TestCoalesce(t *testing.T) {
	f := newFakeAM(t, nil)
	f.hold = make(chan struct{})
	ms := metrics.NewSet()
	c := newTestClient(t, []string{f.srv.URL}, fastOptions(ms))

	c.Notify(context.Background(), []alerting.Alert{firing("P99OverBaseline", "inflight")})
	f.waitRequests(1, 5*time.Second)
	x, y := firing("P99OverBaseline", "x"), firing("P99OverBaseline", "y")
	for range 3 { // re-sends while the destination hangs
		c.Notify(context.Background(), []alerting.Alert{x, y})
	}
	c.Notify(context.Background(), []alerting.Alert{resolved(x)})
	close(f.hold)
	waitCounts(t, ms, "alertmanager", 3, 0, 0)
	reqs := f.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	var got []string
	for _, a := range reqs[1].alerts {
		state := "firing"
		if a.EndsAt.Before(time.Now()) {
			state = "resolved"
		}
		got = append(got, a.Labels["model"]+":"+state)
	}
	if want := "[x:resolved y:firing]"; fmt.Sprint(got) != want {
		t.Errorf("second batch %v, want %s", got, want)
	}
}

func TestPendingNotSent(t *testing.T) {
	f := newFakeAM(t, nil)
	ms := metrics.NewSet()
	c := newTestClient(t, []string{f.srv.URL}, fastOptions(ms))
	p := firing("P99OverBaseline", "pending")
	p.State = alerting.StatePending
	c.Notify(context.Background(), []alerting.Alert{p, firing("P99OverBaseline", "firing")})
	waitCounts(t, ms, "alertmanager", 1, 0, 0)
	if r := f.requests(); len(r) != 1 || len(r[0].alerts) != 1 || r[0].alerts[0].Labels["model"] != "firing" {
		t.Errorf("requests %+v, want only the firing alert", r)
	}
}

// TestHA sends to two Alertmanagers, one of them failing: the other gets
// every alert, and each destination's outcome is counted.
func TestHA(t *testing.T) {
	up := newFakeAM(t, nil)
	down := newFakeAM(t, func(int) int { return http.StatusServiceUnavailable })
	up.hold = make(chan struct{}) // proves the two are independent
	ms := metrics.NewSet()
	o := fastOptions(ms)
	o.MaxAttempts = 2
	c := newTestClient(t, []string{up.srv.URL, down.srv.URL}, o)
	c.Notify(context.Background(), []alerting.Alert{firing("P99OverBaseline", "resnet")})
	waitCounts(t, ms, "alertmanager", 0, 1, 0) // the failing one gave up while the other hangs
	close(up.hold)
	waitCounts(t, ms, "alertmanager", 1, 1, 0)
	if n := len(down.requests()); n != 2 {
		t.Errorf("failing Alertmanager saw %d attempts, want 2", n)
	}
}

func TestHeaders(t *testing.T) {
	f := newFakeAM(t, nil)
	ms := metrics.NewSet()
	o := fastOptions(ms)
	o.Header = http.Header{"Authorization": {"Bearer s3cret"}}
	c := newTestClient(t, []string{f.srv.URL + "/prefix/"}, o)
	c.Notify(context.Background(), []alerting.Alert{firing("P99OverBaseline", "resnet")})
	r := f.waitRequests(1, 5*time.Second)[0]
	if got := r.header.Get("Authorization"); got != "Bearer s3cret" {
		t.Errorf("Authorization %q", got)
	}
	if got := r.header.Get("Content-Type"); got != "application/json" {
		t.Errorf("Content-Type %q", got)
	}
	if r.path != "/prefix/api/v2/alerts" {
		t.Errorf("path %q, want /prefix/api/v2/alerts", r.path)
	}
}

func TestClose(t *testing.T) {
	tests := []struct {
		name        string
		status      int
		wantSent    uint64
		wantErr     bool
		maxDuration time.Duration
	}{
		// Everything queued is flushed before Close returns.
		{"flushes", http.StatusOK, 5, false, time.Second},
		// A destination that keeps failing is given up at the flush
		// deadline, and Close says how much was lost.
		{"gives up at the flush deadline", http.StatusServiceUnavailable, 0, true, time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeAM(t, func(int) int { return tt.status })
			f.hold = make(chan struct{})
			ms := metrics.NewSet()
			o := fastOptions(ms)
			o.BatchSize = 2
			o.MaxAttempts = 1000
			o.FlushTimeout = 300 * time.Millisecond
			c := newTestClient(t, []string{f.srv.URL}, o)
			c.Notify(context.Background(), []alerting.Alert{firing("P99OverBaseline", "first")})
			f.waitRequests(1, 5*time.Second)
			for i := range 4 {
				c.Notify(context.Background(), []alerting.Alert{firing("P99OverBaseline", fmt.Sprint("m", i))})
			}
			close(f.hold)
			start := time.Now()
			err := c.Close()
			if took := time.Since(start); took > tt.maxDuration {
				t.Errorf("Close took %v", took)
			}
			if (err != nil) != tt.wantErr {
				t.Errorf("Close() = %v, want error %v", err, tt.wantErr)
			}
			sent, failed, dropped := counts(ms, "alertmanager")
			if sent != tt.wantSent || sent+failed+dropped != 5 {
				t.Errorf("sent/failed/dropped %d/%d/%d, want %d sent of 5 accounted for", sent, failed, dropped, tt.wantSent)
			}
			// After Close, Notify neither blocks nor sends: it counts drops.
			// (A request written before Close gave up can still reach the
			// fake's handler after Close returned: look for the late alert,
			// not at the request count.)
			c.Notify(context.Background(), []alerting.Alert{firing("P99OverBaseline", "late")})
			if _, _, d := counts(ms, "alertmanager"); d != dropped+1 {
				t.Errorf("Notify after Close: dropped %d, want %d", d, dropped+1)
			}
			time.Sleep(50 * time.Millisecond)
			for _, r := range f.requests() {
				for _, a := range r.alerts {
					if a.Labels["model"] == "late" {
						t.Errorf("the alert notified after Close was sent at %v", r.at)
					}
				}
			}
			if err2 := c.Close(); fmt.Sprint(err2) != fmt.Sprint(err) {
				t.Errorf("second Close() = %v, want %v", err2, err)
			}
		})
	}
}

func TestContextStops(t *testing.T) {
	f := newFakeAM(t, nil)
	ms := metrics.NewSet()
	ctx, cancel := context.WithCancel(context.Background())
	c, err := NewClient(ctx, []string{f.srv.URL}, fastOptions(ms))
	if err != nil {
		t.Fatal(err)
	}
	c.Notify(context.Background(), []alerting.Alert{firing("P99OverBaseline", "resnet")})
	waitCounts(t, ms, "alertmanager", 1, 0, 0)
	cancel()
	select {
	case <-c.d.done:
	case <-time.After(5 * time.Second):
		t.Fatal("workers still running 5s after the context ended")
	}
	c.Notify(context.Background(), []alerting.Alert{firing("P99OverBaseline", "late")})
	waitCounts(t, ms, "alertmanager", 1, 0, 1)
	if err := c.Close(); err == nil || !strings.Contains(err.Error(), "1 alerts undelivered") {
		t.Errorf("Close() = %v, want 1 alert undelivered", err)
	}
}

func TestNewClientErrors(t *testing.T) {
	tests := []struct {
		name string
		urls []string
		o    Options
		want string
	}{
		{"no URL", nil, Options{}, "no URL"},
		{"bad scheme", []string{"ftp://am:9093"}, Options{}, "scheme"},
		{"no host", []string{"http://"}, Options{}, "no host"},
		{"unparsable", []string{"http://am:9093/%zz"}, Options{}, "invalid URL escape"},
		{"twice", []string{"http://am:9093", "http://am:9093/"}, Options{}, "given twice"},
		{"negative queue", []string{"http://am:9093"}, Options{QueueSize: -1}, "negative QueueSize"},
		{"negative timeout", []string{"http://am:9093"}, Options{RequestTimeout: -time.Second}, "negative RequestTimeout"},
		{"backoff inverted", []string{"http://am:9093"}, Options{MinBackoff: time.Second, MaxBackoff: time.Millisecond}, "MaxBackoff"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewClient(context.Background(), tt.urls, tt.o)
			if err == nil {
				c.Close() //nolint:errcheck
				t.Fatalf("NewClient succeeded, want an error containing %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "alertmanager client: ") {
				t.Errorf("error %q, want it to contain %q with context", err, tt.want)
			}
		})
	}
}

func TestAlertsEndpoint(t *testing.T) {
	tests := []struct{ in, want string }{
		{"http://am:9093", "http://am:9093/api/v2/alerts"},
		{"http://am:9093/", "http://am:9093/api/v2/alerts"},
		{"https://proxy/alertmanager", "https://proxy/alertmanager/api/v2/alerts"},
		{"http://am:9093/api/v2/alerts", "http://am:9093/api/v2/alerts"},
		{"http://am:9093?x=1", "http://am:9093/api/v2/alerts?x=1"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := alertsEndpoint(tt.in)
			if err != nil || got != tt.want {
				t.Errorf("alertsEndpoint(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestEncodePostableAlerts(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.FixedZone("CET", 3600))
	start := now.Add(-10 * time.Minute)
	const resolve = 4 * time.Minute
	tests := []struct {
		name   string
		state  alerting.State
		endsAt time.Time
		want   time.Time
	}{
		{"firing ends a resolve timeout ahead", alerting.StateFiring, time.Time{}, now.Add(resolve)},
		{"firing ignores a stale endsAt", alerting.StateFiring, now.Add(-time.Hour), now.Add(resolve)},
		{"resolved at its time", alerting.StateResolved, now.Add(-time.Minute), now.Add(-time.Minute)},
		{"resolved without a time: now", alerting.StateResolved, time.Time{}, now},
		{"resolved before it started: at its start", alerting.StateResolved, start.Add(-time.Second), start},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := firing("LatencyMeanOverSLA", "resnet")
			a.StartsAt, a.State, a.EndsAt = start, tt.state, tt.endsAt
			a.GeneratorURL = "http://sidecar:9901/api/v1/alerts"
			b, err := encodePostableAlerts([]alerting.Alert{a}, now, resolve)
			if err != nil {
				t.Fatal(err)
			}
			var got []map[string]any
			if err := json.Unmarshal(b, &got); err != nil || len(got) != 1 {
				t.Fatalf("decode %s: %v", b, err)
			}
			want := map[string]any{
				"labels":       map[string]any{"alertname": "LatencyMeanOverSLA", "model": "resnet", "version": "1"},
				"annotations":  map[string]any{"summary": "LatencyMeanOverSLA on resnet"},
				"startsAt":     start.UTC().Format(time.RFC3339Nano),
				"endsAt":       tt.want.UTC().Format(time.RFC3339Nano),
				"generatorURL": "http://sidecar:9901/api/v1/alerts",
			}
			if fmt.Sprint(got[0]) != fmt.Sprint(want) {
				t.Errorf("encoded\n%v\nwant\n%v", got[0], want)
			}
		})
	}
}
