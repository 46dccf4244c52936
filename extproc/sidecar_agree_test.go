package extproc

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/inferwatch/inferwatch/config"
	"github.com/inferwatch/inferwatch/proto/inference"
	"github.com/inferwatch/inferwatch/proto/tfserving"
	"github.com/inferwatch/inferwatch/record"
	"github.com/inferwatch/inferwatch/sidecar"
)

// runSidecar puts a real sidecar in front of upstream and returns its
// address and the records it made.
func runSidecar(t *testing.T, protocol, upstream string) (string, *collector) {
	t.Helper()
	col := newCollector()
	cfg := config.Default()
	cfg.AdminListen = "127.0.0.1:0"
	no := false
	cfg.Routes = []config.Route{{Name: protocol, Protocol: protocol, Listen: "127.0.0.1:0", Upstream: upstream,
		MaxMessageBytes: config.DefaultMaxMessageBytes, Readiness: "none", TritonStats: config.TritonStats{Enabled: &no}}}
	cfg.Host.GPUDisabled, cfg.Host.BPFDisabled = true, true
	cfg.Tracing.Disabled = true
	cfg.Finish()
	sc, err := sidecar.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), col)
	if err != nil {
		t.Fatal(err)
	}
	if err := sc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		sc.Shutdown(ctx)
	})
	return sc.RouteAddrs()[0].String(), col
}

// httpSidecar serves handler as an HTTP upstream and puts a real sidecar in
// front of it, returning the sidecar's address and its records.
func httpSidecar(t *testing.T, handler http.HandlerFunc) (string, *collector) {
	t.Helper()
	up := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: handler}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go up.Serve(l)
	t.Cleanup(func() { up.Close() })
	return runSidecar(t, "http", l.Addr().String())
}

// sidecarCall POSTs a JSON body (with any extra headers, compression left
// to the caller) through the sidecar and returns the record it made.
func sidecarCall(t *testing.T, col *collector, url string, body []byte, hdr http.Header) *record.Call {
	t.Helper()
	req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header[k] = v
	}
	res, err := (&http.Client{Transport: &http.Transport{DisableCompression: true}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return col.wait(t, 1)
}

func gzipped(b []byte) []byte {
	var out bytes.Buffer
	w := gzip.NewWriter(&out)
	w.Write(b)
	w.Close()
	return out.Bytes()
}

// callView is what a front reads from a call's bytes, not its timing.
func callView(c *record.Call) string {
	return fmt.Sprintf("%s %s %s model=%q version=%q code=%s stream=%v bytes=%d/%d msgs=%d/%d batch=%d in=%d%v out=%d%v stages=%v decodefail=%v ready=%v",
		c.Protocol, c.API, c.Method, c.Model, c.Version, c.Code, c.Stream, c.RequestBytes, c.ResponseBytes,
		c.RequestMessages, c.ResponseMessages, c.BatchSize, c.InputCount, c.Inputs, c.OutputCount, c.Outputs, c.Stages, c.DecodeFail, c.Ready)
}

type timedModel struct {
	inference.UnimplementedGRPCInferenceServiceServer
}

func (timedModel) ModelInfer(ctx context.Context, r *inference.ModelInferRequest) (*inference.ModelInferResponse, error) {
	grpc.SetTrailer(ctx, metadata.Pairs("server-timing", "queue;dur=0.5, infer;dur=2"))
	return inferResponse(r.ModelName, r.Inputs[0].Shape[0]), nil
}

// tfModel answers TensorFlow Serving's Predict with the version that
// served and its inputs as outputs.
type tfModel struct {
	tfserving.UnimplementedPredictionServiceServer
}

func (tfModel) Predict(_ context.Context, r *tfserving.PredictRequest) (*tfserving.PredictResponse, error) {
	return &tfserving.PredictResponse{
		ModelSpec: &tfserving.ModelSpec{Name: r.GetModelSpec().GetName(), VersionChoice: &tfserving.ModelSpec_Version{Version: &tfserving.Int64Value{Value: 2}}},
		Outputs:   r.Inputs,
	}, nil
}

// grpcSidecar serves what register registers on a gRPC server, puts a
// sidecar in front of it, and returns a client of the sidecar and its
// records.
func grpcSidecar(t *testing.T, register func(*grpc.Server)) (*grpc.ClientConn, *collector) {
	t.Helper()
	g := grpc.NewServer()
	register(g)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(l)
	t.Cleanup(g.Stop)
	addr, col := runSidecar(t, "grpc", l.Addr().String())
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc, col
}

// TestSameRecordAsSidecar: a call made through a real sidecar, and the same
// call's bytes as Envoy would stream them to ext_proc, give the same record
// (everything read from the call; the timing is each front's own).
func TestSameRecordAsSidecar(t *testing.T) {
	t.Run("grpc", func(t *testing.T) {
		cc, scCol := grpcSidecar(t, func(g *grpc.Server) { inference.RegisterGRPCInferenceServiceServer(g, timedModel{}) })
		req := inferRequest("mlp", "3", 4, 4*784*4)
		if _, err := inference.NewGRPCInferenceServiceClient(cc).ModelInfer(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		side := scCol.wait(t, 1)

		h := newHarness(t, Options{}, nil)
		greq, gresp := frame(req), frame(inferResponse("mlp", 4))
		exchange(t, h, []*extprocv3.ProcessingRequest{
			reqHeaders(headers(false, ":method", "POST", ":path", inferPath, "content-type", "application/grpc", "te", "trailers")),
			reqBody(greq[:1000], false), reqBody(greq[1000:], true),
			respHeaders(headers(false, ":status", "200", "content-type", "application/grpc")),
			respBody(gresp, false),
			respTrailers("grpc-status", "0", "server-timing", "queue;dur=0.5, infer;dur=2"),
		})
		ep := h.col.wait(t, 1)
		if a, b := callView(ep), callView(side); a != b {
			t.Fatalf("records differ:\n ext_proc %s\n sidecar  %s", a, b)
		}
	})
	// TensorFlow Serving's Predict: the model, the version label, the
	// tensors and the version that served, read from TF's own messages.
	t.Run("grpc_tfserving", func(t *testing.T) {
		cc, scCol := grpcSidecar(t, func(g *grpc.Server) { tfserving.RegisterPredictionServiceServer(g, tfModel{}) })
		req := &tfserving.PredictRequest{
			ModelSpec: &tfserving.ModelSpec{Name: "resnet", VersionChoice: &tfserving.ModelSpec_VersionLabel{VersionLabel: "stable"}},
			Inputs: map[string]*tfserving.TensorProto{"images": {Dtype: tfserving.DataType_DT_FLOAT,
				TensorShape:   &tfserving.TensorShapeProto{Dim: []*tfserving.TensorShapeProto_Dim{{Size: 4}, {Size: 784}}},
				TensorContent: make([]byte, 4*784*4)}},
		}
		resp, err := tfserving.NewPredictionServiceClient(cc).Predict(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		side := scCol.wait(t, 1)

		h := newHarness(t, Options{}, nil)
		greq, gresp := frame(req), frame(resp)
		exchange(t, h, []*extprocv3.ProcessingRequest{
			reqHeaders(headers(false, ":method", "POST", ":path", "/tensorflow.serving.PredictionService/Predict", "content-type", "application/grpc", "te", "trailers")),
			reqBody(greq[:1000], false), reqBody(greq[1000:], true),
			respHeaders(headers(false, ":status", "200", "content-type", "application/grpc")),
			respBody(gresp, false),
			respTrailers("grpc-status", "0"),
		})
		ep := h.col.wait(t, 1)
		if a, b := callView(ep), callView(side); a != b {
			t.Fatalf("records differ:\n ext_proc %s\n sidecar  %s", a, b)
		}
		if side.API != record.APITFServing || side.Model != "resnet" || side.Version != "stable" || side.InputCount != 1 || side.OutputCount != 1 {
			t.Fatalf("sidecar record: %s", callView(side))
		}
	})
	// An OpenAI-compatible server that reports its stages as TGI does, in
	// x-*-time headers of a non-streamed answer: both fronts read them.
	t.Run("openai tgi", func(t *testing.T) {
		const chatReq = `{"model":"llm","messages":[{"role":"user","content":"hi"}]}`
		const chatResp = `{"id":"1","object":"chat.completion","model":"llm","choices":[{"index":0,"message":{"role":"assistant","content":"hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`
		addr, scCol := httpSidecar(t, func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("X-Validation-Time", "1")
			w.Header().Set("X-Queue-Time", "7")
			w.Header().Set("X-Inference-Time", "25")
			io.WriteString(w, chatResp)
		})
		side := sidecarCall(t, scCol, "http://"+addr+"/v1/chat/completions", []byte(chatReq), nil)

		h := newHarness(t, Options{CaptureBytes: 1 << 20}, nil)
		exchange(t, h, []*extprocv3.ProcessingRequest{
			reqHeaders(headers(false, ":method", "POST", ":path", "/v1/chat/completions", "content-type", "application/json")),
			reqBody([]byte(chatReq), true),
			respHeaders(headers(false, ":status", "200", "content-type", "application/json",
				"x-validation-time", "1", "x-queue-time", "7", "x-inference-time", "25")),
			respBody([]byte(chatResp), true),
		})
		ep := h.col.wait(t, 1)
		if a, b := callView(ep), callView(side); a != b {
			t.Fatalf("records differ:\n ext_proc %s\n sidecar  %s", a, b)
		}
		if len(ep.Stages) != 3 || ep.Stages[1].Name != "queue" || ep.Stages[1].Duration != 7*time.Millisecond {
			t.Fatalf("stages %+v, want validation, queue (7ms), inference", ep.Stages)
		}
	})
	// A streamed chat completion: both fronts time its events as they pass
	// and read the same generation from them.
	t.Run("openai stream", func(t *testing.T) {
		const chatReq = `{"model":"llm","stream":true,"messages":[{"role":"user","content":"hi"}]}`
		events := []string{
			`data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}` + "\n\n",
			`data: {"choices":[{"index":0,"delta":{"content":"a"}}]}` + "\n\n",
			`data: {"choices":[{"index":0,"delta":{"content":"b"}}]}` + "\n\n",
			`data: {"choices":[{"index":0,"delta":{"content":"c"}}]}` + "\n\n",
			`data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":4,"completion_tokens":3,"total_tokens":7}}` + "\n\ndata: [DONE]\n\n",
		}
		addr, scCol := httpSidecar(t, func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "text/event-stream")
			for _, e := range events {
				io.WriteString(w, e)
				w.(http.Flusher).Flush()
				time.Sleep(5 * time.Millisecond)
			}
		})
		side := sidecarCall(t, scCol, "http://"+addr+"/v1/chat/completions", []byte(chatReq), nil)

		h := newHarness(t, Options{CaptureBytes: 1 << 20}, nil)
		msgs := []*extprocv3.ProcessingRequest{
			reqHeaders(headers(false, ":method", "POST", ":path", "/v1/chat/completions", "content-type", "application/json")),
			reqBody([]byte(chatReq), true),
			respHeaders(headers(false, ":status", "200", "content-type", "text/event-stream")),
		}
		for i, e := range events {
			msgs = append(msgs, respBody([]byte(e), i == len(events)-1))
		}
		exchange(t, h, msgs)
		ep := h.col.wait(t, 1)
		if a, b := callView(ep), callView(side); a != b {
			t.Fatalf("records differ:\n ext_proc %s\n sidecar  %s", a, b)
		}
		llmView := func(l *record.LLM) string {
			if l == nil {
				return "no LLM record"
			}
			return fmt.Sprintf("streamed=%v events=%d gaps=%d tokens=%d/%d estimated=%v finish=%q first>0=%v last>=first=%v upstream>0=%v",
				l.Streamed, l.ContentEvents, l.Gaps.Count, l.PromptTokens, l.OutputTokens, l.TokensEstimated, l.FinishReason,
				l.FirstToken > 0, l.LastToken >= l.FirstToken, l.FirstTokenUpstream > 0)
		}
		if a, b := llmView(ep.LLM), llmView(side.LLM); a != b || side.LLM.ContentEvents != 3 {
			t.Fatalf("LLM records differ:\n ext_proc %s\n sidecar  %s", a, b)
		}
	})
	// A REST model status answer whose readiness is in its body (TF
	// Serving answers 200 while a version loads): both fronts read it.
	t.Run("http status", func(t *testing.T) {
		const status = `{"model_version_status":[{"version":"1","state":"LOADING","status":{"error_code":"OK","error_message":""}}]}`
		addr, scCol := httpSidecar(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, status)
		})
		res, err := http.Get("http://" + addr + "/v1/models/resnet")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		side := scCol.wait(t, 1)

		h := newHarness(t, Options{CaptureBytes: 1 << 20}, nil)
		exchange(t, h, []*extprocv3.ProcessingRequest{
			reqHeaders(headers(true, ":method", "GET", ":path", "/v1/models/resnet")),
			respHeaders(headers(false, ":status", "200", "content-type", "application/json")),
			respBody([]byte(status), true),
		})
		ep := h.col.wait(t, 1)
		if a, b := callView(ep), callView(side); a != b {
			t.Fatalf("records differ:\n ext_proc %s\n sidecar  %s", a, b)
		}
		if side.Ready != record.ReadyNo || side.Method != "model_ready" || side.Model != "resnet" {
			t.Fatalf("sidecar record: %s", callView(side))
		}
	})
	// Plain JSON, then the same compressed both ways: a gzip body is not
	// read (and not a decode failure) by either front.
	for _, enc := range []string{"", "gzip"} {
		t.Run("http"+enc, func(t *testing.T) {
			reqB, respB := []byte(jsonReq), []byte(jsonResp)
			var encHdr []string
			if enc != "" {
				reqB, respB, encHdr = gzipped(reqB), gzipped(respB), []string{"content-encoding", enc}
			}
			addr, scCol := httpSidecar(t, func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Server-Timing", "infer;dur=3")
				if enc != "" {
					w.Header().Set("Content-Encoding", enc)
				}
				w.Write(respB)
			})
			var hdr http.Header
			if enc != "" {
				hdr = http.Header{"Content-Encoding": {enc}}
			}
			side := sidecarCall(t, scCol, "http://"+addr+"/v2/models/mlp/versions/3/infer", reqB, hdr)

			h := newHarness(t, Options{CaptureBytes: 1 << 20}, nil)
			exchange(t, h, []*extprocv3.ProcessingRequest{
				reqHeaders(headers(false, append([]string{":method", "POST", ":path", "/v2/models/mlp/versions/3/infer", "content-type", "application/json"}, encHdr...)...)),
				reqBody(reqB[:30], false), reqBody(reqB[30:], true),
				respHeaders(headers(false, append([]string{":status", "200", "content-type", "application/json", "server-timing", "infer;dur=3"}, encHdr...)...)),
				respBody(respB, true),
			})
			ep := h.col.wait(t, 1)
			if a, b := callView(ep), callView(side); a != b {
				t.Fatalf("records differ:\n ext_proc %s\n sidecar  %s", a, b)
			}
			// Outside the decode sample (1% for the sidecar, none here) both
			// read the bodies with the bracket scan: fields, no decode phase.
			read := ep.InputCount != 0 && ep.OutputCount != 0
			if read != (enc == "") || ep.DecodeFail || ep.DecodeRan || side.DecodeRan {
				t.Fatalf("encoding %q: inputs %d outputs %d, decode failed %v, decode phase: ext_proc %v sidecar %v", enc, ep.InputCount, ep.OutputCount, ep.DecodeFail, ep.DecodeRan, side.DecodeRan)
			}
		})
	}
}
