package alertmanager

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/inferwatch/inferwatch/alerting"
	"github.com/inferwatch/inferwatch/internal/testenv"
)

// TestRealAlertmanager drives a real Alertmanager (Debian's
// prometheus-alertmanager) through one alert episode and an outage:
//
//  1. a firing alert, re-sent several times, is listed active by GET
//     /api/v2/alerts with its labels, and Alertmanager's downstream
//     webhook receiver is notified once;
//  2. the resolve reaches the receiver once and the alert leaves the
//     active list;
//  3. with Alertmanager stopped, Notify does not block and failures are
//     counted; once it is back, the re-sends get through.
func TestRealAlertmanager(t *testing.T) {
	bin := testenv.RequireBinary(t, "prometheus-alertmanager", "alertmanager")
	recv := newReceiver(t)
	am := startAlertmanager(t, bin, testenv.FreeAddr(t), t.TempDir(), recv.srv.URL)

	ms := metrics.NewSet()
	c, err := NewClient(context.Background(), []string{"http://" + am.addr}, Options{
		Metrics:        ms,
		Logger:         slog.New(slog.DiscardHandler),
		MinBackoff:     50 * time.Millisecond,
		MaxBackoff:     200 * time.Millisecond,
		MaxAttempts:    3,
		RequestTimeout: 2 * time.Second,
		ResolveTimeout: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() }) //nolint:errcheck // Alertmanager may be gone by then

	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	alert := alerting.Alert{
		Labels: map[string]string{
			"alertname": alerting.RuleP99OverBaseline,
			"model":     "resnet-" + run,
			"version":   "1",
			"severity":  "warning",
		},
		Annotations: map[string]string{"summary": "p99 0.41s is 1.6x the baseline 0.25s"},
		State:       alerting.StateFiring,
		StartsAt:    time.Now().Add(-3 * time.Minute).Truncate(time.Millisecond),
	}
	model := alert.Labels["model"]

	// 1. Firing, re-sent: listed active, notified downstream once.
	c.Notify(context.Background(), []alerting.Alert{alert})
	got := am.waitAlert(t, model, true)
	if fmt.Sprint(got.Labels) != fmt.Sprint(alert.Labels) {
		t.Errorf("Alertmanager lists labels %v, want %v", got.Labels, alert.Labels)
	}
	if !got.StartsAt.Equal(alert.StartsAt) {
		t.Errorf("startsAt %v, want %v", got.StartsAt, alert.StartsAt)
	}
	if until := time.Until(got.EndsAt); until < 30*time.Second || until > time.Minute {
		t.Errorf("endsAt %v ahead, want about the 1m resolve timeout", until)
	}
	recv.wait(t, model, "firing", 1)
	for range 4 { // the engine's re-sends, across several group intervals
		time.Sleep(400 * time.Millisecond)
		c.Notify(context.Background(), []alerting.Alert{alert})
	}
	time.Sleep(1500 * time.Millisecond) // past group_interval: a duplicate would show now
	if n := recv.count(model, "firing"); n != 1 {
		t.Errorf("receiver got %d firing notifications for one episode, want 1", n)
	}

	// 2. Resolved: notified once, no longer active.
	c.Notify(context.Background(), []alerting.Alert{resolved(alert)})
	recv.wait(t, model, "resolved", 1)
	time.Sleep(1500 * time.Millisecond)
	if n := recv.count(model, "resolved"); n != 1 {
		t.Errorf("receiver got %d resolved notifications, want 1", n)
	}
	if n := recv.count(model, "firing"); n != 1 {
		t.Errorf("receiver got %d firing notifications after the resolve, want still 1", n)
	}
	am.waitAlert(t, model, false)
	sentBefore, _, _ := counts(ms, "alertmanager")

	// 3. Alertmanager down: Notify returns at once, failures are counted,
	// and the re-sends get through once it is back.
	am.stop(t)
	second := alert
	second.Labels = map[string]string{"alertname": alerting.RuleLatencyMeanOverSLA, "model": "bert-" + run, "version": "2"}
	second.StartsAt = time.Now().Truncate(time.Millisecond)
	start := time.Now()
	for range 20 {
		c.Notify(context.Background(), []alerting.Alert{second})
	}
	// Queued, each returns in microseconds; sent in the call, each would
	// take its retries' backoff, at least 25+50 ms (refused at once, three
	// attempts, 50 ms doubling with equal jitter): 1.5 s for the 20. The
	// bound leaves a loaded machine most of that.
	if took := time.Since(start); took > time.Second {
		t.Errorf("20 Notify calls took %v with Alertmanager down", took)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, failed, _ := counts(ms, "alertmanager"); failed > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no failure counted 10s into the outage")
		}
		time.Sleep(20 * time.Millisecond)
	}
	am.start(t)
	// The engine keeps re-sending a firing alert; model that here.
	resend, stopResend := context.WithCancel(context.Background())
	defer stopResend()
	go func() {
		for resend.Err() == nil {
			c.Notify(context.Background(), []alerting.Alert{second})
			select {
			case <-resend.Done():
			case <-time.After(300 * time.Millisecond):
			}
		}
	}()
	am.waitAlert(t, second.Labels["model"], true)
	recv.wait(t, second.Labels["model"], "firing", 1)
	stopResend()
	if sent, failed, dropped := counts(ms, "alertmanager"); sent <= sentBefore {
		t.Errorf("sent %d, not more than the %d before the outage (failed %d, dropped %d)", sent, sentBefore, failed, dropped)
	}
}

// TestRealAlertmanagerPartialBatch: Alertmanager stores the valid alerts of
// a batch and answers 400 for the invalid one, so the counts must say two
// sent and one failed, not the batch failed. The invalid alert is one our
// own check lets through: its only label is empty, which Alertmanager drops
// before finding no label left.
func TestRealAlertmanagerPartialBatch(t *testing.T) {
	bin := testenv.RequireBinary(t, "prometheus-alertmanager", "alertmanager")
	am := startAlertmanager(t, bin, testenv.FreeAddr(t), t.TempDir(), newReceiver(t).srv.URL)

	ms := metrics.NewSet()
	c, err := NewClient(context.Background(), []string{"http://" + am.addr}, Options{
		Metrics:        ms,
		Logger:         slog.New(slog.DiscardHandler),
		MinBackoff:     50 * time.Millisecond,
		MaxBackoff:     200 * time.Millisecond,
		RequestTimeout: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() }) //nolint:errcheck // counts are checked below

	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	first, second := firing(alerting.RuleP99OverBaseline, "a-"+run), firing(alerting.RuleP99OverBaseline, "b-"+run)
	bad := firing(alerting.RuleP99OverBaseline, "")
	bad.Labels = map[string]string{"model": ""}
	c.Notify(context.Background(), []alerting.Alert{first, bad, second}) // one batch
	waitCounts(t, ms, "alertmanager", 2, 1, 0)
	am.waitAlert(t, first.Labels["model"], true)
	am.waitAlert(t, second.Labels["model"], true)
}

// alertmanagerProc is an Alertmanager the test starts, stops and restarts
// on the same address and state.
type alertmanagerProc struct {
	bin, addr, dir, receiver string
	p                        *testenv.Process
}

func startAlertmanager(t *testing.T, bin, addr, dir, receiverURL string) *alertmanagerProc {
	t.Helper()
	am := &alertmanagerProc{bin: bin, addr: addr, dir: dir, receiver: receiverURL}
	am.start(t)
	return am
}

func (am *alertmanagerProc) start(t *testing.T) {
	t.Helper()
	am.p = testenv.StartAlertmanager(t, am.bin, am.dir, am.addr, am.receiver)
}

func (am *alertmanagerProc) stop(t *testing.T) {
	t.Helper()
	am.p.Stop()
}

// gettableAlert is the part of GET /api/v2/alerts the test reads.
type gettableAlert struct {
	Labels   map[string]string `json:"labels"`
	StartsAt time.Time         `json:"startsAt"`
	EndsAt   time.Time         `json:"endsAt"`
	Status   struct {
		State string `json:"state"`
	} `json:"status"`
}

// waitAlert waits until Alertmanager lists the model's alert as active
// (present) or no longer lists it active (!present), and returns it.
func (am *alertmanagerProc) waitAlert(t *testing.T, model string, present bool) gettableAlert {
	t.Helper()
	q := url.Values{"filter": {fmt.Sprintf("model=%q", model)}}
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + am.addr + "/api/v2/alerts?" + q.Encode())
		if err != nil {
			t.Fatalf("GET alerts: %v", err)
		}
		var alerts []gettableAlert
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err := json.Unmarshal(body, &alerts); err != nil {
			t.Fatalf("GET alerts: %v: %s", err, body)
		}
		var active []gettableAlert
		for _, a := range alerts {
			if a.Status.State == "active" {
				active = append(active, a)
			}
		}
		switch {
		case present && len(active) == 1:
			return active[0]
		case present && len(active) > 1:
			t.Fatalf("%d active alerts for %s, want 1: %s", len(active), model, body)
		case !present && len(active) == 0:
			return gettableAlert{}
		}
		if time.Now().After(deadline) {
			t.Fatalf("alerts for %s after 10s: %s (want present: %v)", model, body, present)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// receiver is the webhook Alertmanager notifies: it counts notifications
// per group model and status.
type receiver struct {
	srv  *httptest.Server
	mu   sync.Mutex
	seen map[[2]string]int
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{seen: map[[2]string]int{}}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var m struct {
			Status      string            `json:"status"`
			GroupLabels map[string]string `json:"groupLabels"`
		}
		if err := json.NewDecoder(req.Body).Decode(&m); err != nil {
			t.Errorf("receiver: decode notification: %v", err)
		}
		r.mu.Lock()
		r.seen[[2]string{m.GroupLabels["model"], m.Status}]++
		r.mu.Unlock()
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) count(model, status string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen[[2]string{model, status}]
}

func (r *receiver) wait(t *testing.T, model, status string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for r.count(model, status) < n {
		if time.Now().After(deadline) {
			t.Fatalf("receiver got %d %s notifications for %s after 10s, want %d", r.count(model, status), status, model, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
