package main

import (
	"context"
	"encoding/binary"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/inferwatch/inferwatch/proto/inference"
)

var extprocLine = regexp.MustCompile(`msg="ext_proc serving" listen=(\S+)`)

func epHeaders(eos bool, kv ...string) *extprocv3.HttpHeaders {
	m := &corev3.HeaderMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return &extprocv3.HttpHeaders{Headers: m, EndOfStream: eos}
}

func grpcFramed(m proto.Message) []byte {
	b, _ := proto.Marshal(m)
	out := make([]byte, 5+len(b))
	binary.BigEndian.PutUint32(out[1:], uint32(len(b)))
	copy(out[5:], b)
	return out
}

// TestExtprocCommand runs `inferwatch extproc` (over TCP and over a Unix
// socket), plays Envoy for one KServe v2 gRPC call, and finds the call in
// the admin port's metrics; SIGTERM stops it cleanly.
func TestExtprocCommand(t *testing.T) {
	for _, tc := range []struct{ name, listen, dial string }{
		{"tcp", "127.0.0.1:0", ""},
		{"unix", "unix:" + filepath.Join(t.TempDir(), "extproc.sock"), "unix"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := start(t, "extproc", "extproc", "--listen", tc.listen, "--admin-listen", "127.0.0.1:0", "--no-tracing")
			listen := p.waitLine(extprocLine, 10*time.Second)[1]
			admin := p.waitLine(adminLine, 10*time.Second)[1]
			target := listen
			if tc.dial == "unix" {
				target = "unix:" + listen
			}
			cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			st, err := extprocv3.NewExternalProcessorClient(cc).Process(ctx)
			if err != nil {
				t.Fatal(err)
			}
			req := grpcFramed(&inference.ModelInferRequest{ModelName: "e2e-model", ModelVersion: "7",
				Inputs: []*inference.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: "FP32", Shape: []int64{2, 4}}}, RawInputContents: [][]byte{make([]byte, 32)}})
			msgs := []*extprocv3.ProcessingRequest{
				{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: epHeaders(false, ":method", "POST", ":path", "/inference.GRPCInferenceService/ModelInfer", "content-type", "application/grpc")}},
				{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: req, EndOfStream: true}}},
				{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: epHeaders(false, ":status", "200", "content-type", "application/grpc")}},
				{Request: &extprocv3.ProcessingRequest_ResponseTrailers{ResponseTrailers: &extprocv3.HttpTrailers{Trailers: epHeaders(false, "grpc-status", "0").Headers}}},
			}
			for _, m := range msgs {
				if err := st.Send(m); err != nil {
					t.Fatal(err)
				}
				if _, err := st.Recv(); err != nil {
					t.Fatal(err)
				}
			}
			st.CloseSend()
			if _, err := st.Recv(); err != io.EOF {
				t.Fatalf("stream end: %v", err)
			}
			want := `inferwatch_requests_total{protocol="grpc",api="kserve_v2",method="infer",model="e2e-model",version="7",code="OK"} 1`
			deadline := time.Now().Add(5 * time.Second)
			var body string
			for time.Now().Before(deadline) {
				res, err := http.Get("http://" + admin + "/metrics")
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if body = string(b); strings.Contains(body, want) {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			if !strings.Contains(body, want) || !strings.Contains(body, "inferwatch_extproc_errors_total") {
				t.Fatalf("metrics lack %s or the ext_proc error counters:\n%s", want, body)
			}
			p.signal(syscall.SIGTERM)
			if code := p.wait(15 * time.Second); code != 0 {
				t.Fatalf("exit code %d after SIGTERM", code)
			}
		})
	}
}
