package gpu

import (
	"sort"
	"time"
)

// ring holds the last samples of one device, oldest first, overwriting the
// oldest when full. Samples arrive in time order and their intervals do not
// overlap, so a time range is found by binary search.
type ring struct {
	buf  []Sample
	head int // index of the oldest sample
	n    int
}

func newRing(capacity int) *ring { return &ring{buf: make([]Sample, capacity)} }

// at returns the i-th oldest sample.
func (r *ring) at(i int) *Sample { return &r.buf[(r.head+i)%len(r.buf)] }

// last returns the newest sample, or nil.
func (r *ring) last() *Sample {
	if r.n == 0 {
		return nil
	}
	return r.at(r.n - 1)
}

func (r *ring) push(s Sample) {
	if r.n < len(r.buf) {
		r.buf[(r.head+r.n)%len(r.buf)] = s
		r.n++
		return
	}
	r.buf[r.head] = s // overwrite the oldest
	r.head = (r.head + 1) % len(r.buf)
}

// overlap returns the weight of s in [from, to]: the length of
// (s.Start, s.End] ∩ [from, to], zero or negative when they do not overlap.
func overlap(s *Sample, from, to time.Time) time.Duration {
	lo, hi := s.Start, s.End
	if from.After(lo) {
		lo = from
	}
	if to.Before(hi) {
		hi = to
	}
	return hi.Sub(lo)
}

// firstEndingAfter returns the index of the oldest sample ending after t,
// r.n when none does.
func (r *ring) firstEndingAfter(t time.Time) int {
	return sort.Search(r.n, func(i int) bool { return r.at(i).End.After(t) })
}
