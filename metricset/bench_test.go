package metricset

import (
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/record"
)

// steadyCall is a typical fully measured call of a model already seen.
func steadyCall() *record.Call {
	c := grpcCall("resnet50", "1", "OK", 12*time.Millisecond)
	c.Decode, c.DecodeRan = 80*time.Microsecond, true
	c.BatchSize, c.InputCount, c.OutputCount = 8, 1, 2
	c.Stages = []record.Stage{{Name: "preprocess", Duration: time.Millisecond}, {Name: "infer", Duration: 9 * time.Millisecond}}
	c.ClientRTT, c.UpstreamRTT = 150*time.Microsecond, 40*time.Microsecond
	return c
}

func TestObserveDoesNotAllocate(t *testing.T) {
	s := New(Options{})
	c := steadyCall()
	s.Observe(c) // first sight builds the labels and handles
	if n := testing.AllocsPerRun(200, func() { s.Observe(c) }); n != 0 {
		t.Errorf("Observe allocates %v times per call in steady state, want 0", n)
	}
}

func BenchmarkObserve(b *testing.B) {
	s := New(Options{})
	c := steadyCall()
	s.Observe(c)
	b.ReportAllocs()
	for b.Loop() {
		s.Observe(c)
	}
}

func BenchmarkObserveParallel(b *testing.B) {
	s := New(Options{})
	c := steadyCall()
	s.Observe(c)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			s.Observe(c)
		}
	})
}
