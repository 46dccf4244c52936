package alertmanager

import (
	"context"
	"encoding/json"
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

func TestWebhook(t *testing.T) {
	var (
		mu       sync.Mutex
		messages []WebhookMessage
		requests int
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		requests++
		if requests == 1 { // the shared retry machinery recovers from this
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		body, _ := io.ReadAll(r.Body)
		var m WebhookMessage
		if err := json.Unmarshal(body, &m); err != nil {
			t.Errorf("decode %s: %v", body, err)
		}
		messages = append(messages, m)
	}))
	t.Cleanup(srv.Close)

	ms := metrics.NewSet()
	o := fastOptions(ms)
	o.BatchSize = 2
	w, err := NewWebhook(context.Background(), srv.URL+"/hook", o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() }) //nolint:errcheck

	jump := firing(alerting.RuleLatencyStdDevJump, "resnet")
	jump.Snapshot = &alerting.Snapshot{Moved: []string{"upstream"}, InFlight: 3,
		Current:  alerting.Breakdown{Host: &alerting.HostBreakdown{Seconds: 10, Sched: &alerting.HostSched{Coverage: 1, RunqueueDelay: 1.4}}},
		Previous: alerting.Breakdown{Host: &alerting.HostBreakdown{Seconds: 10, Sched: &alerting.HostSched{Coverage: 1, RunqueueDelay: 0.12}}}}
	old := resolved(firing(alerting.RuleP99OverBaseline, "bert"))
	gone := resolved(firing(alerting.RuleP99OverBaseline, "gpt"))
	w.Notify(context.Background(), []alerting.Alert{jump, old, gone})
	waitCounts(t, ms, "webhook", 3, 0, 0)

	mu.Lock()
	defer mu.Unlock()
	if requests != 3 || len(messages) != 2 {
		t.Fatalf("%d requests, %d messages; want 3 (one failed) and 2", requests, len(messages))
	}
	tests := []struct {
		name        string
		msg         WebhookMessage
		wantStatus  string
		wantAlerts  []string // model:status
		wantEndsAt  []bool
		wantMovedUp bool
	}{
		{"mixed batch fires", messages[0], "firing", []string{"resnet:firing", "bert:resolved"}, []bool{false, true}, true},
		{"all resolved", messages[1], "resolved", []string{"gpt:resolved"}, []bool{true}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.msg.Version != WebhookVersion || tt.msg.Status != tt.wantStatus {
				t.Errorf("version %q status %q, want %q %q", tt.msg.Version, tt.msg.Status, WebhookVersion, tt.wantStatus)
			}
			if len(tt.msg.Alerts) != len(tt.wantAlerts) {
				t.Fatalf("%d alerts, want %d", len(tt.msg.Alerts), len(tt.wantAlerts))
			}
			for i, a := range tt.msg.Alerts {
				if got := a.Labels["model"] + ":" + a.Status; got != tt.wantAlerts[i] {
					t.Errorf("alert %d is %s, want %s", i, got, tt.wantAlerts[i])
				}
				if !a.EndsAt.IsZero() != tt.wantEndsAt[i] {
					t.Errorf("alert %d endsAt %v", i, a.EndsAt)
				}
				if a.Fingerprint == "" || a.StartsAt.IsZero() || a.Annotations["summary"] == "" {
					t.Errorf("alert %d lacks fingerprint, startsAt or annotations: %+v", i, a)
				}
			}
			snap := tt.msg.Alerts[0].Snapshot
			if got := snap != nil && len(snap.Moved) == 1; got != tt.wantMovedUp {
				t.Errorf("snapshot carried: %v, want %v", got, tt.wantMovedUp)
			}
			// The host facts travel whole, each window's its own, the
			// absent GPU still absent.
			if tt.wantMovedUp {
				cur, prev := snap.Current.Host, snap.Previous.Host
				if cur == nil || prev == nil || cur.Sched == nil || prev.Sched == nil || cur.Sched.RunqueueDelay != 1.4 ||
					prev.Sched.RunqueueDelay != 0.12 || cur.GPU != nil || prev.GPU != nil {
					t.Errorf("snapshot host facts: current %+v, previous %+v", cur, prev)
				}
			}
		})
	}
}

func TestNewWebhookErrors(t *testing.T) {
	tests := []struct{ name, url string }{
		{"empty", ""},
		{"relative", "/hook"},
		{"scheme", "unix:///run/hook.sock"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, err := NewWebhook(context.Background(), tt.url, Options{})
			if err == nil {
				w.Close() //nolint:errcheck
				t.Fatalf("NewWebhook(%q) succeeded", tt.url)
			}
		})
	}
}

// TestNotifyDoesNotBlock checks the Notifier contract under a destination
// that never answers: many Notify calls return at once.
func TestNotifyDoesNotBlock(t *testing.T) {
	hang := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(hang) })
	ms := metrics.NewSet()
	o := fastOptions(ms)
	o.QueueSize = 10
	o.BatchSize = 1
	o.FlushTimeout = 10 * time.Millisecond
	o.RequestTimeout = time.Hour // the destination answers no request
	w, err := NewWebhook(context.Background(), srv.URL, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() }) //nolint:errcheck
	returnsWhileHeld(t, "1000 Notify calls", func() {
		for i := range 1000 {
			a := firing(alerting.RuleP99OverBaseline, "m")
			a.Labels["i"] = string(rune('a' + i%26))
			a.Labels["j"] = string(rune('a' + i/26))
			w.Notify(context.Background(), []alerting.Alert{a})
		}
	})
	if _, _, dropped := counts(ms, "webhook"); dropped < 1000-10-1 {
		t.Errorf("dropped %d, want at least %d", dropped, 1000-10-1)
	}
}

// TestWebhookSecretNotLogged: a Slack-style webhook URL carries its secret
// in the path (or a token in the query); the failing line, whether the
// receiver answered 503 or could not be reached, names only its scheme and
// host.
func TestWebhookSecretNotLogged(t *testing.T) {
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(down.Close)
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close() // nothing listens there any more: a transport error
	for name, base := range map[string]string{"503": down.URL, "unreachable": gone.URL} {
		t.Run(name, func(t *testing.T) {
			var logs strings.Builder
			var mu sync.Mutex
			ms := metrics.NewSet()
			o := fastOptions(ms)
			o.MaxAttempts = 1
			o.Logger = slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))
			w, err := NewWebhook(context.Background(), base+"/services/T0/B0/S3CRETPATH?token=s3cretquery", o)
			if err != nil {
				t.Fatal(err)
			}
			w.Notify(context.Background(), []alerting.Alert{firing("P99OverBaseline", "a")})
			waitCounts(t, ms, "webhook", 0, 1, 0)
			w.Close() //nolint:errcheck // the one alert failed, as wanted
			mu.Lock()
			defer mu.Unlock()
			out := logs.String()
			if !strings.Contains(out, "failing") || !strings.Contains(out, strings.TrimPrefix(base, "http://")) {
				t.Fatalf("want a failing line naming the host, logged:\n%s", out)
			}
			if strings.Contains(out, "S3CRETPATH") || strings.Contains(out, "s3cretquery") {
				t.Errorf("the webhook's secret is in the logs:\n%s", out)
			}
		})
	}
}
