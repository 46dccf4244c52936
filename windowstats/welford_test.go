package windowstats

import (
	"math"
	"math/rand/v2"
	"testing"
)

// twoPass is the reference: mean, then the sum of squared deviations.
func twoPass(xs []float64) (mean, variance float64) {
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	var m2 float64
	for _, x := range xs {
		m2 += (x - mean) * (x - mean)
	}
	return mean, m2 / float64(len(xs)-1)
}

func relErr(got, want float64) float64 {
	if want == 0 {
		return math.Abs(got)
	}
	return math.Abs(got-want) / math.Abs(want)
}

func welfordStreams(t *testing.T) []stream {
	r := rand.New(rand.NewPCG(5, 5))
	streams := syntheticStreams(100_000)
	// A large offset with a small spread (1e-6 of it): Σx² − (Σx)²/n loses
	// most digits here (TestNaiveVarianceFails).
	off := make([]float64, 100_000)
	for i := range off {
		off[i] = 1e3 + 1e-3*r.NormFloat64()
	}
	streams = append(streams, stream{"offset", off})
	_, rec := recordedStream(t)
	streams = append(streams, stream{"recorded", rec})
	return append(streams, benchStreams(t, 0)...)
}

func TestWelfordEqualsTwoPass(t *testing.T) {
	for _, st := range welfordStreams(t) {
		var w Welford
		for _, x := range st.xs {
			w.Add(x)
		}
		mean, variance := twoPass(st.xs)
		if w.N != int64(len(st.xs)) {
			t.Fatalf("%s: n %d", st.name, w.N)
		}
		if e := relErr(w.Mean, mean); e > 1e-9 {
			t.Errorf("%s: mean %v two-pass %v (rel %g)", st.name, w.Mean, mean, e)
		}
		if e := relErr(w.Variance(), variance); e > 1e-9 {
			t.Errorf("%s: variance %v two-pass %v (rel %g)", st.name, w.Variance(), variance, e)
		}
	}
}

func TestWelfordMergeEqualsWhole(t *testing.T) {
	for _, st := range welfordStreams(t) {
		var whole, merged, part Welford
		merged.Merge(Welford{}) // empty merges are no-ops
		for i, x := range st.xs {
			whole.Add(x)
			part.Add(x)
			// Uneven chunks, as windows of varying traffic are.
			if i%(1000+i%777) == 0 || i == len(st.xs)-1 {
				merged.Merge(part)
				part = Welford{}
			}
		}
		merged.Merge(Welford{})
		_, variance := twoPass(st.xs)
		if merged.N != whole.N {
			t.Fatalf("%s: n %d vs %d", st.name, merged.N, whole.N)
		}
		if e := relErr(merged.Mean, whole.Mean); e > 1e-9 {
			t.Errorf("%s: merged mean %v whole %v", st.name, merged.Mean, whole.Mean)
		}
		if e := relErr(merged.Variance(), variance); e > 1e-9 {
			t.Errorf("%s: merged variance %v two-pass %v (rel %g)", st.name, merged.Variance(), variance, e)
		}
	}
}

func TestWelfordSmall(t *testing.T) {
	var w Welford
	if w.Variance() != 0 || w.StdDev() != 0 {
		t.Error("empty variance not 0")
	}
	w.Add(3)
	if w.Variance() != 0 || w.Mean != 3 {
		t.Errorf("one value: mean %v variance %v", w.Mean, w.Variance())
	}
	w.Add(5)
	if w.Variance() != 2 || w.Mean != 4 {
		t.Errorf("{3,5}: mean %v variance %v", w.Mean, w.Variance())
	}
}

// The offset stream is a real test: the textbook one-pass formula fails it.
func TestNaiveVarianceFails(t *testing.T) {
	for _, st := range welfordStreams(t) {
		if st.name != "offset" {
			continue
		}
		var s, s2 float64
		for _, x := range st.xs {
			s += x
			s2 += x * x
		}
		n := float64(len(st.xs))
		naive := (s2 - s*s/n) / (n - 1)
		_, variance := twoPass(st.xs)
		if e := relErr(naive, variance); e < 1e-3 {
			t.Errorf("naive variance within %g of two-pass: the stream does not stress Welford", e)
		}
	}
}
