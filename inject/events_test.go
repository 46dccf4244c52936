package inject

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/VictoriaMetrics/metrics"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestRefusedEvent: what an Event regards and says, for a named pod, a pod
// a controller creates (no name yet at admission) and an overlong reason.
func TestRefusedEvent(t *testing.T) {
	ctrl := true
	now := time.Date(2026, 12, 3, 22, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name            string
		pod             metav1.ObjectMeta
		reason          string
		regard, genName string // genName: the Event's name before the time
		notePrefix      string
	}{
		{"named", metav1.ObjectMeta{Name: "custom"}, "no ports", "Pod/custom", "custom.", "inferwatch sidecar not injected into pod custom: no ports"},
		{"owned", metav1.ObjectMeta{GenerateName: "web-6d8b9-", OwnerReferences: []metav1.OwnerReference{
			{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "not-controller"},
			{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-6d8b9", UID: "u1", Controller: &ctrl}}},
			"no ports", "ReplicaSet/web-6d8b9", "web-6d8b9.", "inferwatch sidecar not injected into pod web-6d8b9-*: no ports"},
		{"generated, no owner", metav1.ObjectMeta{GenerateName: "job-"}, "x", "Pod/", "job.", "inferwatch sidecar not injected into pod job-*: x"},
		{"long reason", metav1.ObjectMeta{Name: "p"}, strings.Repeat("r", 2000), "Pod/p", "p.", "inferwatch sidecar not injected into pod p: rrr"},
		// Cut where a two-byte rune straddles the limit: no half rune.
		{"long reason, cut in a rune", metav1.ObjectMeta{Name: "p"}, "rr" + strings.Repeat("é", 1000), "Pod/p", "p.", "inferwatch sidecar not injected into pod p: rré"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := refusedEvent("models", &tc.pod, tc.reason, "iw-0", now)
			if got := ev.Regarding.Kind + "/" + ev.Regarding.Name; got != tc.regard || ev.Regarding.Namespace != "models" {
				t.Errorf("regards %s in %q, want %s in models", got, ev.Regarding.Namespace, tc.regard)
			}
			if want := fmt.Sprintf("%s%x", tc.genName, now.UnixNano()); ev.Name != want || ev.Namespace != "models" {
				t.Errorf("event %q in %q, want %q in models", ev.Name, ev.Namespace, want)
			}
			if !strings.HasPrefix(ev.Note, tc.notePrefix) || len(ev.Note) > noteLimit || !utf8.ValidString(ev.Note) {
				t.Errorf("note %.80q (%d bytes), want prefix %q and at most %d bytes", ev.Note, len(ev.Note), tc.notePrefix, noteLimit)
			}
			if ev.Type != "Warning" || ev.Reason != EventReason || ev.Action == "" || ev.ReportingController == "" || ev.ReportingInstance != "iw-0" || !ev.EventTime.Time.Equal(now) {
				t.Errorf("event fields %+v", ev)
			}
		})
	}
}

// TestRefusedNeverBlocks: with nothing posting, Refused fills the queue with
// distinct refusals and then drops (and counts) rather than wait; a repeat
// of a queued refusal takes no place in the queue and is counted instead.
func TestRefusedNeverBlocks(t *testing.T) {
	tok := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tok, []byte("t"), 0o600)
	set := metrics.NewSet()
	e, err := NewEvents(APIServer{URL: "https://127.0.0.1:1", TokenFile: tok}, "iw-0", 0, set, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < eventQueue+5; i++ {
		e.Refused("models", &metav1.ObjectMeta{Name: fmt.Sprintf("p%d", i)}, "why", time.Now())
	}
	for i := 0; i < 10; i++ {
		e.Refused("models", &metav1.ObjectMeta{Name: "p0"}, "why", time.Now())
	}
	for result, want := range map[string]uint64{"dropped": 5, "coalesced": 10} {
		if got := set.GetOrCreateCounter(`inferwatch_injector_events_total{result="` + result + `"}`).Get(); got != want {
			t.Errorf("%s %d, want %d", result, got, want)
		}
	}
	if len(e.queue) != eventQueue {
		t.Errorf("%d Events queued, want %d", len(e.queue), eventQueue)
	}
}

// TestNewEventsRejects names what is wrong with an API configuration.
func TestNewEventsRejects(t *testing.T) {
	tok := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tok, []byte("t"), 0o600)
	for _, tc := range []struct {
		name     string
		api      APIServer
		interval time.Duration
		want     string
	}{
		{"http", APIServer{URL: "http://127.0.0.1:6443", TokenFile: tok}, 0, "kube-api"},
		{"no token", APIServer{URL: "https://127.0.0.1:6443"}, 0, "kube-token-file"},
		{"missing token", APIServer{URL: "https://127.0.0.1:6443", TokenFile: tok + "x"}, 0, "kube-token-file"},
		{"bad CA", APIServer{URL: "https://127.0.0.1:6443", TokenFile: tok, CAFile: tok}, 0, "kube-ca-file"},
		{"negative interval", APIServer{URL: "https://127.0.0.1:6443", TokenFile: tok}, -time.Second, "interval"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewEvents(tc.api, "i", tc.interval, metrics.NewSet(), slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want one containing %q", err, tc.want)
			}
		})
	}
}
