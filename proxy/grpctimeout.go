package proxy

import (
	"math"
	"strconv"
	"time"
)

// parseGRPCTimeout reads a grpc-timeout header ("100m", "5S", "1H") so the
// proxy gives up on the upstream when the client's deadline passes and can
// tell a timeout from a cancel.
func parseGRPCTimeout(v string) (time.Duration, bool) {
	if len(v) < 2 || len(v) > 9 {
		return 0, false
	}
	n, err := strconv.ParseInt(v[:len(v)-1], 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	var unit time.Duration
	switch v[len(v)-1] {
	case 'H':
		unit = time.Hour
	case 'M':
		unit = time.Minute
	case 'S':
		unit = time.Second
	case 'm':
		unit = time.Millisecond
	case 'u':
		unit = time.Microsecond
	case 'n':
		unit = time.Nanosecond
	default:
		return 0, false
	}
	if n > math.MaxInt64/int64(unit) {
		// Eight digits of hours pass a Duration's range; wrapped, the
		// deadline would lie in the past. Clamped, as grpc-go's server does.
		return math.MaxInt64, true
	}
	return time.Duration(n) * unit, true
}
