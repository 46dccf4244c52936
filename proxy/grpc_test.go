package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/inferwatch/inferwatch/proto/inference"
	"github.com/inferwatch/inferwatch/record"
)

// rawCodec moves message bytes untouched, so a test compares exact bytes.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" } // KServe calls: the server decodes protobuf

// rawSubtype is the same codec registered as content-subtype "raw", which
// the upstream's unknown-service handler uses to see message bytes as sent.
type rawSubtype struct{ rawCodec }

func (rawSubtype) Name() string { return "raw" }

func init() { encoding.RegisterCodec(rawSubtype{}) }

const maxMsg = 1 << 30

// kserveEcho answers ModelInfer with the inputs as outputs, and sets header
// and trailer metadata and a status from request parameters.
type kserveEcho struct {
	inference.UnimplementedGRPCInferenceServiceServer
}

func (kserveEcho) ModelInfer(ctx context.Context, req *inference.ModelInferRequest) (*inference.ModelInferResponse, error) {
	grpc.SetHeader(ctx, metadata.Pairs("x-model-header", req.ModelName))
	grpc.SetTrailer(ctx, metadata.Pairs("server-timing", "preprocess;dur=0.5, infer;dur=2.25", "x-trailer", "t-"+req.Id))
	if req.ModelName == "missing" {
		return nil, status.Error(codes.NotFound, "model missing: not loaded ünïcode")
	}
	res := &inference.ModelInferResponse{ModelName: req.ModelName, ModelVersion: req.ModelVersion, Id: req.Id, RawOutputContents: req.RawInputContents}
	for _, in := range req.Inputs {
		res.Outputs = append(res.Outputs, &inference.ModelInferResponse_InferOutputTensor{Name: in.Name, Datatype: in.Datatype, Shape: in.Shape, Contents: in.Contents})
	}
	return res, nil
}

func (kserveEcho) ModelStreamInfer(s grpc.BidiStreamingServer[inference.ModelInferRequest, inference.ModelStreamInferResponse]) error {
	for {
		req, err := s.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		res, _ := kserveEcho{}.ModelInfer(s.Context(), req)
		if err := s.Send(&inference.ModelStreamInferResponse{InferResponse: res}); err != nil {
			return err
		}
	}
}

// anyService answers every unknown method: it echoes each message it gets,
// reversed, plus a count, and ends with the status the metadata asks for.
func anyService(srv any, stream grpc.ServerStream) error {
	md, _ := metadata.FromIncomingContext(stream.Context())
	if c := md.Get("x-code-at-once"); len(c) > 0 {
		var code int
		fmt.Sscan(c[0], &code)
		return status.Error(codes.Code(code), "at once: "+c[0]) // a trailers-only response
	}
	stream.SetHeader(metadata.Pairs("x-echo-method", method(stream)))
	if d := md.Get("x-hold"); len(d) > 0 {
		if v, ok := holds.Load(d[0]); ok {
			h := v.(*upstreamHold)
			select {
			case h.arrived <- struct{}{}:
			default:
			}
			select {
			case <-h.release:
			case <-stream.Context().Done():
				h.ended <- stream.Context().Err()
				return stream.Context().Err()
			}
		}
	}
	if d := md.Get("x-sleep"); len(d) > 0 {
		dur, _ := time.ParseDuration(d[0])
		select {
		case <-time.After(dur):
		case <-stream.Context().Done():
			return stream.Context().Err()
		}
	}
	n := 0
	for {
		var m []byte
		err := stream.RecvMsg(&m)
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		n++
		out := append([]byte(nil), m...)
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
		if err := stream.SendMsg(&out); err != nil {
			return err
		}
	}
	last := []byte(fmt.Sprintf("count=%d", n))
	stream.SendMsg(&last)
	stream.SetTrailer(metadata.Pairs("x-count", fmt.Sprint(n)))
	if c := md.Get("x-code"); len(c) > 0 {
		var code int
		fmt.Sscan(c[0], &code)
		return status.Error(codes.Code(code), "asked for code "+c[0])
	}
	return nil
}

// upstreamHold holds anyService calls with metadata x-hold: <its name>
// until the test releases them (or their context ends), noting each
// arrival: a test acts once the upstream has its calls, not after a sleep
// that a loaded machine may outlast.
type upstreamHold struct {
	arrived chan struct{}
	release chan struct{}
	ended   chan error // a held call's context ended first
}

var holds sync.Map // name -> *upstreamHold

// newHold registers a hold for up to n calls under name.
func newHold(t *testing.T, name string, n int) *upstreamHold {
	t.Helper()
	h := &upstreamHold{arrived: make(chan struct{}, n), release: make(chan struct{}), ended: make(chan error, n)}
	holds.Store(name, h)
	t.Cleanup(func() { holds.Delete(name) })
	return h
}

// wait waits until n calls are held at the upstream.
func (h *upstreamHold) wait(t *testing.T, n int) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for i := range n {
		select {
		case <-h.arrived:
		case <-timeout:
			t.Fatalf("%d of %d calls reached the upstream in 10s", i, n)
		}
	}
}

func method(s grpc.ServerStream) string {
	m, _ := grpc.MethodFromServerStream(s)
	return m
}

// compressionSeen records the grpc-encoding the upstream received.
type compressionSeen struct {
	mu  sync.Mutex
	enc []string
}

func (c *compressionSeen) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	return ctx
}
func (c *compressionSeen) HandleRPC(_ context.Context, s stats.RPCStats) {
	if h, ok := s.(*stats.InHeader); ok {
		c.mu.Lock()
		c.enc = append(c.enc, h.Compression)
		c.mu.Unlock()
	}
}
func (c *compressionSeen) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (c *compressionSeen) HandleConn(context.Context, stats.ConnStats) {}

func startGRPCUpstream(t *testing.T) (string, *compressionSeen, func()) {
	t.Helper()
	seen := &compressionSeen{}
	s := grpc.NewServer(grpc.MaxRecvMsgSize(maxMsg), grpc.MaxSendMsgSize(maxMsg),
		grpc.UnknownServiceHandler(anyService), grpc.StatsHandler(seen))
	inference.RegisterGRPCInferenceServiceServer(s, kserveEcho{})
	l := listen(t)
	go s.Serve(l)
	return l.Addr().String(), seen, s.Stop
}

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsg), grpc.MaxCallSendMsgSize(maxMsg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// outcome is everything a client can observe of one call.
type outcome struct {
	msgs    [][]byte
	header  metadata.MD
	trailer metadata.MD
	code    codes.Code
	message string
}

func (o outcome) equal(p outcome) error {
	if len(o.msgs) != len(p.msgs) {
		return fmt.Errorf("messages: %d vs %d", len(o.msgs), len(p.msgs))
	}
	for i := range o.msgs {
		if !bytes.Equal(o.msgs[i], p.msgs[i]) {
			return fmt.Errorf("message %d differs (%d vs %d bytes)", i, len(o.msgs[i]), len(p.msgs[i]))
		}
	}
	if o.code != p.code || o.message != p.message {
		return fmt.Errorf("status %v %q vs %v %q", o.code, o.message, p.code, p.message)
	}
	for _, md := range [][2]metadata.MD{{o.header, p.header}, {o.trailer, p.trailer}} {
		a, b := mdString(strip(md[0])), mdString(strip(md[1]))
		if a != b {
			return fmt.Errorf("metadata %s vs %s", a, b)
		}
	}
	return nil
}

func mdString(md metadata.MD) string {
	var keys []string
	for k, v := range md {
		keys = append(keys, k+"="+strings.Join(v, "|"))
	}
	sort.Strings(keys)
	return strings.Join(keys, " ")
}

// strip drops the keys HTTP/2 itself varies per connection.
func strip(md metadata.MD) metadata.MD {
	out := metadata.MD{}
	for k, v := range md {
		if k == "date" {
			continue
		}
		out[k] = v
	}
	return out
}

// call runs one streaming call with raw messages.
func doCall(ctx context.Context, cc *grpc.ClientConn, method string, md metadata.MD, in [][]byte, opts ...grpc.CallOption) outcome {
	var o outcome
	ctx = metadata.NewOutgoingContext(ctx, md)
	var codec encoding.Codec = rawSubtype{}
	if strings.HasPrefix(method, "/inference.") {
		codec = rawCodec{}
	}
	opts = append(opts, grpc.ForceCodec(codec), grpc.Header(&o.header), grpc.Trailer(&o.trailer))
	s, err := cc.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, method, opts...)
	if err == nil {
		for _, m := range in {
			m := m
			if err = s.SendMsg(&m); err != nil {
				break
			}
		}
		s.CloseSend()
		for {
			var m []byte
			if err = s.RecvMsg(&m); err != nil {
				break
			}
			o.msgs = append(o.msgs, m)
		}
		if errors.Is(err, io.EOF) {
			err = nil
		}
	}
	st := status.Convert(err)
	o.code, o.message = st.Code(), st.Message()
	return o
}

func inferRequest(model string, payload int) []byte {
	raw := bytes.Repeat([]byte{0xAB}, payload)
	req := &inference.ModelInferRequest{ModelName: model, ModelVersion: "3", Id: "req-1",
		Inputs: []*inference.ModelInferRequest_InferInputTensor{
			{Name: "input", Datatype: "UINT8", Shape: []int64{1, int64(payload)}},
			{Name: "typed", Datatype: "FP32", Shape: []int64{2, 2}, Contents: &inference.InferTensorContents{Fp32Contents: []float32{1, 2, 3, 4}}},
		},
		RawInputContents: [][]byte{raw}}
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(req)
	return b
}

func TestGRPCTransparent(t *testing.T) {
	up, seen, stop := startGRPCUpstream(t)
	defer stop()
	h := newHarness(t, up, true)
	direct, proxied := dial(t, up), dial(t, h.addr)

	infer := "/inference.GRPCInferenceService/ModelInfer"
	tests := []struct {
		name   string
		method string
		md     metadata.MD
		in     [][]byte
		opts   []grpc.CallOption
	}{
		{"infer 4 B", infer, nil, [][]byte{inferRequest("m1", 4)}, nil},
		{"infer 1 MiB", infer, nil, [][]byte{inferRequest("m1", 1<<20)}, nil},
		{"infer 16 MiB", infer, nil, [][]byte{inferRequest("m1", 16<<20)}, nil},
		{"infer 64 MiB", infer, nil, [][]byte{inferRequest("m1", 64<<20)}, nil},
		{"infer error status", infer, nil, [][]byte{inferRequest("missing", 8)}, nil},
		{"infer gzip", infer, nil, [][]byte{inferRequest("m1", 100<<10)}, []grpc.CallOption{grpc.UseCompressor(gzip.Name)}},
		{"stream infer", "/inference.GRPCInferenceService/ModelStreamInfer", nil, [][]byte{inferRequest("m1", 10), inferRequest("m1", 20), inferRequest("m1", 30)}, nil},
		{"unknown unary", "/acme.Echo/Unary", metadata.Pairs("x-req", "v"), [][]byte{[]byte("hello")}, nil},
		{"unknown bidi 5", "/acme.Echo/Bidi", nil, [][]byte{[]byte("a"), []byte("bb"), []byte("ccc"), []byte("dddd"), bytes.Repeat([]byte("e"), 3<<20)}, nil},
		{"unknown client stream none", "/acme.Echo/ClientStream", nil, nil, nil},
		{"unknown error code", "/acme.Echo/Fails", metadata.Pairs("x-code", "9"), [][]byte{[]byte("x")}, nil},
		{"unknown error before any message", "/acme.Echo/Refuses", metadata.Pairs("x-code-at-once", "5"), [][]byte{[]byte("x")}, nil},
		{"malformed protobuf", infer, nil, [][]byte{{0xff, 0xff, 0xff, 0x01, 0x02}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Each call its own deadline, only against a hang: shared, the
			// direct call of 64 MiB under -race on a busy machine left the
			// proxied one too little of it (cut off with no message).
			call := func(cc *grpc.ClientConn) outcome {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				return doCall(ctx, cc, tt.method, tt.md, tt.in, tt.opts...)
			}
			a, b := call(direct), call(proxied)
			if err := a.equal(b); err != nil {
				t.Fatalf("direct and proxied differ: %v", err)
			}
		})
	}
	recs := h.waitRecords(len(tests))
	byName := map[string]*record.Call{}
	for i, r := range recs {
		byName[tests[i].name] = r
	}
	r := byName["infer 16 MiB"]
	if r.Model != "m1" || r.Version != "3" || r.API != record.APIKServeV2 || r.Method != "infer" || r.Code != "OK" {
		t.Errorf("16 MiB record: %+v", r)
	}
	if r.InputCount != 2 || r.Inputs[0].Bytes != 16<<20 || r.Inputs[1].Bytes != 18 || r.BatchSize != 1 || r.OutputCount != 2 {
		t.Errorf("16 MiB tensors: count %d, %+v, batch %d, outputs %d", r.InputCount, r.Inputs, r.BatchSize, r.OutputCount)
	}
	if r.RequestBytes < 16<<20 || r.ResponseBytes < 16<<20 {
		t.Errorf("bytes: %d in, %d out", r.RequestBytes, r.ResponseBytes)
	}
	for _, p := range record.Phases {
		if p == record.PhaseDecode {
			continue // 16 MiB is over the decode capture bound
		}
		if d, ok := r.Phase(p); !ok || d < 0 {
			t.Errorf("phase %s = %v, %v", p, d, ok)
		}
	}
	if len(r.Stages) != 2 || r.Stages[1].Name != "infer" || r.Stages[1].Duration != 2250*time.Microsecond {
		t.Errorf("server stages from the gRPC trailer: %+v", r.Stages)
	}
	if r.ClientRTT <= 0 || r.UpstreamRTT <= 0 {
		t.Errorf("kernel RTTs not read: client %v, upstream %v", r.ClientRTT, r.UpstreamRTT)
	}
	if s := byName["infer 4 B"]; !s.DecodeRan || s.DecodeFail {
		t.Errorf("sampled full decode did not run on a small call: %+v", s)
	}
	if s := byName["infer error status"]; s.Code != "NOT_FOUND" {
		t.Errorf("error status recorded as %q", s.Code)
	}
	if s := byName["unknown error before any message"]; s.Code != "NOT_FOUND" || s.ErrorKind != record.ErrNone {
		t.Errorf("trailers-only error recorded as %q (%s)", s.Code, s.ErrorKind)
	}
	if s := byName["malformed protobuf"]; !s.DecodeFail {
		t.Errorf("malformed protobuf not counted as a decode failure: %+v", s)
	}
	if s := byName["stream infer"]; s.RequestMessages != 3 || s.ResponseMessages != 3 || !s.Stream {
		t.Errorf("stream record: %d/%d messages", s.RequestMessages, s.ResponseMessages)
	}
	if s := byName["unknown bidi 5"]; s.API != record.APIUnknown || s.RequestMessages != 5 || s.ResponseMessages != 6 {
		t.Errorf("unknown bidi record: api %s, %d/%d messages", s.API, s.RequestMessages, s.ResponseMessages)
	}
	seen.mu.Lock()
	gz := strings.Count(strings.Join(seen.enc, ","), "gzip")
	seen.mu.Unlock()
	if gz != 2 {
		t.Errorf("upstream saw grpc-encoding gzip %d times, want 2 (direct and proxied)", gz)
	}
}

func TestGRPCDeadlineAndCancel(t *testing.T) {
	up, _, stop := startGRPCUpstream(t)
	defer stop()
	h := newHarness(t, up, true)
	direct, proxied := dial(t, up), dial(t, h.addr)

	for _, cc := range []*grpc.ClientConn{direct, proxied} {
		// 1 s: the proxy counts a call broken in the last tenth of its
		// grpc-timeout as timed out, and a loaded machine can read the
		// HEADERS tens of milliseconds late, after which the client's own
		// timer cancels that much before the proxy's deadline.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		o := doCall(ctx, cc, "/acme.Echo/Slow", metadata.Pairs("x-sleep", "2s"), [][]byte{[]byte("x")})
		cancel()
		if o.code != codes.DeadlineExceeded {
			t.Fatalf("deadline: got %v %q", o.code, o.message)
		}
	}
	h.waitRecords(1) // the deadline call's record first, whenever a loaded machine writes it
	// The upstream must learn of the cancel through the proxy: the call
	// is cancelled once the upstream holds it (not after a sleep a loaded
	// machine may outlast), and the held call's context ends.
	// With a deadline far off, a cancel is a cancel.
	hold := newHold(t, "cancel", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	go func() {
		select {
		case <-hold.arrived:
		case <-time.After(10 * time.Second): // then the upstream sees no cancel
		}
		cancel()
	}()
	o := doCall(ctx, proxied, "/acme.Echo/Slow", metadata.Pairs("x-hold", "cancel"), [][]byte{[]byte("x")})
	if o.code != codes.Canceled {
		t.Fatalf("cancel: got %v", o.code)
	}
	select {
	case <-hold.ended:
	case <-time.After(10 * time.Second):
		t.Fatal("upstream never saw the client's cancel")
	}
	recs := h.waitRecords(2)
	// Whose timer acts first decides how the record says it: the client's
	// cancel near its deadline (or the proxy's own timer) is a timeout the
	// sidecar saw; the upstream's own timer, when the client's cancel is
	// late on a loaded machine, is an answer with DEADLINE_EXCEEDED and no
	// error kind (record.ErrorKind: the Code says it).
	if r := recs[0]; r.Code != record.GRPCCodeName(grpcDeadlineExceeded) || (r.ErrorKind != record.ErrTimeout && r.ErrorKind != record.ErrNone) {
		t.Errorf("deadline recorded as %q / %s", r.ErrorKind, r.Code)
	}
	if recs[1].ErrorKind != record.ErrClientCancel {
		t.Errorf("cancel recorded as %q / %s", recs[1].ErrorKind, recs[1].Code)
	}
}

func TestGRPCTooLarge(t *testing.T) {
	up, _, stop := startGRPCUpstream(t)
	defer stop()
	h := newHarness(t, up, true, func(o *Options) { o.MaxMessageBytes = 1 << 20 })
	o := doCall(context.Background(), dial(t, h.addr), "/acme.Echo/Unary", nil, [][]byte{make([]byte, 2<<20)})
	if o.code != codes.ResourceExhausted {
		t.Fatalf("got %v %q, want RESOURCE_EXHAUSTED", o.code, o.message)
	}
	if r := h.waitRecords(1)[0]; r.ErrorKind != record.ErrTooLarge {
		t.Errorf("recorded %q", r.ErrorKind)
	}
}

func insecureCreds() credentials.TransportCredentials { return insecure.NewCredentials() }

// TestGRPCDecodeCaptureBudget checks that the sampled full decode of gRPC
// messages draws on the capture budget like HTTP captures: a message the
// budget cannot hold is forwarded whole but not captured, and every byte
// comes back to the budget once the decode ran.
func TestGRPCDecodeCaptureBudget(t *testing.T) {
	up, _, stop := startGRPCUpstream(t)
	defer stop()
	small, big := inferRequest("m1", 1<<10), inferRequest("m1", 300<<10)
	const budget = 256 << 10
	h := newHarness(t, up, true, func(o *Options) { o.CaptureBudget = budget })
	cc := dial(t, h.addr)
	infer := "/inference.GRPCInferenceService/ModelInfer"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name       string
		msg        []byte
		wantDecode bool
	}{
		{"fits the budget", small, true},
		{"over the budget", big, false},
		{"fits again after", small, true},
	} {
		n := len(h.waitRecords(0))
		if o := doCall(ctx, cc, infer, nil, [][]byte{tc.msg}); o.code != codes.OK || len(o.msgs) != 1 {
			t.Fatalf("%s: call failed: %v %q", tc.name, o.code, o.message)
		}
		r := h.waitRecords(n + 1)[n]
		if r.DecodeRan != tc.wantDecode || r.DecodeFail {
			t.Errorf("%s: decode ran %v (failed %v), want %v", tc.name, r.DecodeRan, r.DecodeFail, tc.wantDecode)
		}
		if got := h.handler.budget.Load(); got != budget {
			t.Errorf("%s: budget %d after the record was processed, want %d back", tc.name, got, budget)
		}
	}
}
