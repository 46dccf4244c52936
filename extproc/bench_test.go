package extproc

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/inferwatch/inferwatch/internal/testenv"
	"github.com/inferwatch/inferwatch/metricset"
	"github.com/inferwatch/inferwatch/record"
)

// benchCall is one small KServe v2 gRPC infer call as Envoy sends it with
// STREAMED bodies and response trailers: five messages.
func benchCall(observe bool) []*extprocv3.ProcessingRequest {
	greq, gresp := grpcCall()
	msgs := []*extprocv3.ProcessingRequest{
		reqHeaders(headers(false, ":method", "POST", ":path", inferPath, "content-type", "application/grpc", ":authority", "kserve",
			"te", "trailers", "user-agent", "grpc-go/1.85.0", "x-request-id", "8f0e2a1c-4b8e-4f57-9d4b-1f2e3d4c5b6a")),
		reqBody(greq, true),
		respHeaders(headers(false, ":status", "200", "content-type", "application/grpc")),
		respBody(gresp, false),
		respTrailers("grpc-status", "0", "server-timing", "queue;dur=0.1, infer;dur=1.2"),
	}
	if observe {
		observability(msgs)
	}
	return msgs
}

// BenchmarkExtProcCore is the server's own per-call work, without gRPC:
// answering and measuring the five messages of a call and submitting its
// record (metrics as the sink). Compare with the proxy's BenchmarkMeasure.
func BenchmarkExtProcCore(b *testing.B) {
	set := metricset.New(metricset.Options{})
	p := record.NewPipeline(8192, set, nil)
	defer p.Close()
	srv, err := New(Options{Pipeline: p, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	msgs := benchCall(false)
	b.ReportAllocs()
	cpu := testenv.ProcessCPU(b)
	for b.Loop() {
		st := newStream(srv)
		for _, m := range msgs {
			if st.first {
				st.first = false
				st.modes(m.GetProtocolConfig())
			}
			now := time.Now()
			if st.answer(m) == nil {
				b.Fatal("no answer")
			}
			st.observe(m, now, now)
		}
		st.finish(time.Now(), true)
	}
	testenv.ReportCPU(b, cpu)
}

// BenchmarkExtProcGRPC is a whole call over real gRPC on loopback, one
// stream per call as Envoy opens them, client (playing Envoy) and server in
// one process: ns and allocations per call include both sides of grpc-go.
// answer-p99-µs is the 99th percentile of send-to-answer per message.
// sink=blocked: the only sink never returns, so records are dropped — the
// answers must not notice.
func BenchmarkExtProcGRPC(b *testing.B) {
	for _, bc := range []struct {
		name    string
		observe bool
		blocked bool
	}{{"ordinary", false, false}, {"ordinary/sink=blocked", false, true}, {"observability", true, false}} {
		b.Run(bc.name, func(b *testing.B) {
			var sink record.Sink = metricset.New(metricset.Options{})
			block := make(chan struct{})
			defer close(block)
			if bc.blocked {
				sink = record.SinkFunc(func(*record.Call) { <-block })
			}
			p := record.NewPipeline(8192, sink, nil)
			h := newHarness(b, Options{Pipeline: p}, nil)
			msgs := benchCall(bc.observe)
			lat := make([]time.Duration, 0, 5*b.N)
			b.ReportAllocs()
			cpu := testenv.ProcessCPU(b)
			for b.Loop() {
				st, err := h.client.Process(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				for _, m := range msgs {
					s := time.Now()
					if err := st.Send(m); err != nil {
						b.Fatal(err)
					}
					if !bc.observe {
						if _, err := st.Recv(); err != nil {
							b.Fatal(err)
						}
						lat = append(lat, time.Since(s))
					}
				}
				st.CloseSend()
				if _, err := st.Recv(); err != io.EOF {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			testenv.ReportCPU(b, cpu)
			if len(lat) > 0 {
				slices.Sort(lat)
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "answer-p99-µs")
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "answer-p50-µs")
			}
			if bc.blocked && p.Dropped() == 0 && b.N > 8200 {
				b.Fatalf("the blocked sink dropped nothing")
			}
		})
	}
}
