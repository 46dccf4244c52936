package modelserver

import (
	"context"
	"math"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

func TestSpikeAt(t *testing.T) {
	f := Faults{SpikeEvery: 10 * time.Second, SpikeFor: 2 * time.Second, SpikeExtra: time.Second}
	tests := []struct {
		name    string
		f       Faults
		elapsed time.Duration
		want    bool
	}{
		{"healthy at start", f, 0, false},
		{"before first", f, 9 * time.Second, false},
		{"first window", f, 10 * time.Second, true},
		{"inside first", f, 11 * time.Second, true},
		{"after first", f, 12 * time.Second, false},
		{"second window", f, 21 * time.Second, true},
		{"disabled", Faults{}, 10 * time.Second, false},
		{"no extra", Faults{SpikeEvery: time.Second, SpikeFor: time.Second}, 1500 * time.Millisecond, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.f.spikeAt(tc.elapsed); got != tc.want {
				t.Errorf("spikeAt(%v) = %v, want %v", tc.elapsed, got, tc.want)
			}
		})
	}
}

// inferStage makes one gRPC call and returns its reported infer stage.
func inferStage(t *testing.T, ts *testServer) time.Duration {
	t.Helper()
	var trailer metadata.MD
	if _, err := ts.client.ModelInfer(context.Background(), mlpRequestRaw(1), grpc.Trailer(&trailer)); err != nil {
		t.Fatalf("ModelInfer: %v", err)
	}
	return checkServerTiming(t, trailer.Get(serverTimingKey)[0])["infer"]
}

// TestSpikeWindow: calls inside a spike window get its extra latency,
// calls outside do not. Each call is bracketed by the server clock's
// readings before and after it; where the whole bracket lies on one side
// of every window edge, the server decided in a known state and the infer
// stage must agree. A loaded machine's stall only makes a bracket
// undecidable (the next call is tried), never wrong; the extra is long
// enough that no stall inside a healthy inference passes for it.
func TestSpikeWindow(t *testing.T) {
	const extra = 300 * time.Millisecond
	f := Faults{SpikeEvery: 400 * time.Millisecond, SpikeFor: 150 * time.Millisecond, SpikeExtra: extra}
	ts := start(t, Options{Faults: f})
	seen := map[bool]int{}
	for deadline := time.Now().Add(30 * time.Second); seen[true] == 0 || seen[false] < 2; {
		if time.Now().After(deadline) {
			t.Fatalf("no decidable call in and out of a window in 30 s: %v", seen)
		}
		before := time.Since(ts.s.started)
		d := inferStage(t, ts)
		after := time.Since(ts.s.started)
		time.Sleep(70 * time.Millisecond) // the next call elsewhere in the 400 ms cycle
		// The server decided at some point after before and, if it added
		// the extra, at least extra before after. Where the state is the
		// same at both ends of that span and the span is shorter than any
		// state lasts (150 ms on, 250 off), it held throughout.
		got := d >= extra
		last := after
		if got {
			last -= extra
		}
		spike := f.spikeAt(before)
		if f.spikeAt(last) != spike || last-before >= f.SpikeFor {
			continue
		}
		if got != spike {
			t.Errorf("call at %v–%v: infer stage %v, spike expected %v", before, after, d, spike)
		}
		seen[spike]++
	}
}

func TestSetExtraLatency(t *testing.T) {
	ts := start(t, Options{})
	tests := []struct {
		name  string
		extra time.Duration
		min   time.Duration
		max   time.Duration
	}{
		// 250 ms: a loaded machine may stall a healthy inference for tens
		// of milliseconds, never for an extra this long.
		{"step up", 250 * time.Millisecond, 250 * time.Millisecond, 5 * time.Second},
		{"step down", 0, 0, 250 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ts.s.SetExtraLatency(tc.extra)
			if d := inferStage(t, ts); d < tc.min || d >= tc.max {
				t.Errorf("infer stage %v, want in [%v,%v)", d, tc.min, tc.max)
			}
		})
	}
}

func TestSetDegradationRaisesMeanAndSpread(t *testing.T) {
	s := New(Options{Workers: 64})
	defer s.Close()
	measure := func() (mean, sd, median, iqr float64) {
		var xs []float64
		for i := 0; i < 60; i++ {
			st := time.Now()
			if err := s.injectFaults(context.Background()); err != nil {
				t.Fatal(err)
			}
			xs = append(xs, float64(time.Since(st))/float64(time.Millisecond))
		}
		for _, x := range xs {
			mean += x
		}
		mean /= float64(len(xs))
		for _, x := range xs {
			sd += (x - mean) * (x - mean)
		}
		slices.Sort(xs)
		q := func(p float64) float64 { return xs[int(p*float64(len(xs)-1))] }
		return mean, math.Sqrt(sd / float64(len(xs)-1)), q(0.5), q(0.75) - q(0.25)
	}
	m0, sd0, med0, iqr0 := measure()
	s.SetDegradation(4 * time.Millisecond)
	m1, sd1, med1, iqr1 := measure()
	t.Logf("degradation moved mean %.2f→%.2f ms, std-dev %.2f→%.2f ms", m0, m1, sd0, sd1)
	// Judged on the median and the interquartile range, which a few
	// samples stalled by a loaded machine do not move (one 50 ms stall
	// moves the std-dev of 60 samples by 6 ms): an exponential delay of
	// mean 4 ms has median 2.8 ms and IQR 4.4 ms, healthy calls ~0.
	if med1 < med0+1 || iqr1 < iqr0+1.5 {
		t.Fatalf("degradation moved median %.2f→%.2f ms, IQR %.2f→%.2f ms", med0, med1, iqr0, iqr1)
	}
}
