package alerting

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A condition raised by its owner goes through the same path as the rules'
// alerts: notified when it starts, re-sent while firing, listed by Alerts,
// notified and kept as resolved when cleared.
func TestSetCondition(t *testing.T) {
	rec := &recorder{}
	e, err := NewEngine(Options{Notifiers: []Notifier{rec}, Labels: map[string]string{"instance": "i1"}, Resend: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	t0 := time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
	labels := map[string]string{"upstream": "127.0.0.1:8000"}
	steps := []struct {
		name       string
		firing     bool
		at         time.Duration
		tick       bool // a Tick at that time (re-sends)
		wantSent   []State
		wantActive int
		wantTTL    string
	}{
		{"raised", true, 0, false, []State{StateFiring}, 1, "3h"},
		{"raised again: refreshed, not re-notified", true, 10 * time.Second, false, nil, 1, "2h"},
		{"re-sent after resend", false, 0, true, []State{StateFiring}, 1, "2h"},
		{"cleared", false, 2 * time.Minute, false, []State{StateResolved}, 0, "1h"},
		{"cleared again: nothing", false, 3 * time.Minute, false, nil, 0, ""},
	}
	for _, st := range steps {
		n := len(rec.sent)
		if st.tick {
			e.Tick(ctx, t0.Add(90*time.Second))
		} else {
			ttl := map[string]string{"time_to_exhaustion": st.wantTTL}
			if st.wantTTL == "" {
				ttl = nil
			}
			e.SetCondition(ctx, RuleMemoryLeakSuspected, labels, ttl, st.firing, t0.Add(st.at))
		}
		var got []State
		for _, s := range rec.sent[n:] {
			if s.alert.Labels["alertname"] != RuleMemoryLeakSuspected || s.alert.Labels["instance"] != "i1" || s.alert.Labels["upstream"] != labels["upstream"] {
				t.Errorf("%s: labels %v", st.name, s.alert.Labels)
			}
			got = append(got, s.alert.State)
		}
		if len(got) != len(st.wantSent) || (len(got) > 0 && got[0] != st.wantSent[0]) {
			t.Errorf("%s: sent %v, want %v", st.name, got, st.wantSent)
		}
		active := 0
		for _, a := range e.Alerts() {
			if a.State == StateFiring {
				active++
				if a.Annotations["time_to_exhaustion"] != st.wantTTL {
					t.Errorf("%s: annotations %v, want time_to_exhaustion %s", st.name, a.Annotations, st.wantTTL)
				}
			}
		}
		if active != st.wantActive {
			t.Errorf("%s: %d firing, want %d", st.name, active, st.wantActive)
		}
	}
	all := e.Alerts()
	if len(all) != 1 || all[0].State != StateResolved || !all[0].EndsAt.Equal(t0.Add(2*time.Minute)) {
		t.Errorf("after clearing, Alerts = %+v; want the resolved episode", all)
	}
}

// gate is a notifier that, once armed, holds the first notification
// carrying a firing alert until released: a slow first notifier (a webhook
// before the Alertmanager client) widens the moment between the engine
// deciding a re-send and the later notifiers getting it.
type gate struct {
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (g *gate) Notify(_ context.Context, alerts []Alert) {
	if !g.armed.Load() {
		return
	}
	for _, a := range alerts {
		if a.State == StateFiring {
			g.once.Do(func() {
				close(g.entered)
				<-g.release
			})
			return
		}
	}
}

// TestConditionResolveAfterConcurrentResend: the leak watcher clears its
// condition on its own goroutine while Tick is re-sending it. Every notifier
// must get the re-send before the resolve, never after: a firing after the
// resolve re-opens the episode at Alertmanager for its resolve timeout, and
// a webhook receiver's last word on it would be firing.
func TestConditionResolveAfterConcurrentResend(t *testing.T) {
	g := &gate{entered: make(chan struct{}), release: make(chan struct{})}
	rec := &recorder{}
	e, err := NewEngine(Options{Notifiers: []Notifier{g, rec}, Resend: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	t0 := time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
	labels := map[string]string{"upstream": "127.0.0.1:8000"}
	e.SetCondition(ctx, RuleMemoryLeakSuspected, labels, nil, true, t0)

	g.armed.Store(true)
	start := len(rec.sent)
	ticked := make(chan struct{})
	go func() {
		defer close(ticked)
		e.Tick(ctx, t0.Add(2*time.Minute)) // the re-send is due
	}()
	<-g.entered
	cleared := make(chan struct{})
	go func() {
		defer close(cleared)
		e.SetCondition(ctx, RuleMemoryLeakSuspected, labels, nil, false, t0.Add(2*time.Minute))
	}()
	select {
	case <-cleared:
	case <-time.After(200 * time.Millisecond): // it may wait for the re-send to be handed over
	}
	close(g.release)
	<-ticked
	<-cleared

	rec.mu.Lock()
	defer rec.mu.Unlock()
	var got []State
	for _, s := range rec.sent[start:] {
		got = append(got, s.alert.State)
	}
	if len(got) != 2 || got[0] != StateFiring || got[1] != StateResolved {
		t.Errorf("second notifier got %v, want [firing resolved]", got)
	}
}
