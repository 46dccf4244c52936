package sampling

import (
	"time"

	"testing"

	"github.com/VictoriaMetrics/metrics"
)

// benchIDs are trace ids whose randomness is below any threshold of p < 0.99
// (top randomness byte zero), so a root at p = 0.1 is not sampled.
func benchIDs(low bool) [][16]byte {
	ids := newTraceIDs(50)
	out := make([][16]byte, 1024)
	for i := range out {
		out[i] = ids.next()
		if low {
			out[i][9] = 0
		} else {
			out[i][9] = 0xff
		}
	}
	return out
}

func benchSampler(b *testing.B, set *metrics.Set) (*Sampler, Key) {
	s := newSampler(b, Config{Metrics: set})
	k := Key{Route: "/inference.GRPCInferenceService/ModelInfer", Model: "resnet50"}
	settle(s, k, 1000, newTraceIDs(51)) // p = 0.1
	return s, k
}

// BenchmarkHead measures one head decision. The not-sampled root path is
// the one every unsampled call takes: the target is ≤ 200 ns, 0 allocs.
func BenchmarkHead(b *testing.B) {
	cases := []struct {
		name    string
		metrics bool
		low     bool
		parent  Parent
	}{
		{"root-not-sampled", false, true, Parent{}},
		{"root-not-sampled-metrics", true, true, Parent{}},
		{"root-sampled-metrics", true, false, Parent{}},
		{"parent-not-sampled-tracestate", true, true, Parent{Present: true, TraceState: "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"}},
		{"parent-sampled-th", true, false, Parent{Present: true, Sampled: true, TraceState: "rojo=00f067aa0ba902b7,ot=th:e666"}},
		{"parent-not-sampled-th-erased", true, true, Parent{Present: true, TraceState: "rojo=00f067aa0ba902b7,ot=th:e666;rv:00f067aa0ba902"}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			var set *metrics.Set
			if c.metrics {
				set = metrics.NewSet()
			}
			s, k := benchSampler(b, set)
			ids := benchIDs(c.low)
			if d := s.Head(k, ids[0], c.parent); d.Sampled != (!c.low || c.parent.Sampled) {
				b.Fatalf("setup: decision %+v", d)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				s.Head(k, ids[i&1023], c.parent)
				i++
			}
		})
	}
}

// BenchmarkHeadParallel: the not-sampled root path from all CPUs on one key
// (the shared per-key counter is the contended cache line).
func BenchmarkHeadParallel(b *testing.B) {
	s, k := benchSampler(b, metrics.NewSet())
	ids := benchIDs(true)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			s.Head(k, ids[i&1023], Parent{})
			i++
		}
	})
}

func BenchmarkTail(b *testing.B) {
	s, k := benchSampler(b, metrics.NewSet())
	for i := range 1000 {
		s.ObserveLatency(k.Model, time.Duration(1e6+1e3*i))
	}
	b.ReportAllocs()
	for b.Loop() {
		s.Tail(k, k.Model, time.Millisecond, false, false)
	}
}

func BenchmarkObserveLatency(b *testing.B) {
	s, k := benchSampler(b, nil)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		s.ObserveLatency(k.Model, time.Duration(1e6+1e3*(i&1023)))
		i++
	}
}
