package loadgen

import (
	"context"
	"math"
	"net"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/inferwatch/inferwatch/demo/modelserver"
	"github.com/inferwatch/inferwatch/internal/testenv"
)

// serve starts a model server on loopback and returns its gRPC and HTTP
// addresses.
func serve(t *testing.T) (s *modelserver.Server, grpcAddr, httpAddr string) {
	t.Helper()
	s = modelserver.New(modelserver.Options{Workers: 4})
	t.Cleanup(s.Close)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	g := grpc.NewServer(modelserver.GRPCServerOptions()...)
	s.RegisterGRPC(g)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	hs := httptest.NewServer(s.HTTPHandler())
	t.Cleanup(hs.Close)
	return s, lis.Addr().String(), strings.TrimPrefix(hs.URL, "http://")
}

func TestRunRate(t *testing.T) {
	_, g, h := serve(t)
	const qps, dur = 200, 2 * time.Second
	s, err := Run(context.Background(), Options{
		QPS: qps, Duration: dur,
		Targets: []Target{
			{Protocol: ProtocolGRPC, Addr: g, Model: ModelMLP},
			{Protocol: ProtocolHTTP, Addr: h, Model: ModelMLP},
		},
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	t.Logf("summary %+v", s)
	want := int(qps * dur.Seconds())
	if s.Sent+s.Late != want || s.OK != s.Sent || s.Failed != 0 {
		t.Errorf("summary %+v, want %d sent and all OK", s, want)
	}
	if s.Late > want/100 {
		t.Errorf("%d of %d calls late", s.Late, want)
	}
	if math.Abs(s.Throughput-qps)/qps > 0.05 {
		t.Errorf("throughput %.1f/s, want %d/s within 5%%", s.Throughput, qps)
	}
	if s.ByCode["OK"]+s.ByCode["200"] != s.OK || s.ByCode["OK"] == 0 || s.ByCode["200"] == 0 {
		t.Errorf("codes %v", s.ByCode)
	}
	if !(0 < s.P50 && s.P50 <= s.P90 && s.P90 <= s.P99 && s.P99 <= s.Max) {
		t.Errorf("percentiles out of order: %v %v %v %v", s.P50, s.P90, s.P99, s.Max)
	}
}

func TestRunPayloads(t *testing.T) {
	_, g, h := serve(t)
	tests := []struct {
		name   string
		target Target
	}{
		{"grpc echo 4MiB", Target{Protocol: ProtocolGRPC, Addr: g, Model: ModelEcho, Payload: 4 << 20}},
		{"grpc echo small", Target{Protocol: ProtocolGRPC, Addr: g, Model: ModelEcho}},
		{"http echo 4MiB", Target{Protocol: ProtocolHTTP, Addr: h, Model: ModelEcho, Payload: 4 << 20}},
		{"http echo json", Target{Protocol: ProtocolHTTP, Addr: h, Model: ModelEcho, Payload: 1000, JSON: true}},
		{"http mlp json", Target{Protocol: ProtocolHTTP, Addr: h, Model: ModelMLP, JSON: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Run(context.Background(), Options{QPS: 50, Duration: 200 * time.Millisecond, Targets: []Target{tc.target}})
			if err != nil || s.OK != 10 {
				t.Errorf("Run = %+v, %v; want 10 OK", s, err)
			}
		})
	}
}

func TestRunCountsCodes(t *testing.T) {
	_, g, _ := serve(t)
	down := testenv.FreeAddr(t)
	var mu sync.Mutex
	byTarget := map[int]map[string]int{}
	s, err := Run(context.Background(), Options{
		QPS: 60, Duration: 500 * time.Millisecond,
		Targets: []Target{
			{Protocol: ProtocolGRPC, Addr: g, Model: ModelMLP},
			{Protocol: ProtocolGRPC, Addr: down, Model: ModelMLP},
			{Protocol: ProtocolHTTP, Addr: down, Model: ModelMLP},
		},
		OnResult: func(r Result) {
			mu.Lock()
			defer mu.Unlock()
			if byTarget[r.Target] == nil {
				byTarget[r.Target] = map[string]int{}
			}
			byTarget[r.Target][r.Code]++
			if (r.Code == "OK") != (r.Err == nil) {
				t.Errorf("result code %s with error %v", r.Code, r.Err)
			}
		},
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	want := map[int]string{0: "OK", 1: "UNAVAILABLE", 2: codeHTTPError}
	for target, code := range want {
		if byTarget[target][code] != 10 || len(byTarget[target]) != 1 {
			t.Errorf("target %d codes %v, want 10×%s", target, byTarget[target], code)
		}
	}
	if s.Sent != 30 || s.OK != 10 || s.Failed != 20 || s.ByCode["UNAVAILABLE"] != 10 || s.ByCode[codeHTTPError] != 10 {
		t.Errorf("summary %+v", s)
	}
}

func TestRunTargetDown(t *testing.T) {
	down := testenv.FreeAddr(t)
	for _, proto := range []string{ProtocolGRPC, ProtocolHTTP} {
		t.Run(proto, func(t *testing.T) {
			s, err := Run(context.Background(), Options{
				QPS: 50, Duration: 100 * time.Millisecond,
				Targets: []Target{{Protocol: proto, Addr: down, Model: ModelMLP}},
			})
			if err == nil || !strings.Contains(err.Error(), "all 5 calls failed") {
				t.Errorf("err = %v, want all 5 calls failed", err)
			}
			if s.Sent != 5 || s.Failed != 5 || s.OK != 0 || s.Throughput != 0 {
				t.Errorf("summary %+v", s)
			}
		})
	}
}

func TestRunOpenLoop(t *testing.T) {
	srv, g, _ := serve(t)
	const extra = 30 * time.Millisecond
	srv.SetExtraLatency(extra)
	// 100/s with one call in flight and 30ms calls: most due calls find the
	// slot taken and are skipped as late, never queued behind it.
	s, err := Run(context.Background(), Options{
		QPS: 100, Duration: 500 * time.Millisecond, MaxInFlight: 1,
		Targets: []Target{{Protocol: ProtocolGRPC, Addr: g, Model: ModelMLP}},
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if s.Sent+s.Late != 50 || s.Late < 30 || s.Sent > 20 {
		t.Errorf("sent %d, late %d; want 50 scheduled, mostly late", s.Sent, s.Late)
	}
	if s.P50 < extra {
		t.Errorf("p50 %v below the server's %v", s.P50, extra)
	}
}

// TestRunCancel: Run, with no duration, stops when its context ends: here
// on the 20th result, wherever on the clock that falls, so the counts do
// not depend on how fast a loaded machine schedules the calls.
func TestRunCancel(t *testing.T) {
	_, g, _ := serve(t)
	const after, inFlight = 20, 4
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	results := 0 // OnResult calls are serialised
	done := make(chan struct{})
	var s Summary
	var err error
	go func() {
		defer close(done)
		s, err = Run(ctx, Options{QPS: 100, MaxInFlight: inFlight,
			Targets: []Target{{Protocol: ProtocolGRPC, Addr: g, Model: ModelMLP}},
			OnResult: func(Result) {
				if results++; results == after {
					cancel()
				}
			}})
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run still running 30s in, its context ended after 20 results")
	}
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	// Sent when the context ended: the 20 finished and at most the other
	// in-flight slots. A schedule due just as it ended may still go out
	// (its timer and the context ready together); a few more only if a
	// stalled loop found several so, each a coin flip.
	if s.Sent < after || s.Sent > after+inFlight+3 {
		t.Errorf("sent %d; want to stop with ctx after %d results, at most %d in flight", s.Sent, after, inFlight)
	}
}

func TestOptionsCheck(t *testing.T) {
	ok := Target{Protocol: ProtocolGRPC, Addr: "127.0.0.1:1", Model: ModelMLP}
	tests := []struct {
		name string
		o    Options
		want string
	}{
		{"zero qps", Options{Targets: []Target{ok}}, "QPS"},
		{"nan qps", Options{QPS: math.NaN(), Targets: []Target{ok}}, "QPS"},
		{"negative duration", Options{QPS: 1, Duration: -1, Targets: []Target{ok}}, "duration"},
		{"no targets", Options{QPS: 1}, "no targets"},
		{"protocol", Options{QPS: 1, Targets: []Target{{Protocol: "udp", Addr: "x", Model: ModelMLP}}}, "protocol"},
		{"model", Options{QPS: 1, Targets: []Target{{Protocol: ProtocolHTTP, Addr: "x", Model: "resnet"}}}, "model"},
		{"addr", Options{QPS: 1, Targets: []Target{{Protocol: ProtocolHTTP, Model: ModelEcho}}}, "address"},
		{"payload", Options{QPS: 1, Targets: []Target{{Protocol: ProtocolHTTP, Addr: "x", Model: ModelEcho, Payload: -1}}}, "payload"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Run(context.Background(), tc.o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one about %q", err, tc.want)
			}
		})
	}
}

func TestPercentile(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = i + 1
	}
	tests := []struct {
		name    string
		samples []time.Duration
		p       float64
		want    time.Duration
	}{
		{"empty", nil, 0.5, 0},
		{"one", ms(7), 0.99, 7 * time.Millisecond},
		{"p50 of 100", ms(hundred...), 0.50, 50 * time.Millisecond},
		{"p99 of 100", ms(hundred...), 0.99, 99 * time.Millisecond},
		{"p90 of 4", ms(1, 2, 3, 4), 0.90, 4 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := percentile(tc.samples, tc.p); got != tc.want {
				t.Errorf("percentile = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestReservoirBounded(t *testing.T) {
	c := newCollector(nil)
	for i := range maxSamples + 1000 {
		c.add(Result{Code: "OK", Latency: time.Duration(i)})
	}
	if len(c.samples) != maxSamples {
		t.Errorf("kept %d samples, want %d", len(c.samples), maxSamples)
	}
	s, _ := c.summary()
	if s.OK != maxSamples+1000 || s.Max != time.Duration(maxSamples+999) {
		t.Errorf("summary %+v", s)
	}
}

// TestRunLLM: the generative targets stream to the end over both protocols
// against the demo model server.
func TestRunLLM(t *testing.T) {
	_, grpcAddr, httpAddr := serve(t)
	sum, err := Run(context.Background(), Options{QPS: 20, Duration: time.Second, Targets: []Target{
		{Protocol: ProtocolGRPC, Addr: grpcAddr, Model: ModelLLM},
		{Protocol: ProtocolHTTP, Addr: httpAddr, Model: ModelLLM},
	}})
	if err != nil || sum.OK < 15 || sum.Failed != 0 {
		t.Fatalf("summary %+v, err %v", sum, err)
	}
}
