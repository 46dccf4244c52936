package windowstats

import (
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/record"
)

// benchCall is a typical fully measured call: all phases and two server
// stages.
func benchCall(start time.Time, total time.Duration) *record.Call {
	return &record.Call{
		Start:        start,
		RequestEnd:   200 * time.Microsecond,
		UpstreamSent: 250 * time.Microsecond,
		FirstByte:    total - 500*time.Microsecond,
		ResponseEnd:  total - 100*time.Microsecond,
		End:          total,
		Decode:       80 * time.Microsecond,
		DecodeRan:    true,
		Egress:       20 * time.Microsecond,
		Protocol:     record.ProtocolGRPC,
		Model:        "resnet50",
		Version:      "1",
		Code:         "OK",
		Stages: []record.Stage{
			{Name: "preprocess", Duration: time.Millisecond},
			{Name: "infer", Duration: total - 3*time.Millisecond},
		},
	}
}

// BenchmarkObserve measures one call into all four statistics (count/QPS and
// EMA sums, sketch quantiles, Welford, the fit's per-window inputs) for the
// total, five phases and two stages, with latencies varying over a range and
// windows closing as simulated time passes (1000 calls per second).
func BenchmarkObserve(b *testing.B) {
	s, err := New(Options{})
	if err != nil {
		b.Fatal(err)
	}
	t0 := time.Unix(1_700_000_000, 0)
	const n = 4096
	calls := make([]*record.Call, n)
	for i := range calls {
		// 5..100 ms, spread like a lognormal's bulk.
		d := 5*time.Millisecond + time.Duration((i*7919)%n)*95*time.Millisecond/n
		calls[i] = benchCall(t0, d)
	}
	// Warm up a minute's windows so storage has grown.
	for i := range 120_000 {
		c := calls[i%n]
		c.Start = t0.Add(time.Duration(i) * time.Millisecond)
		s.Observe(c)
	}
	b.ReportAllocs()
	i := 120_000
	for b.Loop() {
		c := calls[i%n]
		c.Start = t0.Add(time.Duration(i) * time.Millisecond)
		s.Observe(c)
		i++
	}
}

// BenchmarkObserveTotalOnly is the floor: a call with only its total (no
// phases reached, no stages), so one sketch and one Welford update.
func BenchmarkObserveTotalOnly(b *testing.B) {
	s, err := New(Options{})
	if err != nil {
		b.Fatal(err)
	}
	t0 := time.Unix(1_700_000_000, 0)
	c := &record.Call{Start: t0, End: 20 * time.Millisecond, Model: "m", Version: "1", Code: "OK"}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		c.Start = t0.Add(time.Duration(i) * time.Millisecond)
		c.End = time.Duration(5+i%90) * time.Millisecond
		s.Observe(c)
		i++
	}
}

func BenchmarkSketchAdd(b *testing.B) {
	s, _ := NewSketch(0.01, 2048)
	xs := make([]float64, 4096)
	for i := range xs {
		xs[i] = 0.005 + float64((i*7919)%4096)*0.095/4096
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		s.Add(xs[i&4095])
		i++
	}
}
