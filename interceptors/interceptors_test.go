package interceptors

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/inferwatch/inferwatch/proto/inference"
	"github.com/inferwatch/inferwatch/record"
)

type collector struct {
	mu   sync.Mutex
	recs []*record.Call
}

func (c *collector) Observe(r *record.Call) {
	c.mu.Lock()
	c.recs = append(c.recs, r)
	c.mu.Unlock()
}

type echo struct {
	inference.UnimplementedGRPCInferenceServiceServer
}

// holding hears of each ModelInfer of model "hold", which echo holds until
// the call ends.
var holding = make(chan struct{}, 1)

func (echo) ModelInfer(ctx context.Context, r *inference.ModelInferRequest) (*inference.ModelInferResponse, error) {
	if r.ModelName == "hold" {
		holding <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	}
	time.Sleep(5 * time.Millisecond)
	return &inference.ModelInferResponse{ModelName: r.ModelName, RawOutputContents: r.RawInputContents,
		Outputs: []*inference.ModelInferResponse_InferOutputTensor{{Name: "y", Datatype: "UINT8", Shape: []int64{2, 8}}}}, nil
}

func TestStatsHandlerFillsRecord(t *testing.T) {
	col := &collector{}
	p := record.NewPipeline(16, col, nil)
	s := grpc.NewServer(grpc.StatsHandler(NewStatsHandler(p)))
	inference.RegisterGRPCInferenceServiceServer(s, echo{})
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	go s.Serve(l)
	defer s.Stop()
	cc, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	_, err = inference.NewGRPCInferenceServiceClient(cc).ModelInfer(context.Background(), &inference.ModelInferRequest{
		ModelName: "m", ModelVersion: "2",
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: "UINT8", Shape: []int64{2, 8}}},
		RawInputContents: [][]byte{make([]byte, 16)},
	})
	if err != nil {
		t.Fatal(err)
	}
	s.GracefulStop()
	p.Close()
	if len(col.recs) != 1 {
		t.Fatalf("%d records", len(col.recs))
	}
	c := col.recs[0]
	up, ok := c.Upstream()
	if c.Model != "m" || c.Version != "2" || c.API != record.APIKServeV2 || c.Code != "OK" || c.BatchSize != 2 ||
		c.Inputs[0].Bytes != 16 || c.OutputCount != 1 || !ok || up < 5*time.Millisecond {
		t.Fatalf("record: %+v (upstream %v)", c, up)
	}
}

// TestStatsHandlerOnClient: on a client (grpc.WithStatsHandler) the
// messages it sends are the requests and those it receives the responses,
// the reverse of a server's, and a call the client cancels is its own
// cancel.
func TestStatsHandlerOnClient(t *testing.T) {
	s := grpc.NewServer()
	inference.RegisterGRPCInferenceServiceServer(s, echo{})
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	go s.Serve(l)
	defer s.Stop()
	col := &collector{}
	p := record.NewPipeline(16, col, nil)
	cc, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStatsHandler(NewStatsHandler(p)))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	req := &inference.ModelInferRequest{
		ModelName: "m", ModelVersion: "2",
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: "UINT8", Shape: []int64{2, 8}}},
		RawInputContents: [][]byte{make([]byte, 1000)},
	}
	client := inference.NewGRPCInferenceServiceClient(cc)
	resp, err := client.ModelInfer(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	held := proto.Clone(req).(*inference.ModelInferRequest)
	held.ModelName = "hold"
	go func() {
		<-holding
		cancel()
	}()
	if _, err := client.ModelInfer(ctx, held); err == nil {
		t.Fatal("a cancelled call succeeded")
	}
	cc.Close()
	p.Close()
	if len(col.recs) != 2 {
		t.Fatalf("%d records", len(col.recs))
	}
	c := col.recs[0]
	reqBytes, respBytes := int64(proto.Size(req)+5), int64(proto.Size(resp)+5)
	if c.RequestBytes != reqBytes || c.ResponseBytes != respBytes || c.RequestMessages != 1 || c.ResponseMessages != 1 {
		t.Errorf("bytes %d/%d, messages %d/%d: want %d/%d, 1/1", c.RequestBytes, c.ResponseBytes, c.RequestMessages, c.ResponseMessages, reqBytes, respBytes)
	}
	if c.Model != "m" || c.Version != "2" || c.BatchSize != 2 || c.InputCount != 1 || c.Inputs[0].Bytes != 1000 || c.OutputCount != 1 || c.Code != "OK" {
		t.Errorf("record: %+v", c)
	}
	if up, ok := c.Upstream(); !ok || up < 5*time.Millisecond || c.FirstByte < c.RequestEnd || c.ResponseEnd < c.FirstByte {
		t.Errorf("phases: upstream %v (%v), request end %v, first byte %v, response end %v", up, ok, c.RequestEnd, c.FirstByte, c.ResponseEnd)
	}
	if c := col.recs[1]; c.Code != "CANCELLED" || c.ErrorKind != record.ErrClientCancel {
		t.Errorf("cancelled call: code %s, kind %q", c.Code, c.ErrorKind)
	}
}

func TestHTTPMiddleware(t *testing.T) {
	col := &collector{}
	p := record.NewPipeline(16, col, nil)
	h := HTTP(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		buf := make([]byte, 64)
		for {
			if _, err := r.Body.Read(buf); err != nil {
				break
			}
		}
		w.WriteHeader(http.StatusTeapot)
		w.Write([]byte("ok"))
	}), p, "")
	srv := httptest.NewServer(h)
	defer srv.Close()
	res, err := http.Post(srv.URL+"/v2/models/mlp/infer", "application/json", strings.NewReader(`{"inputs":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	srv.Close()
	p.Close()
	c := col.recs[0]
	if c.Model != "mlp" || c.Method != "infer" || c.Code != "418" || c.RequestBytes != 13 || c.ResponseBytes != 2 || c.RequestEnd == 0 {
		t.Fatalf("record: %+v", c)
	}
}

// TestHTTPMiddlewareCompressedBody: a gzip body (request or response) is
// passed on untouched and not counted as a decode failure, by the scan or
// the sampled walk; the same body uncompressed is decoded.
func TestHTTPMiddlewareCompressedBody(t *testing.T) {
	const plain = `{"inputs":[{"name":"x","shape":[1,2],"datatype":"FP32","data":[1,2]}]}`
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	io.WriteString(zw, plain)
	zw.Close()
	for _, sample := range []float64{-1, 1} {
		for _, enc := range []string{"gzip", ""} {
			body := []byte(plain)
			if enc != "" {
				body = gz.Bytes()
			}
			col := &collector{}
			rec, err := New(Options{DecodeSample: sample, NoTracing: true, Sinks: []record.Sink{col}})
			if err != nil {
				t.Fatal(err)
			}
			var got []byte
			srv := httptest.NewServer(rec.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got, _ = io.ReadAll(r.Body)
				w.Header().Set("Content-Type", "application/json")
				if enc != "" {
					w.Header().Set("Content-Encoding", enc)
				}
				w.Write(body) // the same JSON as the answer, as it came
			})))
			req, _ := http.NewRequest("POST", srv.URL+"/v2/models/mlp/infer", bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			if enc != "" {
				req.Header.Set("Content-Encoding", enc)
			}
			res, err := (&http.Client{Transport: &http.Transport{DisableCompression: true}}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			srv.Close()
			rec.Close(context.Background())
			c := col.all()[0]
			wantBatch := 1
			if enc != "" {
				wantBatch = 0
			}
			if !bytes.Equal(got, body) || c.Code != "200" || c.DecodeFail || c.BatchSize != wantBatch {
				t.Errorf("sample %v, encoding %q: handler read %d of %d bytes; record code %q, decode failed %v, batch %d (want %d)",
					sample, enc, len(got), len(body), c.Code, c.DecodeFail, c.BatchSize, wantBatch)
			}
		}
	}
}

// TestHTTPMiddlewareTGIStages: an OpenAI-compatible handler that reports
// its stages in TGI's x-*-time headers has them in the record, as the
// sidecar reads them.
func TestHTTPMiddlewareTGIStages(t *testing.T) {
	col := &collector{}
	p := record.NewPipeline(16, col, nil)
	h := HTTP(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Queue-Time", "7")
		w.Header().Set("X-Inference-Time", "25")
		io.WriteString(w, `{"model":"llm","choices":[]}`)
	}), p, "")
	srv := httptest.NewServer(h)
	defer srv.Close()
	res, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"llm","messages":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	srv.Close()
	p.Close()
	st := col.recs[0].Stages
	if len(st) != 2 || st[0].Name != "queue" || st[0].Duration != 7*time.Millisecond || st[1].Name != "inference" || st[1].Duration != 25*time.Millisecond {
		t.Fatalf("stages %+v, want queue 7ms and inference 25ms", st)
	}
}

// TestHTTPMiddlewareStreams: a handler that streams server-sent events
// through the middleware still finds http.Flusher (as most SSE handlers
// assert it) and its events reach the client as flushed; an
// OpenAI-compatible stream gets the LLM record the sidecar would make.
func TestHTTPMiddlewareStreams(t *testing.T) {
	col := &collector{}
	p := record.NewPipeline(16, col, nil)
	next := make(chan struct{})
	h := HTTP(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		f, ok := w.(http.Flusher)
		if !ok {
			http.Error(w, "streaming unsupported", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, `data: {"choices":[{"index":0,"delta":{"content":"a"}}]}`+"\n\n")
		f.Flush()
		<-next // the client has the first event before the handler goes on
		io.WriteString(w, `data: {"choices":[{"index":0,"delta":{"content":"b"}}]}`+"\n\n")
		io.WriteString(w, `data: {"choices":[{"index":0,"delta":{"content":"c"}}]}`+"\n\n")
		f.Flush()
		io.WriteString(w, `data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":2,"completion_tokens":3,"total_tokens":5}}`+"\n\ndata: [DONE]\n\n")
	}), p, "")
	srv := httptest.NewServer(h)
	defer srv.Close()
	res, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"llm","stream":true,"messages":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		t.Fatalf("status %d: %s", res.StatusCode, b)
	}
	first := make([]byte, 64)
	if _, err := io.ReadAtLeast(res.Body, first, 20); err != nil {
		t.Fatalf("first event: %v", err)
	}
	close(next)
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	srv.Close()
	p.Close()
	l := col.recs[0].LLM
	if l == nil || !l.Streamed || l.ContentEvents != 3 || l.Gaps.Count != 2 || l.OutputTokens != 3 || l.TokensEstimated || l.FinishReason != "stop" ||
		l.FirstToken <= 0 || l.LastToken < l.FirstToken {
		t.Fatalf("LLM record %+v", l)
	}
}

// TestHTTPMiddlewareHandlerPanics: a handler that panics (as
// httputil.ReverseProxy does with http.ErrAbortHandler when a copy breaks)
// still leaves a record, hands its captures' budget back, and the panic
// reaches net/http unchanged, which ends the response.
func TestHTTPMiddlewareHandlerPanics(t *testing.T) {
	col := &collector{}
	rec, err := New(Options{NoTracing: true, Sinks: []record.Sink{col}})
	if err != nil {
		t.Fatal(err)
	}
	full := rec.budget.Left()
	var recovered any
	h := rec.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"model_name":"mlp","outputs":[`)
		panic(http.ErrAbortHandler)
	}))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			recovered = recover()
			panic(recovered) // on to net/http, as without this wrapper
		}()
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	res, err := http.Post(srv.URL+"/v2/models/mlp/infer", "application/json", strings.NewReader(`{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1]}]}`))
	if err == nil {
		_, err = io.ReadAll(res.Body)
		res.Body.Close()
	}
	if err == nil {
		t.Errorf("the client got a whole answer from a handler that panicked")
	}
	srv.Close()
	rec.Close(context.Background())
	if recovered != http.ErrAbortHandler {
		t.Errorf("the panic reached the server as %v, want http.ErrAbortHandler", recovered)
	}
	recs := col.all()
	if len(recs) != 1 {
		t.Fatalf("%d records, want 1", len(recs))
	}
	if c := recs[0]; c.Code != "500" || c.ErrorKind != record.ErrUpstreamUnavailable || c.InputCount != 1 {
		t.Errorf("record: code %q, error %q, inputs %d; want 500, %s, 1", c.Code, c.ErrorKind, c.InputCount, record.ErrUpstreamUnavailable)
	}
	if left := rec.budget.Left(); left != full {
		t.Errorf("capture budget %d after the call, want all %d back", left, full)
	}
}

func (c *collector) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.recs)
}

func (c *collector) all() []*record.Call {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*record.Call(nil), c.recs...)
}

// TestMiddlewareDecodeSample: every HTTP infer call's bodies fill the
// record; only the decode sample's are validated and timed as the decode
// phase (default 1 %, negative never, 1 always).
func TestMiddlewareDecodeSample(t *testing.T) {
	const body = `{"inputs":[{"name":"x","shape":[2,2],"datatype":"FP32","data":[1,2,3,4.]}]}` // "4." parses only when not validated
	for _, tc := range []struct {
		sample        float64
		calls         int
		wantValidated int
	}{{0, 50, 0}, {-1, 5, 0}, {1, 5, 5}, {0.5, 6, 3}} {
		col := &collector{}
		rec, err := New(Options{DecodeSample: tc.sample, NoTracing: true, Sinks: []record.Sink{col}})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(rec.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
		})))
		for range tc.calls {
			res, err := http.Post(srv.URL+"/v2/models/mlp/infer", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
		}
		srv.Close()
		rec.Close(context.Background())
		validated := 0
		for _, c := range col.all() {
			if c.InputCount != 1 || c.BatchSize != 2 || c.DecodeRan != c.DecodeFail {
				t.Fatalf("sample %v: inputs %d batch %d, decode ran %v failed %v", tc.sample, c.InputCount, c.BatchSize, c.DecodeRan, c.DecodeFail)
			}
			if c.DecodeRan {
				validated++
			}
		}
		if n := len(col.all()); n != tc.calls || validated != tc.wantValidated {
			t.Errorf("sample %v: %d records, %d validated, want %d and %d", tc.sample, n, validated, tc.calls, tc.wantValidated)
		}
	}
}

// TestHTTPMiddlewareUpgrade: a handler behind the middleware that upgrades
// the connection (a WebSocket endpoint, OpenAI's /v1/realtime) still finds
// http.Hijacker, as such handlers assert it; the record says 101 and counts
// nothing that went over the hijacked connection.
func TestHTTPMiddlewareUpgrade(t *testing.T) {
	col := &collector{}
	p := record.NewPipeline(16, col, nil)
	h := HTTP(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hj, ok := w.(http.Hijacker)
		if !ok {
			http.Error(w, "upgrade unsupported", http.StatusInternalServerError)
			return
		}
		conn, brw, err := hj.Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		line, _ := brw.ReadString('\n')
		brw.WriteString(line)
		brw.Flush()
	}), p, "")
	// The server does not wait for the handler of a hijacked connection.
	served := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(served)
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, "GET /v1/realtime?model=llm HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	br := bufio.NewReader(conn)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	switched := time.Now()
	if res.StatusCode != http.StatusSwitchingProtocols {
		b, _ := io.ReadAll(res.Body)
		t.Fatalf("status %d: %s", res.StatusCode, b)
	}
	io.WriteString(conn, "ping over the upgraded connection\n")
	if line, err := br.ReadString('\n'); err != nil || line != "ping over the upgraded connection\n" {
		t.Fatalf("echo over the upgraded connection: %q, %v", line, err)
	}
	conn.Close()
	<-served
	srv.Close()
	p.Close()
	if len(col.recs) != 1 {
		t.Fatalf("%d records", len(col.recs))
	}
	c := col.recs[0]
	if c.Code != "101" || c.ResponseBytes != 0 || c.ErrorKind != record.ErrNone || c.FirstByte <= 0 || c.FirstByte > c.End || !c.Stream {
		t.Errorf("record: code %q, response bytes %d, error %q, first byte %v of %v, stream %v; want 101, 0, none, at the hijack, a stream", c.Code, c.ResponseBytes, c.ErrorKind, c.FirstByte, c.End, c.Stream)
	}
	// The handshake's record, not the session's: it ended before the
	// client had its 101 (the session went on after).
	if end := c.Start.Add(c.End); end.After(switched) {
		t.Errorf("record ends %v after the client had its 101", end.Sub(switched))
	}
}

// TestHTTPMiddlewareStatusReadiness: a REST model status answer says
// readiness in its body (TF Serving answers 200 while a version loads),
// and the middleware reads it as the sidecar does; a status call is never
// the decode sample.
func TestHTTPMiddlewareStatusReadiness(t *testing.T) {
	for _, tc := range []struct {
		body string
		want record.Readiness
	}{
		{`{"model_version_status":[{"version":"1","state":"LOADING"}]}`, record.ReadyNo},
		{`{"model_version_status":[{"version":"1","state":"AVAILABLE"}]}`, record.ReadyYes},
		{`{"name":"m","ready":true}`, record.ReadyYes},
	} {
		col := &collector{}
		rec, err := New(Options{DecodeSample: 1, NoTracing: true, Sinks: []record.Sink{col}})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(rec.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, tc.body)
		})))
		res, err := http.Get(srv.URL + "/v1/models/m")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		srv.Close()
		rec.Close(context.Background())
		if c := col.all()[0]; c.Ready != tc.want || c.Method != "model_ready" || c.DecodeRan || c.DecodeFail {
			t.Errorf("%s: ready %v method %q decode ran %v failed %v; want %v, model_ready, no decode phase", tc.body, c.Ready, c.Method, c.DecodeRan, c.DecodeFail, tc.want)
		}
	}
}

// TestHTTPMiddlewareInformational: a 1xx the handler sends ahead of its
// answer (103 Early Hints) is not the call's status, nor the moment the
// answer's kind is known: the record has the final status, and an event
// stream after it is timed.
func TestHTTPMiddlewareInformational(t *testing.T) {
	col := &collector{}
	p := record.NewPipeline(16, col, nil)
	h := HTTP(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		if r.URL.Path == "/v1/chat/completions" {
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			w.Write([]byte("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\ndata: [DONE]\n\n"))
			return
		}
		w.WriteHeader(http.StatusTeapot)
	}), p, "")
	srv := httptest.NewServer(h)
	defer srv.Close()
	for _, path := range []string{"/v2/models/mlp/infer", "/v1/chat/completions"} {
		res, err := http.Post(srv.URL+path, "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	srv.Close()
	p.Close()
	recs := col.all()
	if len(recs) != 2 {
		t.Fatalf("%d records", len(recs))
	}
	for _, c := range recs {
		switch c.Method {
		case "infer":
			if c.Code != "418" {
				t.Errorf("infer: code %s, want 418", c.Code)
			}
		case "chat_completions":
			if c.Code != "200" || c.LLM == nil || c.LLM.ContentEvents != 1 {
				t.Errorf("chat: code %s, LLM %+v; want 200 and one content event", c.Code, c.LLM)
			}
		}
	}
}
