package inferapi

import "math"

// BatchSize is a call's batch size as its first tensor's shape tells it: the
// leading dimension, 0 (unknown) for a scalar, a dynamic (-1) dimension or a
// value no batch could have.
func BatchSize(shape []int64) int {
	if len(shape) == 0 || shape[0] <= 0 || shape[0] > math.MaxInt32 {
		return 0
	}
	return int(shape[0])
}
