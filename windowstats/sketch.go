package windowstats

import (
	"fmt"
	"math"
)

// minIndexable is the smallest value a Sketch tells apart from zero: latencies
// are whole nanoseconds, so anything below 1 ns is a zero.
const minIndexable = 1e-9

// Sketch is a DDSketch-style quantile sketch: values fall into buckets whose
// bounds grow geometrically by at most γ = (1+α)/(1−α), so that the
// representative of a bucket (the harmonic mean of its bounds) is within a
// relative error α of every value in it. A quantile is the representative of
// the bucket that holds the exact quantile's value, hence within α of it.
//
// Bucket index. Instead of ceil(log_γ x), which costs a logarithm per value,
// the index is ceil(c·A(x)) with A(x) = e + (m−1) for x = m·2^e, m in [1,2):
// the exponent and mantissa bits of the float, linearly interpolated between
// powers of two. A is continuous and increasing, and d(ln x)/dA = 1/m ≤ 1, so
// a bucket of width 1/c in A spans at most 1/c in ln x; with c = 1/ln γ its
// bounds are within a factor γ, as the guarantee needs. The price is up to
// 1/ln 2 ≈ 1.44× more buckets than the exact logarithmic mapping.
//
// The store is dense over the indices seen and holds at most maxBuckets
// buckets. Past that the lowest buckets are collapsed into one: the
// guarantee then still holds for every quantile whose value lies above the
// collapsed range (latency alerts look at the top, never at the bottom).
// Values under 1 ns (zero, negative) are counted apart and reported as 0.
//
// Two sketches with the same α merge exactly by adding bucket counts, which
// is what makes window views mergeable. A Sketch is not safe for concurrent
// use; its zero value is not usable, make one with NewSketch.
type Sketch struct {
	alpha      float64
	mult       float64 // c = 1/ln γ
	maxBuckets int

	counts []uint64 // counts[i] belongs to bucket index offset+i
	offset int
	lo, hi int // lowest and highest index holding a count; lo > hi when none

	zero      uint64 // values below minIndexable
	n         uint64
	min, max  float64
	collapsed bool
}

// NewSketch returns an empty sketch with relative accuracy alpha (0 < alpha
// < 1) holding at most maxBuckets buckets (at least 16).
func NewSketch(alpha float64, maxBuckets int) (*Sketch, error) {
	if !(alpha > 0 && alpha < 1) {
		return nil, fmt.Errorf("windowstats: sketch relative accuracy %v is not in (0, 1)", alpha)
	}
	if maxBuckets < 16 {
		return nil, fmt.Errorf("windowstats: sketch bucket bound %d is under 16", maxBuckets)
	}
	gamma := (1 + alpha) / (1 - alpha)
	s := &Sketch{alpha: alpha, mult: 1 / math.Log(gamma), maxBuckets: maxBuckets, lo: 1, hi: 0}
	s.Reset()
	return s, nil
}

func mustSketch(alpha float64, maxBuckets int) *Sketch {
	s, err := NewSketch(alpha, maxBuckets)
	if err != nil {
		panic(err) // options are validated before sketches are made
	}
	return s
}

// RelativeAccuracy returns α: every quantile is within a factor (1±α) of the
// exact one, unless collapsing reached it (see Collapsed).
func (s *Sketch) RelativeAccuracy() float64 { return s.alpha }

// Count returns how many values were added.
func (s *Sketch) Count() uint64 { return s.n }

// Collapsed reports whether the bucket bound forced the lowest buckets to be
// merged, which voids the guarantee for quantiles in that lowest range.
func (s *Sketch) Collapsed() bool { return s.collapsed }

// Reset empties the sketch and keeps its storage.
func (s *Sketch) Reset() {
	if s.lo <= s.hi {
		clear(s.counts[s.lo-s.offset : s.hi-s.offset+1])
	}
	s.lo, s.hi = math.MaxInt, math.MinInt
	s.zero, s.n = 0, 0
	s.min, s.max = math.Inf(1), math.Inf(-1)
	s.collapsed = false
}

// index maps x ≥ minIndexable to its bucket.
func (s *Sketch) index(x float64) int {
	b := math.Float64bits(x)
	e := int((b>>52)&0x7ff) - 1023
	m := float64(b&(1<<52-1)) * (1.0 / (1 << 52))
	return int(math.Ceil((float64(e) + m) * s.mult))
}

// bound returns the upper bound of bucket i (the lower one is bound(i-1)).
func (s *Sketch) bound(i int) float64 {
	a := float64(i) / s.mult
	e := math.Floor(a)
	return math.Ldexp(1+(a-e), int(e))
}

// value returns the representative of bucket i: the harmonic mean of its
// bounds, within α of both.
func (s *Sketch) value(i int) float64 {
	lo, hi := s.bound(i-1), s.bound(i)
	return 2 * lo * hi / (lo + hi)
}

// Add counts x.
func (s *Sketch) Add(x float64) {
	s.n++
	if x < s.min {
		s.min = x
	}
	if x > s.max {
		s.max = x
	}
	if !(x >= minIndexable) { // also NaN
		s.zero++
		return
	}
	s.addIndex(s.index(x), 1)
}

func (s *Sketch) addIndex(i int, k uint64) {
	if i < s.lo || i > s.hi {
		i = s.extend(i)
	}
	s.counts[i-s.offset] += k
}

// extend makes room for index i, collapsing the lowest buckets when the
// range would exceed maxBuckets, and returns the index to count i under.
func (s *Sketch) extend(i int) int {
	lo, hi := min(s.lo, i), max(s.hi, i)
	if hi-lo+1 > s.maxBuckets {
		if i == lo {
			// Below a range already as wide as allowed: into the lowest bucket.
			s.collapsed = true
			return s.lo
		}
		newLo := hi - s.maxBuckets + 1
		if s.lo <= s.hi && s.lo < newLo {
			var folded uint64
			for j := s.lo; j < newLo && j <= s.hi; j++ {
				folded += s.counts[j-s.offset]
				s.counts[j-s.offset] = 0
			}
			s.lo = newLo
			s.ensure(newLo, hi)
			s.counts[newLo-s.offset] += folded
			s.collapsed = true
		}
		lo = newLo
	}
	s.ensure(lo, hi)
	s.lo, s.hi = lo, hi
	return i
}

// ensure grows the dense store to cover [lo, hi], which must hold every
// counted bucket. Storage only ever grows, so a reused sketch stops
// allocating once it has seen its usual range.
func (s *Sketch) ensure(lo, hi int) {
	if lo >= s.offset && hi < s.offset+len(s.counts) {
		return
	}
	// Slack on both sides so that a drifting range does not copy on every
	// new bucket; the store stays within maxBuckets+64 entries.
	width := hi - lo + 1
	slack := min(max(32, width/2), (s.maxBuckets+64-width)/2)
	counts := make([]uint64, width+2*slack)
	nlo := lo - slack
	if s.lo <= s.hi {
		from, to := max(s.lo, lo), min(s.hi, hi)
		if from <= to {
			copy(counts[from-nlo:], s.counts[from-s.offset:to-s.offset+1])
		}
	}
	s.counts, s.offset = counts, nlo
}

// Merge adds o's values to s. Both must have the same relative accuracy.
func (s *Sketch) Merge(o *Sketch) error {
	if o.mult != s.mult {
		return fmt.Errorf("windowstats: merging a sketch of accuracy %v into one of %v", o.alpha, s.alpha)
	}
	if o.n == 0 {
		return nil
	}
	s.n += o.n
	s.zero += o.zero
	s.min, s.max = min(s.min, o.min), max(s.max, o.max)
	s.collapsed = s.collapsed || o.collapsed
	if o.lo > o.hi {
		return nil
	}
	// Highest first, so that a collapse folds o's own lowest buckets too.
	for j := o.hi; j >= o.lo; j-- {
		if k := o.counts[j-o.offset]; k > 0 {
			s.addIndex(j, k)
		}
	}
	return nil
}

// Quantile returns the q-quantile (0 ≤ q ≤ 1): the value of rank
// floor(q·(n−1)) among the n values in ascending order, within relative
// error α. It returns 0 for an empty sketch.
func (s *Sketch) Quantile(q float64) float64 {
	var out [1]float64
	s.Quantiles([]float64{q}, out[:])
	return out[0]
}

// Quantiles fills out[i] with the qs[i]-quantile in one pass; qs must be
// ascending.
func (s *Sketch) Quantiles(qs, out []float64) {
	if s.n == 0 {
		clear(out[:len(qs)])
		return
	}
	k := 0
	seen := s.zero
	for ; k < len(qs) && rank(qs[k], s.n) < seen; k++ {
		out[k] = min(max(0, s.min), s.max) // the zero bucket: values below 1 ns
	}
	for j := s.lo; j <= s.hi && k < len(qs); j++ {
		seen += s.counts[j-s.offset]
		for ; k < len(qs) && rank(qs[k], s.n) < seen; k++ {
			// Clamping to the exact extremes only moves the answer towards
			// the true value, which lies between them.
			out[k] = min(max(s.value(j), s.min), s.max)
		}
	}
	for ; k < len(qs); k++ {
		out[k] = s.max
	}
}

func rank(q float64, n uint64) uint64 {
	q = min(max(q, 0), 1)
	return uint64(q * float64(n-1))
}
