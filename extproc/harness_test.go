package extproc

import (
	"bytes"
	"context"
	"encoding/binary"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/inferwatch/inferwatch/proto/inference"
	"github.com/inferwatch/inferwatch/record"
)

// collector is a sink that keeps copies of the records it sees.
type collector struct {
	mu   sync.Mutex
	recs []*record.Call
	ch   chan struct{}
}

func newCollector() *collector { return &collector{ch: make(chan struct{}, 1024)} }

func (c *collector) Observe(r *record.Call) {
	cp := *r
	c.mu.Lock()
	c.recs = append(c.recs, &cp)
	c.mu.Unlock()
	c.ch <- struct{}{}
}

// wait returns the n-th record (1-based) once it arrived.
func (c *collector) wait(t *testing.T, n int) *record.Call {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		c.mu.Lock()
		if len(c.recs) >= n {
			r := c.recs[n-1]
			c.mu.Unlock()
			return r
		}
		c.mu.Unlock()
		select {
		case <-c.ch:
		case <-deadline:
			t.Fatalf("record %d never arrived", n)
		}
	}
}

func (c *collector) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.recs)
}

// syncBuffer is a log destination safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// harness is a real gRPC ext_proc server on loopback and a client playing Envoy.
type harness struct {
	srv      *Server
	pipeline *record.Pipeline
	col      *collector
	logs     *syncBuffer
	client   extprocv3.ExternalProcessorClient
}

func newHarness(t testing.TB, o Options, sink record.Sink) *harness {
	t.Helper()
	col := newCollector()
	h := &harness{col: col, logs: &syncBuffer{}}
	// The collector last: a record it holds has reached sink too, so a
	// test that waits on it may read sink (a metric set) at once.
	var sinks record.Sinks
	if sink != nil {
		sinks = append(sinks, sink)
	}
	sinks = append(sinks, col)
	if o.Pipeline == nil {
		h.pipeline = record.NewPipeline(64, sinks, nil)
		o.Pipeline = h.pipeline
	} else {
		h.pipeline = o.Pipeline
	}
	o.Logger = slog.New(slog.NewTextHandler(h.logs, nil))
	srv, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	h.srv = srv
	g := grpc.NewServer(srv.ServerOptions()...)
	srv.Register(g)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(l)
	cc, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(1<<30)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cc.Close()
		g.Stop()
		h.pipeline.Close()
	})
	h.client = extprocv3.NewExternalProcessorClient(cc)
	return h
}

// headers builds an HttpHeaders message the way Envoy sends it: lower-case
// keys, values in raw_value.
func headers(eos bool, kv ...string) *extprocv3.HttpHeaders {
	m := &corev3.HeaderMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return &extprocv3.HttpHeaders{Headers: m, EndOfStream: eos}
}

func reqHeaders(h *extprocv3.HttpHeaders) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: h}}
}

func respHeaders(h *extprocv3.HttpHeaders) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: h}}
}

func reqBody(b []byte, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: b, EndOfStream: eos}}}
}

func respBody(b []byte, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: b, EndOfStream: eos}}}
}

func reqTrailers(kv ...string) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{RequestTrailers: &extprocv3.HttpTrailers{Trailers: headers(false, kv...).Headers}}}
}

func respTrailers(kv ...string) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseTrailers{ResponseTrailers: &extprocv3.HttpTrailers{Trailers: headers(false, kv...).Headers}}}
}

// withAttrs adds Envoy attributes under the filter's name.
func withAttrs(m *extprocv3.ProcessingRequest, fields map[string]any) *extprocv3.ProcessingRequest {
	s, err := structpb.NewStruct(fields)
	if err != nil {
		panic(err)
	}
	m.Attributes = map[string]*structpb.Struct{"envoy.filters.http.ext_proc": s}
	return m
}

func fullDuplex(m *extprocv3.ProcessingRequest) *extprocv3.ProcessingRequest {
	m.ProtocolConfig = &extprocv3.ProtocolConfiguration{
		RequestBodyMode:  filterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
		ResponseBodyMode: filterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
	}
	return m
}

func grpcMode(m *extprocv3.ProcessingRequest) *extprocv3.ProcessingRequest {
	m.ProtocolConfig = &extprocv3.ProtocolConfiguration{
		RequestBodyMode:  filterv3.ProcessingMode_GRPC,
		ResponseBodyMode: filterv3.ProcessingMode_GRPC,
	}
	return m
}

func observability(ms []*extprocv3.ProcessingRequest) []*extprocv3.ProcessingRequest {
	for _, m := range ms {
		m.ObservabilityMode = true
	}
	return ms
}

// frame puts a gRPC length prefix before a message.
func frame(m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		panic(err)
	}
	out := make([]byte, 5+len(b))
	binary.BigEndian.PutUint32(out[1:], uint32(len(b)))
	copy(out[5:], b)
	return out
}

func inferRequest(model, version string, batch int64, payload int) *inference.ModelInferRequest {
	return &inference.ModelInferRequest{
		ModelName: model, ModelVersion: version, Id: "req-1",
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: "FP32", Shape: []int64{batch, 784}}},
		RawInputContents: [][]byte{make([]byte, payload)},
	}
}

func inferResponse(model string, batch int64) *inference.ModelInferResponse {
	return &inference.ModelInferResponse{
		ModelName:         model,
		Outputs:           []*inference.ModelInferResponse_InferOutputTensor{{Name: "y", Datatype: "FP32", Shape: []int64{batch, 10}}},
		RawOutputContents: [][]byte{make([]byte, batch*40)},
	}
}

// exchange plays one Envoy stream: it sends each message and, unless it is
// in observability mode, reads its answer before the next; then it
// half-closes and reads to the end. It returns the answers.
func exchange(t testing.TB, h *harness, msgs []*extprocv3.ProcessingRequest) []*extprocv3.ProcessingResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := h.client.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var answers []*extprocv3.ProcessingResponse
	for i, m := range msgs {
		if err := st.Send(m); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		if m.ObservabilityMode {
			continue
		}
		a, err := st.Recv()
		if err != nil {
			t.Fatalf("answer to message %d: %v", i, err)
		}
		answers = append(answers, a)
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if a, err := st.Recv(); err == nil {
		t.Fatalf("an answer nobody asked for: %v", a)
	}
	return answers
}
