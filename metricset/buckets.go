package metricset

import (
	"math"
	"strconv"
)

// Duration buckets: 50 µs · 2^(i/3) for i = 0..61, i.e. 50 µs to about 66 s,
// each bound about 1.26 times the previous. Three buckets per doubling keep
// histogram_quantile within 26.6% of the truth anywhere in that range, which
// covers a cached embedding lookup as well as a long generation. Bounds are
// rounded to three significant digits so `le` labels stay readable; they
// are computed, not configured, so every sidecar exposes the same ones and
// buckets aggregate across pods.
var durationBuckets = func() []float64 {
	const (
		start       = 50e-6
		perDoubling = 3
		count       = 62
	)
	b := make([]float64, count)
	for i := range b {
		b[i] = round3(start * math.Pow(2, float64(i)/perDoubling))
	}
	return b
}()

// batchBuckets are powers of two from 1 to 1024: batch sizes are usually
// powers of two, so each lands on a bound exactly.
var batchBuckets = func() []float64 {
	b := make([]float64, 11)
	for i := range b {
		b[i] = float64(int(1) << i)
	}
	return b
}()

// round3 rounds to three significant digits via the decimal form, so the
// float prints back as that short decimal in `le`.
func round3(v float64) float64 {
	r, err := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 3, 64), 64)
	if err != nil {
		panic(err) // FormatFloat's output always parses
	}
	return r
}
