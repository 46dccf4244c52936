package proxy

import (
	"math"
	"testing"
	"time"
)

func TestParseGRPCTimeout(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"100m", 100 * time.Millisecond, true},
		{"5S", 5 * time.Second, true},
		{"1H", time.Hour, true},
		{"99999999M", 99999999 * time.Minute, true},
		// The largest hours the spec's 8 digits allow do not fit a
		// Duration: an overflow read as a past deadline failed the call
		// at once. grpc-go's server clamps; so does the proxy.
		{"2562048H", math.MaxInt64, true},
		{"99999999H", math.MaxInt64, true},
		{"2562047H", 2562047 * time.Hour, true},
		{"", 0, false},
		{"5", 0, false},
		{"123456789S", 0, false},
		{"-1S", 0, false},
		{"5x", 0, false},
	} {
		got, ok := parseGRPCTimeout(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseGRPCTimeout(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}
