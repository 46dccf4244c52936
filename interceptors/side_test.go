package interceptors

import (
	"context"
	"testing"

	"google.golang.org/grpc"
)

// TestClientSideMarked: a record made by a client's front (interceptors or
// stats handler) says so, so that its trace is a client's; a server's front
// does not. Unary and streaming calls, each front in turn.
func TestClientSideMarked(t *testing.T) {
	for _, f := range []struct {
		name   string
		client bool
		opts   func(r *Recorder) ([]grpc.ServerOption, []grpc.DialOption)
	}{
		{"server interceptors", false, func(r *Recorder) ([]grpc.ServerOption, []grpc.DialOption) {
			return []grpc.ServerOption{grpc.UnaryInterceptor(r.UnaryServerInterceptor()), grpc.StreamInterceptor(r.StreamServerInterceptor())}, nil
		}},
		{"client interceptors", true, func(r *Recorder) ([]grpc.ServerOption, []grpc.DialOption) {
			return nil, []grpc.DialOption{grpc.WithUnaryInterceptor(r.UnaryClientInterceptor()), grpc.WithStreamInterceptor(r.StreamClientInterceptor())}
		}},
		{"stats handler", false, func(r *Recorder) ([]grpc.ServerOption, []grpc.DialOption) {
			return []grpc.ServerOption{grpc.StatsHandler(r.StatsHandler())}, nil
		}},
		{"client stats handler", true, func(r *Recorder) ([]grpc.ServerOption, []grpc.DialOption) {
			return nil, []grpc.DialOption{grpc.WithStatsHandler(r.StatsHandler())}
		}},
	} {
		t.Run(f.name, func(t *testing.T) {
			rec, col := newRecorder(t)
			so, do := f.opts(rec)
			cc, _ := serveAPIs(t, so, do...)
			callInTurn(t, cc, "unary", tsPredictions(tsPredict), col)
			callInTurn(t, cc, "stream", tsStream(tsPredict), col)
			rec.Close(context.Background())
			recs := col.all()
			if len(recs) != 2 {
				t.Fatalf("%d records, want 2", len(recs))
			}
			for _, c := range recs {
				if c.ClientSide != f.client {
					t.Errorf("%s (stream %v): ClientSide %v, want %v", c.Method, c.Stream, c.ClientSide, f.client)
				}
			}
		})
	}
}
