package main

import (
	"context"
	"testing"
	"time"
)

// TestScheduleRetriesAFailedRun: a failed run is tried again soon, backing
// off, not a whole period later when the bands it should have renewed have
// run out; after a success the period applies again.
func TestScheduleRetriesAFailedRun(t *testing.T) {
	const period, retry = 2 * time.Second, 20 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	results := []bool{false, false, true, false}
	var at []time.Time
	done := make(chan struct{})
	go func() {
		defer close(done)
		schedule(ctx, period, retry, func() bool {
			at = append(at, time.Now())
			ok := results[len(at)-1]
			if len(at) == len(results) {
				cancel()
			}
			return ok
		})
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("%d runs in 20 s, want %d", len(at), len(results))
	}
	// Timers never fire early, so the lower bounds are exact; the upper ones
	// only tell a retry from a period.
	for i, w := range []struct{ min, max time.Duration }{
		{retry, period / 2},     // after the first failure
		{2 * retry, period / 2}, // doubled after the second
		{period, time.Hour},     // after the success
	} {
		if got := at[i+1].Sub(at[i]); got < w.min || got >= w.max {
			t.Errorf("wait %d: %v, want in [%v, %v)", i, got, w.min, w.max)
		}
	}
}
