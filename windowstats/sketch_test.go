package windowstats

import (
	"math"
	"math/rand/v2"
	"testing"
)

var quantileGrid = []float64{0, 0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.995, 0.999, 0.9999, 1}

// checkBound asserts every grid quantile of s is within α of the exact one.
func checkBound(t *testing.T, name string, s *Sketch, xs []float64) {
	t.Helper()
	sorted := sortedCopy(xs)
	alpha := s.RelativeAccuracy()
	got := make([]float64, len(quantileGrid))
	s.Quantiles(quantileGrid, got)
	for i, q := range quantileGrid {
		want := exactQuantile(sorted, q)
		if want < minIndexable {
			if got[i] != max(0, sorted[0]) && got[i] != 0 {
				t.Errorf("%s q=%v: got %v for a value below 1 ns", name, q, got[i])
			}
			continue
		}
		// α up to float rounding at bucket bounds.
		if rel := math.Abs(got[i]-want) / want; rel > alpha*(1+1e-9) {
			t.Errorf("%s q=%v: got %v want %v: relative error %.5f > α=%v", name, q, got[i], want, rel, alpha)
		}
		if q1 := s.Quantile(q); q1 != got[i] {
			t.Errorf("%s q=%v: Quantile %v != Quantiles %v", name, q, q1, got[i])
		}
	}
}

func TestSketchRelativeErrorBound(t *testing.T) {
	streams := syntheticStreams(200_000)
	_, rec := recordedStream(t)
	streams = append(streams, stream{"recorded", rec})
	streams = append(streams, benchStreams(t, 0)...)
	for _, alpha := range []float64{0.01, 0.005, 0.02} {
		for _, st := range streams {
			s, err := NewSketch(alpha, 2048)
			if err != nil {
				t.Fatal(err)
			}
			for _, x := range st.xs {
				s.Add(x)
			}
			if s.Collapsed() {
				t.Fatalf("%s: collapsed at 2048 buckets", st.name)
			}
			if s.Count() != uint64(len(st.xs)) {
				t.Fatalf("%s: count %d want %d", st.name, s.Count(), len(st.xs))
			}
			checkBound(t, st.name, s, st.xs)
		}
	}
}

// Every rank of a small stream, not just a grid: the bound holds per value.
func TestSketchEveryRank(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	xs := make([]float64, 3001)
	for i := range xs {
		xs[i] = 0.01 * math.Exp(2*r.NormFloat64())
	}
	s, _ := NewSketch(0.01, 2048)
	for _, x := range xs {
		s.Add(x)
	}
	sorted := sortedCopy(xs)
	for i, want := range sorted[:len(sorted)-1] {
		q := (float64(i) + 0.5) / float64(len(sorted)-1) // rank i, clear of rounding
		got := s.Quantile(q)
		if rel := math.Abs(got-want) / want; rel > 0.01*(1+1e-9) {
			t.Fatalf("rank %d: got %v want %v (%.5f)", i, got, want, rel)
		}
	}
}

func TestSketchMergeEqualsWhole(t *testing.T) {
	for _, st := range append(syntheticStreams(50_000), benchStreams(t, 20_000)...) {
		whole, _ := NewSketch(0.01, 2048)
		merged, _ := NewSketch(0.01, 2048)
		part, _ := NewSketch(0.01, 2048)
		for i, x := range st.xs {
			whole.Add(x)
			part.Add(x)
			if i%4999 == 0 || i == len(st.xs)-1 {
				if err := merged.Merge(part); err != nil {
					t.Fatal(err)
				}
				part.Reset()
			}
		}
		if merged.Count() != whole.Count() || merged.zero != whole.zero || merged.min != whole.min || merged.max != whole.max {
			t.Fatalf("%s: merged count/zero/min/max %d/%d/%v/%v, whole %d/%d/%v/%v", st.name,
				merged.Count(), merged.zero, merged.min, merged.max, whole.Count(), whole.zero, whole.min, whole.max)
		}
		for j := whole.lo; j <= whole.hi; j++ {
			if a, b := merged.counts[j-merged.offset], whole.counts[j-whole.offset]; a != b {
				t.Fatalf("%s: bucket %d: merged %d whole %d", st.name, j, a, b)
			}
		}
		for _, q := range quantileGrid {
			if a, b := merged.Quantile(q), whole.Quantile(q); a != b {
				t.Errorf("%s q=%v: merged %v whole %v", st.name, q, a, b)
			}
		}
	}
}

func TestSketchCollapseKeepsTopQuantiles(t *testing.T) {
	const maxBuckets = 200
	r := rand.New(rand.NewPCG(3, 9))
	xs := make([]float64, 100_000)
	for i := range xs {
		xs[i] = 1e-6 * math.Exp(10*r.Float64()) // ten e-folds: ~500 buckets
	}
	s, _ := NewSketch(0.01, maxBuckets)
	for _, x := range xs {
		s.Add(x)
	}
	if !s.Collapsed() {
		t.Fatal("expected the lowest buckets to collapse")
	}
	if w := s.hi - s.lo + 1; w > maxBuckets {
		t.Fatalf("%d buckets in use, bound %d", w, maxBuckets)
	}
	if len(s.counts) > maxBuckets+64 {
		t.Fatalf("store of %d entries, bound %d", len(s.counts), maxBuckets+64)
	}
	// Quantiles above the collapsed range keep the bound.
	sorted := sortedCopy(xs)
	floor := s.bound(s.lo)
	for _, q := range quantileGrid {
		want := exactQuantile(sorted, q)
		if want <= floor {
			continue
		}
		if rel := math.Abs(s.Quantile(q)-want) / want; rel > 0.01*(1+1e-9) {
			t.Errorf("q=%v: relative error %.5f above the collapsed range", q, rel)
		}
	}
	if s.Quantile(1) != sorted[len(sorted)-1] || s.Quantile(0) < sorted[0] {
		t.Errorf("extremes: %v..%v, want %v..%v", s.Quantile(0), s.Quantile(1), sorted[0], sorted[len(sorted)-1])
	}

	// Merging a collapsed sketch stays bounded too.
	m, _ := NewSketch(0.01, maxBuckets)
	m.Add(1e3)
	if err := m.Merge(s); err != nil {
		t.Fatal(err)
	}
	if w := m.hi - m.lo + 1; w > maxBuckets || !m.Collapsed() || m.Count() != s.Count()+1 {
		t.Fatalf("merged: %d buckets, collapsed %v, count %d", w, m.Collapsed(), m.Count())
	}
}

func TestSketchEdges(t *testing.T) {
	if _, err := NewSketch(0, 100); err == nil {
		t.Error("accuracy 0 accepted")
	}
	if _, err := NewSketch(1, 100); err == nil {
		t.Error("accuracy 1 accepted")
	}
	if _, err := NewSketch(0.01, 8); err == nil {
		t.Error("8 buckets accepted")
	}
	s, _ := NewSketch(0.01, 100)
	if q := s.Quantile(0.99); q != 0 {
		t.Errorf("empty sketch quantile %v", q)
	}
	o, _ := NewSketch(0.02, 100)
	if err := s.Merge(o); err == nil {
		t.Error("merged sketches of different accuracy")
	}
	s.Add(0)
	s.Add(0)
	s.Add(0.5)
	if q := s.Quantile(0.5); q != 0 {
		t.Errorf("median of {0,0,0.5} = %v", q)
	}
	if q := s.Quantile(1); q != 0.5 {
		t.Errorf("max of {0,0,0.5} = %v", q)
	}
	s.Add(math.NaN())
	if q := s.Quantile(1); q != 0.5 {
		t.Errorf("NaN moved the max: %v", q)
	}
}

// The bucket bounds really are within γ of each other, across octaves.
func TestSketchBucketWidth(t *testing.T) {
	for _, alpha := range []float64{0.001, 0.01, 0.05} {
		s, _ := NewSketch(alpha, 2048)
		gamma := (1 + alpha) / (1 - alpha)
		i0 := s.index(1e-6)
		for i := i0; i < i0+int(30*s.mult); i++ {
			lo, hi := s.bound(i-1), s.bound(i)
			if !(hi > lo) || hi/lo > gamma*(1+1e-12) {
				t.Fatalf("α=%v bucket %d: (%v, %v] ratio %v > γ=%v", alpha, i, lo, hi, hi/lo, gamma)
			}
			// Values just inside the bounds map to the bucket, up to
			// rounding (the bound is exact only to ~1e-11 relative).
			if a, b := s.index(hi*(1-1e-9)), s.index(lo*(1+1e-9)); a != i || b != i {
				t.Fatalf("α=%v: bucket %d: inside its bounds maps to %d and %d", alpha, i, b, a)
			}
			if a := s.index(hi * (1 + 1e-9)); a != i+1 {
				t.Fatalf("α=%v: just above bucket %d maps to %d", alpha, i, a)
			}
		}
	}
}

func TestSketchSteadyStateDoesNotAllocate(t *testing.T) {
	s, _ := NewSketch(0.01, 2048)
	r := rand.New(rand.NewPCG(1, 1))
	xs := make([]float64, 10_000)
	for i := range xs {
		xs[i] = 0.02 * math.Exp(r.NormFloat64())
	}
	for _, x := range xs {
		s.Add(x)
	}
	s.Reset()
	i := 0
	if n := testing.AllocsPerRun(5000, func() { s.Add(xs[i%len(xs)]); i++ }); n != 0 {
		t.Errorf("Add allocates %v times after warm-up", n)
	}
}
