package proxy

import (
	"testing"
	"time"
)

// TestNearDeadline: a call broken within max(5 ms, a tenth of its
// grpc-timeout) of its deadline, or after it, timed out; earlier it did not.
func TestNearDeadline(t *testing.T) {
	for _, tc := range []struct {
		name      string
		timeout   time.Duration
		remaining time.Duration
		want      bool
	}{
		{"no deadline", 0, 0, false},
		{"past", time.Second, -time.Millisecond, true},
		{"last tenth of 1s", time.Second, 80 * time.Millisecond, true},
		{"before the last tenth", time.Second, 150 * time.Millisecond, false},
		{"short timeout: 5ms floor", 20 * time.Millisecond, 4 * time.Millisecond, true},
		{"short timeout: outside the floor", 20 * time.Millisecond, 10 * time.Millisecond, false},
		{"long timeout, cancelled early", time.Minute, 30 * time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var deadline time.Time
			if tc.timeout > 0 {
				deadline = time.Now().Add(tc.remaining)
			}
			if got := nearDeadline(deadline, tc.timeout); got != tc.want {
				t.Fatalf("nearDeadline(%v left of %v) = %v, want %v", tc.remaining, tc.timeout, got, tc.want)
			}
		})
	}
}
