package tracing

import (
	"context"
	"maps"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/inferwatch/inferwatch/internal/testenv"
	"github.com/inferwatch/inferwatch/record"
	"github.com/inferwatch/inferwatch/sampling"
)

// BenchmarkProxyTracing measures HTTP infer calls through an in-process
// proxy, client and upstream on the same machine, with tracing off and on.
// "all" keeps every call's trace (the worst case: spans built and queued
// for every call); "sampled" uses the default sampler. The backend is
// absent (memory only), refusing connections (down) or accepting and never
// answering (hung). "serial" sends one call at a time (latency); "parallel"
// keeps GOMAXPROCS calls in flight (throughput). Each reports requests per
// second and the p50/p99 round trip; compare with "off".
func BenchmarkProxyTracing(b *testing.B) {
	up := httpModel(b, nil)
	cases := []struct {
		name     string
		tracer   bool
		sampled  bool
		endpoint func(testing.TB) string
	}{
		{name: "off"},
		{name: "on-all-memory", tracer: true},
		{name: "on-all-backend-down", tracer: true, endpoint: testenv.FreeAddr},
		{name: "on-all-backend-hung", tracer: true, endpoint: blackhole},
		{name: "on-sampled-backend-down", tracer: true, sampled: true, endpoint: testenv.FreeAddr},
	}
	for _, mode := range []string{"serial", "parallel"} {
		for _, tc := range cases {
			b.Run(mode+"/"+tc.name, func(b *testing.B) {
				var tr *Tracer
				if tc.tracer {
					c := Config{Insecure: true, ExportTimeout: 100 * time.Millisecond, BatchTimeout: 10 * time.Millisecond,
						Logger: discardLogger}
					if tc.endpoint != nil {
						c.Endpoint = tc.endpoint(b)
					}
					if tc.sampled {
						s, err := sampling.New(sampling.Config{})
						if err != nil {
							b.Fatal(err)
						}
						ctx, cancel := context.WithCancel(context.Background())
						defer cancel()
						go s.Run(ctx)
						c.Sampler = s
					}
					var err error
					if tr, err = New(c); err != nil {
						b.Fatal(err)
					}
					defer tr.Close(context.Background())
				}
				s := startSidecar(b, "r", up, false, tr)
				defer s.stop()
				benchCalls(b, s.addr, mode == "parallel")
			})
		}
	}
}

func benchCalls(b *testing.B, addr string, parallel bool) {
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	if err := postInfer(hc, addr, "mnist", nil); err != nil { // warm the connections
		b.Fatal(err)
	}
	var mu sync.Mutex
	var lat []time.Duration
	loop := func(next func() bool) {
		mine := make([]time.Duration, 0, 1024)
		for next() {
			t0 := time.Now()
			if err := postInfer(hc, addr, "mnist", nil); err != nil {
				b.Error(err)
				return
			}
			mine = append(mine, time.Since(t0))
		}
		mu.Lock()
		lat = append(lat, mine...)
		mu.Unlock()
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	if parallel {
		b.RunParallel(func(pb *testing.PB) { loop(pb.Next) })
	} else {
		loop(b.Loop)
	}
	took := time.Since(start)
	b.StopTimer()
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(len(lat))/took.Seconds(), "req/s")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkStart is the data-path cost of the trace hook per call.
func BenchmarkStart(b *testing.B) {
	s, err := sampling.New(sampling.Config{})
	if err != nil {
		b.Fatal(err)
	}
	tr, _ := newTracer(Config{Sampler: s}, nil)
	for _, tc := range []struct {
		name string
		hdr  http.Header
	}{
		{"no-context", http.Header{"Content-Type": {"application/grpc"}}},
		{"w3c", http.Header{"Content-Type": {"application/grpc"}, "Traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}, "Tracestate": {"ot=th:0"}}},
		{"b3", http.Header{"Content-Type": {"application/grpc"}, "B3": {"80f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1-1"}}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			h := tc.hdr.Clone()
			c := &record.Call{Model: "m"}
			b.ReportAllocs()
			for b.Loop() {
				clear(h)
				maps.Copy(h, tc.hdr)
				tr.Start(c, "r", h)
			}
		})
	}
}

// BenchmarkObserve is the pipeline-side cost of one kept call's spans
// (built, queued to a discarding exporter, remembered).
func BenchmarkObserve(b *testing.B) {
	tr, _ := newTracer(Config{Sampler: &fakeSampler{}, QueueSize: 1 << 16}, exporterFunc(func(context.Context, []sdktrace.ReadOnlySpan) error { return nil }))
	defer tr.Close(context.Background())
	c := seedCall()
	b.ReportAllocs()
	for b.Loop() {
		tr.Observe(c)
	}
}
