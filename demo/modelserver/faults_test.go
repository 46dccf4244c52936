package modelserver

import (
	"context"
	"math"
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

func TestSpikeWindow(t *testing.T) {
	const extra = 60 * time.Millisecond
	ts := start(t, Options{Faults: Faults{SpikeEvery: 400 * time.Millisecond, SpikeFor: 150 * time.Millisecond, SpikeExtra: extra}})
	tests := []struct {
		name  string
		at    time.Duration // since the server started; windows are [400ms,550ms), [800ms,950ms), ...
		spike bool
	}{
		{"before", 100 * time.Millisecond, false},
		{"inside", 420 * time.Millisecond, true},
		{"after", 620 * time.Millisecond, false},
	}
	for _, tc := range tests {
		time.Sleep(time.Until(ts.s.started.Add(tc.at)))
		d := inferStage(t, ts)
		if got := d >= extra; got != tc.spike {
			t.Errorf("%s: infer stage %v, spike expected %v", tc.name, d, tc.spike)
		}
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
		{"step up", 40 * time.Millisecond, 40 * time.Millisecond, time.Second},
		{"step down", 0, 0, 40 * time.Millisecond},
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
	measure := func() (mean, sd float64) {
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
		return mean, math.Sqrt(sd / float64(len(xs)-1))
	}
	m0, sd0 := measure()
	s.SetDegradation(4 * time.Millisecond)
	m1, sd1 := measure()
	if m1 < m0+2 || sd1 < sd0+1.5 {
		t.Fatalf("degradation moved mean %.2f→%.2f ms, std-dev %.2f→%.2f ms", m0, m1, sd0, sd1)
	}
}
