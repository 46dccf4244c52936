package inferapi

import (
	"math"
	"testing"
)

func TestBatchSize(t *testing.T) {
	tests := []struct {
		shape []int64
		want  int
	}{
		{nil, 0},
		{[]int64{8, 3}, 8},
		{[]int64{1}, 1},
		{[]int64{0, 3}, 0},
		{[]int64{-1, 3}, 0},
		{[]int64{math.MaxInt32}, math.MaxInt32},
		{[]int64{math.MaxInt32 + 1}, 0},
	}
	for _, tt := range tests {
		if got := BatchSize(tt.shape); got != tt.want {
			t.Errorf("BatchSize(%v) = %d, want %d", tt.shape, got, tt.want)
		}
	}
}
