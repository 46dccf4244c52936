package loadgen

import (
	"context"
	"testing"
	"time"
)

// TestRunStop: closing Stop ends the schedule and lets the calls in flight
// finish, so none of them counts as failed (ctx's end cancels them).
func TestRunStop(t *testing.T) {
	srv, g, _ := serve(t)
	srv.SetExtraLatency(20 * time.Millisecond)
	stop := make(chan struct{})
	results := 0
	done := make(chan struct{})
	var s Summary
	var err error
	go func() {
		defer close(done)
		s, err = Run(context.Background(), Options{QPS: 200, Stop: stop,
			Targets: []Target{{Protocol: ProtocolGRPC, Addr: g, Model: ModelMLP}},
			OnResult: func(Result) {
				if results++; results == 20 {
					close(stop)
				}
			}})
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run still running 30s in, Stop closed after 20 results")
	}
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if s.Failed != 0 || s.OK != s.Sent || s.Sent < 20 {
		t.Errorf("summary %+v; want the calls in flight at Stop finished OK", s)
	}
}

// TestRunOnLate: each due call skipped because MaxInFlight calls are in
// flight is reported as it happens, so a live view (the demo's header) can
// say the offered rate is not what reaches the server; only the final
// Summary counted them.
func TestRunOnLate(t *testing.T) {
	srv, g, _ := serve(t)
	srv.SetExtraLatency(30 * time.Millisecond)
	late := 0
	s, err := Run(context.Background(), Options{
		QPS: 100, Duration: 500 * time.Millisecond, MaxInFlight: 1,
		Targets: []Target{{Protocol: ProtocolGRPC, Addr: g, Model: ModelMLP}},
		OnLate:  func() { late++ },
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if late == 0 || late != s.Late {
		t.Errorf("OnLate called %d times, summary late %d", late, s.Late)
	}
}
