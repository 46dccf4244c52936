package windowstats

import "math"

// Welford is a running count, mean and sum of squared deviations (M2),
// updated one value at a time with Welford's recurrence and merged with
// Chan, Golub and LeVeque's pairwise formula. Unlike the textbook
// Σx²−(Σx)²/n it does not cancel catastrophically when the spread is small
// against the mean, which is the usual shape of latencies.
//
//	add x:   n' = n+1;  δ = x−mean;  mean' = mean + δ/n';  M2' = M2 + δ·(x−mean')
//	merge:   n = na+nb; δ = mb−ma;   mean = ma + δ·nb/n;   M2 = M2a + M2b + δ²·na·nb/n
type Welford struct {
	N    int64   `json:"n"`
	Mean float64 `json:"mean"`
	M2   float64 `json:"m2"`
}

// Add counts x.
func (w *Welford) Add(x float64) {
	w.N++
	d := x - w.Mean
	w.Mean += d / float64(w.N)
	w.M2 += d * (x - w.Mean)
}

// Merge adds o's values to w.
func (w *Welford) Merge(o Welford) {
	if o.N == 0 {
		return
	}
	if w.N == 0 {
		*w = o
		return
	}
	n := w.N + o.N
	na, nb, fn := float64(w.N), float64(o.N), float64(n)
	d := o.Mean - w.Mean
	w.Mean += d * nb / fn
	w.M2 += o.M2 + d*d*na*nb/fn
	w.N = n
}

// Variance returns the sample variance M2/(n−1), 0 under two values.
func (w Welford) Variance() float64 {
	if w.N < 2 {
		return 0
	}
	return max(w.M2, 0) / float64(w.N-1)
}

// StdDev returns the sample standard deviation.
func (w Welford) StdDev() float64 { return math.Sqrt(w.Variance()) }
