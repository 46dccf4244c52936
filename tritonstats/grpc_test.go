package tritonstats

import (
	"context"
	"math"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/VictoriaMetrics/metrics"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/inferwatch/inferwatch/proto/inference"
)

// statsServer is a real gRPC inference server that answers ModelStatistics
// with whatever the test last set.
type statsServer struct {
	inference.UnimplementedGRPCInferenceServiceServer
	mu   sync.Mutex
	resp *inference.ModelStatisticsResponse
	err  error
}

func (s *statsServer) set(resp *inference.ModelStatisticsResponse, err error) {
	s.mu.Lock()
	s.resp, s.err = resp, err
	s.mu.Unlock()
}

func (s *statsServer) ModelStatistics(ctx context.Context, req *inference.ModelStatisticsRequest) (*inference.ModelStatisticsResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if req.GetName() != "" {
		return nil, status.Error(codes.InvalidArgument, "the poller must ask for every model")
	}
	return s.resp, s.err
}

func grpcStats(inferences, queueNs, inferNs uint64) *inference.ModelStatisticsResponse {
	return &inference.ModelStatisticsResponse{ModelStats: []*inference.ModelStatistics{{
		Name:           "llama",
		Version:        "3",
		InferenceCount: inferences,
		ExecutionCount: inferences / 2,
		InferenceStats: &inference.InferStatistics{
			Success:      &inference.StatisticDuration{Count: inferences, Ns: queueNs + inferNs},
			Queue:        &inference.StatisticDuration{Count: inferences, Ns: queueNs},
			ComputeInfer: &inference.StatisticDuration{Count: inferences, Ns: inferNs},
			// Fail, compute_input/output and cache left nil, as servers do.
		},
	}}}
}

func TestPollGRPC(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	fake := &statsServer{}
	inference.RegisterGRPCInferenceServiceServer(srv, fake)
	go srv.Serve(lis) //nolint:errcheck // ends with Stop
	defer srv.Stop()

	set := metrics.NewSet()
	p, err := New(Options{GRPCAddr: lis.Addr().String(), Set: set})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	steps := []struct {
		name    string
		resp    *inference.ModelStatisticsResponse
		err     error
		wantErr string
		want    map[string]float64
	}{
		{
			name: "baseline",
			resp: grpcStats(100, 1e9, 4e9),
			want: map[string]float64{
				perModel("inference_count_total", "llama", "3"):                0,
				stage("llama", "3", "duration_seconds_total", "compute_infer"): 0,
			},
		},
		{
			name: "delta",
			resp: grpcStats(160, 1.3e9, 5.2e9),
			want: map[string]float64{
				perModel("inference_count_total", "llama", "3"):                60,
				perModel("execution_count_total", "llama", "3"):                30,
				stage("llama", "3", "duration_seconds_total", "queue"):         0.3,
				stage("llama", "3", "duration_seconds_total", "compute_infer"): 1.2,
				stage("llama", "3", "count_total", "compute_infer"):            60,
				stage("llama", "3", "count_total", "fail"):                     0,
			},
		},
		{
			name:    "server error",
			err:     status.Error(codes.Unavailable, "statistics off"),
			wantErr: "statistics off",
			want:    map[string]float64{"inferwatch_triton_poll_errors_total": 1},
		},
		{
			name: "restart",
			resp: grpcStats(10, 1e8, 2e8),
			want: map[string]float64{
				perModel("inference_count_total", "llama", "3"):                70,
				stage("llama", "3", "duration_seconds_total", "compute_infer"): 1.4,
			},
		},
	}
	for _, st := range steps {
		fake.set(st.resp, st.err)
		err := p.PollOnce(context.Background())
		if st.wantErr == "" && err != nil {
			t.Fatalf("%s: PollOnce: %v", st.name, err)
		}
		if st.wantErr != "" && (err == nil || !strings.Contains(err.Error(), st.wantErr)) {
			t.Fatalf("%s: err = %v, want one containing %q", st.name, err, st.wantErr)
		}
		for series, want := range st.want {
			if got := value(t, set, series); math.IsNaN(got) || math.Abs(got-want) > 1e-9 {
				t.Errorf("%s: %s = %v, want %v", st.name, series, got, want)
			}
		}
	}
	if s := p.Snapshot(); len(s) != 1 || s[0].Inferences != 10 || !s[0].Reset {
		t.Errorf("snapshot after the restart = %+v, want llama/3 with 10 inferences, Reset", s)
	}
}
