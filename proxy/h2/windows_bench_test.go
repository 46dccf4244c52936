package h2_test

import (
	"context"
	"fmt"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"

	"github.com/inferwatch/inferwatch/proxy/h2"
)

// bytesCodec moves messages as they are: the echo below never parses them.
type bytesCodec struct{}

func (bytesCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (bytesCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (bytesCodec) Name() string { return "windowbench" }

func init() { encoding.RegisterCodec(bytesCodec{}) }

// echoUpstream is a grpc-go server answering any method with the message it
// got, with grpc-go's own flow control (BDP-estimated windows), as a model
// server written with it has.
func echoUpstream(b *testing.B) string {
	s := grpc.NewServer(grpc.MaxRecvMsgSize(1<<30), grpc.MaxSendMsgSize(1<<30),
		grpc.UnknownServiceHandler(func(_ any, st grpc.ServerStream) error {
			var m []byte
			if err := st.RecvMsg(&m); err != nil {
				return err
			}
			return st.SendMsg(&m)
		}))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go s.Serve(l)
	b.Cleanup(s.Stop)
	return l.Addr().String()
}

// BenchmarkForwarderWindows sweeps the windows the frame plane advertises
// (per stream / per connection, both hops) for tensor-sized unary calls
// between grpc-go peers, closed loop on one connection, against the same
// calls direct: the figures behind the defaults (docs/perf.md).
//
//	go test -run XXX -bench BenchmarkForwarderWindows -benchtime 30x ./proxy/h2
func BenchmarkForwarderWindows(b *testing.B) {
	up := echoUpstream(b)
	windows := []struct{ stream, conn uint32 }{
		{64 << 10, 256 << 10}, {256 << 10, 1 << 20}, {1 << 20, 4 << 20}, {4 << 20, 16 << 20}, {16 << 20, 64 << 20},
	}
	for _, size := range []int{1 << 20, 16 << 20} {
		msg := make([]byte, size)
		call := func(b *testing.B, addr string) {
			cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
				grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30), grpc.MaxCallSendMsgSize(1<<30), grpc.ForceCodecV2(nil)))
			if err != nil {
				b.Fatal(err)
			}
			defer cc.Close()
			invoke := func() {
				var out []byte
				if err := cc.Invoke(context.Background(), "/bench.Echo/Echo", &msg, &out, grpc.ForceCodec(bytesCodec{})); err != nil || len(out) != size {
					b.Fatalf("echo: %v (%d bytes back)", err, len(out))
				}
			}
			invoke() // connection and windows warmed up
			b.SetBytes(int64(2 * size))
			b.ResetTimer()
			for range b.N {
				invoke()
			}
		}
		name := fmt.Sprintf("%dMiB", size>>20)
		b.Run(name+"/direct", func(b *testing.B) { call(b, up) })
		for _, w := range windows {
			fwd, _ := startForwarder(b, up, nopObserver{}, func(o *h2.Options) { o.StreamWindow, o.ConnWindow = w.stream, w.conn })
			b.Run(fmt.Sprintf("%s/stream=%dKiB,conn=%dKiB", name, w.stream>>10, w.conn>>10), func(b *testing.B) { call(b, fwd) })
		}
	}
}
