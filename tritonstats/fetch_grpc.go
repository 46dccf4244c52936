package tritonstats

import (
	"context"
	"crypto/tls"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/inferwatch/inferwatch/proto/inference"
)

// maxStatsMsg lifts gRPC's 4 MiB receive default to the REST body bound.
const maxStatsMsg = maxStatsBody

// grpcFetcher calls inference.GRPCInferenceService/ModelStatistics.
type grpcFetcher struct {
	addr   string
	conn   *grpc.ClientConn
	client inference.GRPCInferenceServiceClient
}

func newGRPCFetcher(addr string, tlsConf *tls.Config) (*grpcFetcher, error) {
	creds := insecure.NewCredentials()
	if tlsConf != nil {
		creds = credentials.NewTLS(tlsConf)
	}
	// NewClient does not dial: the connection is made on the first poll and
	// re-made by grpc-go whenever the upstream comes back.
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxStatsMsg)))
	if err != nil {
		return nil, fmt.Errorf("gRPC client for %q: %w", addr, err)
	}
	return &grpcFetcher{addr: addr, conn: conn, client: inference.NewGRPCInferenceServiceClient(conn)}, nil
}

func (f *grpcFetcher) target() string { return "grpc://" + f.addr }

func (f *grpcFetcher) fetch(ctx context.Context) (map[modelKey]counters, error) {
	// An empty name asks for every model and version.
	resp, err := f.client.ModelStatistics(ctx, &inference.ModelStatisticsRequest{})
	if err != nil {
		return nil, fmt.Errorf("ModelStatistics: %w", err)
	}
	out := make(map[modelKey]counters, len(resp.GetModelStats()))
	for _, m := range resp.GetModelStats() {
		s := m.GetInferenceStats()
		c := counters{inferences: m.GetInferenceCount(), executions: m.GetExecutionCount()}
		for i, d := range [numStages]*inference.StatisticDuration{
			s.GetSuccess(), s.GetFail(), s.GetQueue(), s.GetComputeInput(),
			s.GetComputeInfer(), s.GetComputeOutput(), s.GetCacheHit(), s.GetCacheMiss(),
		} {
			c.stages[i] = duration{d.GetCount(), d.GetNs()}
		}
		out[modelKey{m.GetName(), m.GetVersion()}] = c
	}
	return out, nil
}

func (f *grpcFetcher) close() error { return f.conn.Close() }
