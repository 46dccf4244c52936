package interceptors

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/inferwatch/inferwatch/internal/testenv"
	"github.com/inferwatch/inferwatch/proto/inference"
)

func benchRecorder(b *testing.B) *Recorder {
	r, err := New(Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), NoTracing: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { r.Close(context.Background()) })
	return r
}

// BenchmarkUnaryServerInterceptor is the interceptor's own cost per call:
// a record built from a small ModelInfer request and response and submitted
// (metrics, window statistics as sinks), around a handler that does nothing.
func BenchmarkUnaryServerInterceptor(b *testing.B) {
	r := benchRecorder(b)
	ic := r.UnaryServerInterceptor()
	req := inferReq(1)
	resp := &inference.ModelInferResponse{ModelName: "mlp", Outputs: []*inference.ModelInferResponse_InferOutputTensor{{Name: "y", Datatype: "FP32", Shape: []int64{1, 10}}}}
	info := &grpc.UnaryServerInfo{FullMethod: "/inference.GRPCInferenceService/ModelInfer"}
	handler := func(context.Context, any) (any, error) { return resp, nil }
	ctx := context.Background()
	b.ReportAllocs()
	cpu := testenv.ProcessCPU(b)
	for b.Loop() {
		if _, err := ic(ctx, req, info, handler); err != nil {
			b.Fatal(err)
		}
	}
	testenv.ReportCPU(b, cpu)
}

// BenchmarkHTTPMiddleware is the middleware's own cost per call on a small
// KServe v2 JSON infer call, the deferred body decode included (it runs on
// the pipeline goroutine, in parallel on the second core).
func BenchmarkHTTPMiddleware(b *testing.B) {
	r := benchRecorder(b)
	h := r.Middleware(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		io.Copy(io.Discard, req.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"model_name":"mlp","outputs":[{"name":"y","shape":[3,1],"datatype":"FP32","data":[1,2,3]}]}`)
	}))
	b.ReportAllocs()
	cpu := testenv.ProcessCPU(b)
	for b.Loop() {
		req := httptest.NewRequest("POST", "/v2/models/mlp/infer", strings.NewReader(jsonInfer))
		req.Header.Set("Content-Type", "application/json")
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	testenv.ReportCPU(b, cpu)
}

// BenchmarkGRPCUnary is a whole ModelInfer over real grpc-go on loopback,
// client and server in one process, without and with the interceptors on
// both sides: the difference is what in-process measurement costs a call.
func BenchmarkGRPCUnary(b *testing.B) {
	for _, bc := range []struct {
		name string
		on   bool
	}{{"plain", false}, {"interceptors", true}} {
		b.Run(bc.name, func(b *testing.B) {
			var sopts []grpc.ServerOption
			copts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
			if bc.on {
				sr, cr := benchRecorder(b), benchRecorder(b)
				sopts = append(sopts, grpc.UnaryInterceptor(sr.UnaryServerInterceptor()))
				copts = append(copts, grpc.WithUnaryInterceptor(cr.UnaryClientInterceptor()))
			}
			g := grpc.NewServer(sopts...)
			inference.RegisterGRPCInferenceServiceServer(g, slowModel{})
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			go g.Serve(l)
			defer g.Stop()
			cc, err := grpc.NewClient(l.Addr().String(), copts...)
			if err != nil {
				b.Fatal(err)
			}
			defer cc.Close()
			client := inference.NewGRPCInferenceServiceClient(cc)
			req := inferReq(1)
			b.ReportAllocs()
			cpu := testenv.ProcessCPU(b)
			for b.Loop() {
				if _, err := client.ModelInfer(context.Background(), req); err != nil {
					b.Fatal(err)
				}
			}
			testenv.ReportCPU(b, cpu)
		})
	}
}
