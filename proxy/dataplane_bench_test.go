package proxy

import (
	"context"
	"io"
	"log/slog"
	"sort"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/inferwatch/inferwatch/proto/inference"
	"github.com/inferwatch/inferwatch/record"
)

// grpcRawProxy is the data-plane candidate we measured against and did not
// take: a grpc-go server whose unknown-service handler re-sends every message
// through a grpc-go client with a pass-through codec. Each message is held
// whole in memory and re-framed on both hops.
func grpcRawProxy(up *grpc.ClientConn) *grpc.Server {
	return grpc.NewServer(grpc.ForceServerCodec(rawCodec{}), grpc.MaxRecvMsgSize(maxMsg), grpc.MaxSendMsgSize(maxMsg),
		grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
			m, _ := grpc.MethodFromServerStream(ss)
			md, _ := metadata.FromIncomingContext(ss.Context())
			ctx := metadata.NewOutgoingContext(ss.Context(), md.Copy())
			cs, err := up.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, m, grpc.ForceCodec(rawCodec{}))
			if err != nil {
				return err
			}
			go func() {
				for {
					var b []byte
					if err := ss.RecvMsg(&b); err != nil {
						cs.CloseSend()
						return
					}
					if cs.SendMsg(&b) != nil {
						return
					}
				}
			}()
			if hdr, err := cs.Header(); err == nil {
				ss.SendHeader(hdr)
			}
			for {
				var b []byte
				err := cs.RecvMsg(&b)
				if err == io.EOF {
					break
				}
				if err != nil {
					ss.SetTrailer(cs.Trailer())
					return err
				}
				if err := ss.SendMsg(&b); err != nil {
					return err
				}
			}
			ss.SetTrailer(cs.Trailer())
			return nil
		}))
}

// BenchmarkDataPlane measures one unary ModelInfer at a time, direct and
// through each candidate, and reports p50/p99 of the round trip. Compare the
// candidates' p50 with direct's to get the latency each adds.
func BenchmarkDataPlane(b *testing.B) {
	t := b
	up := grpc.NewServer(grpc.MaxRecvMsgSize(maxMsg), grpc.MaxSendMsgSize(maxMsg))
	inference.RegisterGRPCInferenceServiceServer(up, kserveEcho{})
	ul := listen(t)
	go up.Serve(ul)
	defer up.Stop()
	upAddr := ul.Addr().String()

	// Candidate 1: the stream proxy (this package), with the record pipeline on.
	pl := record.NewPipeline(1<<14, record.SinkFunc(func(*record.Call) {}), nil)
	defer pl.Close()
	tr := NewTransport(TransportOptions{Protocol: UpstreamHTTP2})
	hs := NewServer(slog.New(slog.DiscardHandler), Listener{Name: "b", Addr: "127.0.0.1:0",
		Handler: NewHandler(Options{Upstream: upAddr, Transport: tr, Pipeline: pl, MaxMessageBytes: maxMsg, DecodeSample: 0.01, DecodeMaxBytes: 4 << 20})})
	if err := hs.Listen(); err != nil {
		b.Fatal(err)
	}
	go hs.Serve()
	defer hs.Shutdown(context.Background())

	// Candidate 2: grpc-go with a raw codec.
	rawUp := dialB(b, upAddr)
	rp := grpcRawProxy(rawUp)
	rl := listen(t)
	go rp.Serve(rl)
	defer rp.Stop()

	targets := []struct{ name, addr string }{
		{"direct", upAddr}, {"stream-proxy", hs.Addrs()[0].String()}, {"grpc-raw-codec", rl.Addr().String()},
	}
	for _, size := range []struct {
		name string
		n    int
	}{{"small", 16}, {"1MiB", 1 << 20}, {"16MiB", 16 << 20}} {
		msg := inferRequest("bench", size.n)
		for _, tg := range targets {
			b.Run(size.name+"/"+tg.name, func(b *testing.B) {
				cc := dialB(b, tg.addr)
				ctx := context.Background()
				doCall(ctx, cc, "/inference.GRPCInferenceService/ModelInfer", nil, [][]byte{msg}) // warm the connection
				lat := make([]time.Duration, 0, b.N)
				b.SetBytes(int64(len(msg)))
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					s := time.Now()
					o := doCall(ctx, cc, "/inference.GRPCInferenceService/ModelInfer", nil, [][]byte{msg})
					lat = append(lat, time.Since(s))
					if o.code != 0 {
						b.Fatalf("call failed: %v %s", o.code, o.message)
					}
				}
				b.StopTimer()
				sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			})
		}
	}
}

func dialB(b testing.TB, addr string) *grpc.ClientConn {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecureCreds()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsg), grpc.MaxCallSendMsgSize(maxMsg)))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cc.Close() })
	return cc
}
