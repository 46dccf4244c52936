package tracing

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/inferwatch/inferwatch/proto/inference"
	"github.com/inferwatch/inferwatch/proxy"
	"github.com/inferwatch/inferwatch/record"
)

var discardLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

// sidecar is an in-process proxy in front of one upstream, tracing with tr.
type sidecar struct {
	addr     string
	pipeline *record.Pipeline
	server   *proxy.Server
	tr       *proxy.Transport
}

func startSidecar(t testing.TB, route, upstream string, grpcUp bool, tr *Tracer) *sidecar {
	t.Helper()
	s := &sidecar{}
	var sink record.Sink = record.SinkFunc(func(*record.Call) {})
	var hook proxy.TraceContext
	if tr != nil {
		sink, hook = tr, tr
	}
	s.pipeline = record.NewPipeline(1<<14, sink, nil)
	proto := proxy.UpstreamHTTP1
	if grpcUp {
		proto = proxy.UpstreamHTTP2
	}
	s.tr = proxy.NewTransport(proxy.TransportOptions{Protocol: proto})
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	h := proxy.NewHandler(proxy.Options{Route: route, Upstream: upstream, Transport: s.tr, Pipeline: s.pipeline,
		Logger: logger, MaxMessageBytes: 64 << 20, CaptureBytes: 1 << 20, DecodeSample: 1, DecodeMaxBytes: 4 << 20,
		UpstreamRTT: s.tr.RTT, Trace: hook})
	l := proxy.Listener{Name: route, Addr: "127.0.0.1:0", Handler: h}
	if grpcUp && os.Getenv("INFERWATCH_DATA_PLANE") == "frame" { // CI runs these on both planes
		f, err := proxy.NewFramePlane(h, s.tr, upstream, 0)
		if err != nil {
			t.Fatal(err)
		}
		l.Frames = f
	}
	s.server = proxy.NewServer(logger, l)
	if err := s.server.Listen(); err != nil {
		t.Fatal(err)
	}
	s.addr = s.server.Addrs()[0].String()
	go s.server.Serve()
	t.Cleanup(s.stop)
	return s
}

// stop drains the proxy and delivers every record to the sinks.
func (s *sidecar) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.server.Shutdown(ctx)
	s.pipeline.Close()
	s.tr.CloseIdleConnections()
}

const inferBody = `{"id":"1","inputs":[{"name":"input","datatype":"FP32","shape":[1,4],"data":[1,2,3,4]}]}`

// httpModel serves KServe v2 infer over HTTP; each call passes its request
// headers to onCall, which may return the upstream's own work (run inside).
func httpModel(t testing.TB, onCall func(r *http.Request) func()) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v2/models/{m}/infer", func(w http.ResponseWriter, r *http.Request) {
		done := func() {}
		if onCall != nil {
			done = onCall(r)
		}
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Server-Timing", "queue;dur=0.2, infer;dur=0.8")
		w.Header().Set("Content-Type", "application/json")
		done()
		io.WriteString(w, `{"model_name":"`+r.PathValue("m")+`","outputs":[{"name":"out","datatype":"FP32","shape":[1,2],"data":[0.5,0.5]}]}`)
	})
	return serveHTTP(t, mux)
}

// grpcModel serves KServe v2 ModelInfer over gRPC, calling onCall with the
// incoming metadata first.
type grpcModel struct {
	inference.UnimplementedGRPCInferenceServiceServer
	onCall func(ctx context.Context, md metadata.MD) func()
}

func (g grpcModel) ModelInfer(ctx context.Context, req *inference.ModelInferRequest) (*inference.ModelInferResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	done := func() {}
	if g.onCall != nil {
		done = g.onCall(ctx, md)
	}
	defer done()
	grpc.SetTrailer(ctx, metadata.Pairs("server-timing", "queue;dur=0.1, infer;dur=0.5"))
	res := &inference.ModelInferResponse{ModelName: req.ModelName, Id: req.Id}
	for _, in := range req.Inputs {
		res.Outputs = append(res.Outputs, &inference.ModelInferResponse_InferOutputTensor{Name: "out-" + in.Name, Datatype: in.Datatype, Shape: in.Shape})
	}
	return res, nil
}

// serveHTTP serves h on a loopback port until the test ends.
func serveHTTP(t testing.TB, h http.Handler) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return l.Addr().String()
}

func startGRPCModel(t testing.TB, m grpcModel) string {
	t.Helper()
	s := grpc.NewServer()
	inference.RegisterGRPCInferenceServiceServer(s, m)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(l)
	t.Cleanup(s.Stop)
	return l.Addr().String()
}

// postInfer sends one HTTP infer through addr with extra headers.
func postInfer(c *http.Client, addr, model string, hdr map[string]string) error {
	req, err := http.NewRequest("POST", "http://"+addr+"/v2/models/"+model+"/infer", strings.NewReader(inferBody))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := c.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
		return err
	}
	if res.StatusCode != 200 {
		return &statusError{res.Status}
	}
	return nil
}

type statusError struct{ s string }

func (e *statusError) Error() string { return "status " + e.s }
