package interceptors

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/inferwatch/inferwatch/proto/inference"
	"github.com/inferwatch/inferwatch/proto/torchserve"
	"github.com/inferwatch/inferwatch/record"
)

type failingModel struct {
	inference.UnimplementedGRPCInferenceServiceServer
}

func (failingModel) ModelInfer(ctx context.Context, r *inference.ModelInferRequest) (*inference.ModelInferResponse, error) {
	switch r.ModelName {
	case "missing":
		return nil, status.Error(codes.NotFound, "no such model")
	case "slow":
		select {
		case <-time.After(10 * time.Second):
		case <-ctx.Done():
		}
		return nil, ctx.Err()
	}
	return &inference.ModelInferResponse{ModelName: r.ModelName}, nil
}

// serveModel serves model on a grpc-go server with the server option and
// returns the server and a client connection to it with the client option.
func serveModel(t *testing.T, model inference.GRPCInferenceServiceServer, so grpc.ServerOption, do grpc.DialOption, more ...grpc.ServerOption) (*grpc.Server, *grpc.ClientConn) {
	t.Helper()
	g := grpc.NewServer(append([]grpc.ServerOption{so}, more...)...)
	inference.RegisterGRPCInferenceServiceServer(g, model)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(l)
	t.Cleanup(g.Stop)
	cc, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()), do)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return g, cc
}

// TestUnaryInterceptorCodes: both sides record the status the call ended
// with, and the client side says why it failed on its side.
func TestUnaryInterceptorCodes(t *testing.T) {
	srvRec, srvCol := newRecorder(t)
	cliRec, cliCol := newRecorder(t)
	// GracefulStop alone returns once the connection has no streams; the
	// slow call's stream is gone when the client gives up, its handler (and
	// the interceptor's record) maybe not yet: wait for handlers too.
	g, cc := serveModel(t, failingModel{}, grpc.UnaryInterceptor(srvRec.UnaryServerInterceptor()),
		grpc.WithUnaryInterceptor(cliRec.UnaryClientInterceptor()), grpc.WaitForHandlers(true))
	client := inference.NewGRPCInferenceServiceClient(cc)
	tests := []struct {
		model      string
		timeout    time.Duration
		code       string
		clientKind record.ErrorKind
	}{
		{"ok", 0, "OK", record.ErrNone},
		{"missing", 0, "NOT_FOUND", record.ErrNone},
		// Long enough for the call to reach the server on a loaded machine:
		// a deadline spent before the client sent it leaves no server record.
		{"slow", 500 * time.Millisecond, "DEADLINE_EXCEEDED", record.ErrTimeout},
	}
	for _, tt := range tests {
		ctx := context.Background()
		if tt.timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, tt.timeout)
			defer cancel()
		}
		_, err := client.ModelInfer(ctx, &inference.ModelInferRequest{ModelName: tt.model})
		if got := record.GRPCCodeName(int(status.Code(err))); got != tt.code {
			t.Fatalf("%s: call ended %v, want %s", tt.model, err, tt.code)
		}
	}
	g.GracefulStop() // the slow handler returns after the client gave up
	srvRec.Close(context.Background())
	cliRec.Close(context.Background())
	srv, cli := srvCol.all(), cliCol.all()
	if len(srv) != len(tests) || len(cli) != len(tests) {
		t.Fatalf("records: server %d client %d", len(srv), len(cli))
	}
	for i, tt := range tests {
		if cli[i].Model != tt.model || cli[i].Code != tt.code || cli[i].ErrorKind != tt.clientKind {
			t.Errorf("client record %d: model %q code %q kind %q", i, cli[i].Model, cli[i].Code, cli[i].ErrorKind)
		}
		if srv[i].Model != tt.model || (srv[i].Code != tt.code && !(tt.model == "slow" && srv[i].Code == "CANCELLED")) {
			t.Errorf("server record %d: model %q code %q", i, srv[i].Model, srv[i].Code)
		}
	}
}

// panicStream is the least of a grpc.ServerStream a handler that panics at
// once needs.
type panicStream struct{ grpc.ServerStream }

func (panicStream) Context() context.Context { return context.Background() }

// TestServerInterceptorsHandlerPanics: a handler that panics still leaves
// its record (INTERNAL, as recovery interceptors answer it), and the panic
// goes on unchanged to whatever recovers it.
func TestServerInterceptorsHandlerPanics(t *testing.T) {
	rec, col := newRecorder(t)
	catch := func(f func()) (p any) {
		defer func() { p = recover() }()
		f()
		return nil
	}
	p := catch(func() {
		rec.UnaryServerInterceptor()(context.Background(), &inference.ModelInferRequest{ModelName: "m"},
			&grpc.UnaryServerInfo{FullMethod: "/inference.GRPCInferenceService/ModelInfer"},
			func(context.Context, any) (any, error) { panic("unary crashed") })
	})
	q := catch(func() {
		rec.StreamServerInterceptor()(nil, panicStream{},
			&grpc.StreamServerInfo{FullMethod: "/inference.GRPCInferenceService/ModelStreamInfer"},
			func(any, grpc.ServerStream) error { panic("stream crashed") })
	})
	if p != "unary crashed" || q != "stream crashed" {
		t.Fatalf("panics reached the caller as %v and %v", p, q)
	}
	rec.Close(context.Background())
	recs := col.all()
	if len(recs) != 2 {
		t.Fatalf("%d records, want 2", len(recs))
	}
	for i, want := range []string{"m", ""} {
		if c := recs[i]; c.Code != "INTERNAL" || c.Model != want || c.End <= 0 {
			t.Errorf("record %d: code %q model %q end %v; want INTERNAL, %q", i, c.Code, c.Model, c.End, want)
		}
	}
}

// decoupledModel answers each ModelStreamInfer request with two responses
// carrying its id, the second flagged triton_final_response.
type decoupledModel struct {
	inference.UnimplementedGRPCInferenceServiceServer
}

func (decoupledModel) ModelStreamInfer(s grpc.BidiStreamingServer[inference.ModelInferRequest, inference.ModelStreamInferResponse]) error {
	for {
		req, err := s.Recv()
		if err != nil {
			return nil
		}
		for i := range 2 {
			final := &inference.InferParameter{ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: i == 1}}
			if err := s.Send(&inference.ModelStreamInferResponse{InferResponse: &inference.ModelInferResponse{ModelName: req.ModelName, Id: req.Id,
				Parameters: map[string]*inference.InferParameter{"triton_final_response": final}}}); err != nil {
				return err
			}
		}
	}
}

// TestStreamInterceptorsMatchStreamRequests: both stream interceptors follow
// a ModelStreamInfer stream's requests and match the responses to them, as
// the sidecar does.
func TestStreamInterceptorsMatchStreamRequests(t *testing.T) {
	srvRec, srvCol := newRecorder(t)
	cliRec, cliCol := newRecorder(t)
	g, cc := serveModel(t, decoupledModel{}, grpc.StreamInterceptor(srvRec.StreamServerInterceptor()),
		grpc.WithStreamInterceptor(cliRec.StreamClientInterceptor()))
	s, err := inference.NewGRPCInferenceServiceClient(cc).ModelStreamInfer(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		if err := s.Send(&inference.ModelInferRequest{ModelName: "llm", Id: id}); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if _, err := s.Recv(); err != nil {
				t.Fatal(err)
			}
		}
	}
	s.CloseSend()
	if _, err := s.Recv(); err == nil {
		t.Fatal("a response after the last")
	}
	g.GracefulStop()
	srvRec.Close(context.Background())
	cliRec.Close(context.Background())
	for side, col := range map[string]*collector{"server": srvCol, "client": cliCol} {
		recs := col.all()
		if len(recs) != 1 {
			t.Fatalf("%s: %d records", side, len(recs))
		}
		reqs := recs[0].StreamRequests
		if len(reqs) != 2 {
			t.Fatalf("%s: stream requests %+v", side, reqs)
		}
		for i, id := range []string{"a", "b"} {
			if r := reqs[i]; r.ID != id || r.Responses != 2 || !r.Final || r.Error || r.LastResponse < r.FirstResponse || r.FirstResponse < r.Arrived {
				t.Errorf("%s: request %d: %+v", side, i, r)
			}
		}
	}
}

// tsStreamModel is a TorchServe LLM on StreamPredictions2: each request
// gets two responses echoing its sequenceId, or, for sequenceId "bad", one
// whose status is INTERNAL.
type tsStreamModel struct {
	torchserve.UnimplementedInferenceAPIsServiceServer
}

func (tsStreamModel) StreamPredictions2(s grpc.BidiStreamingServer[torchserve.PredictionsRequest, torchserve.PredictionResponse]) error {
	for {
		r, err := s.Recv()
		if err != nil {
			return nil // io.EOF: the client is done
		}
		if r.GetSequenceId() == "bad" {
			if err := s.Send(&torchserve.PredictionResponse{SequenceId: r.SequenceId, Status: &rpcstatus.Status{Code: int32(codes.Internal), Message: "worker died"}}); err != nil {
				return err
			}
			continue
		}
		for i := range 2 {
			if err := s.Send(&torchserve.PredictionResponse{Prediction: []byte{byte(i)}, SequenceId: r.SequenceId, Status: &rpcstatus.Status{}}); err != nil {
				return err
			}
		}
	}
}

// TestStreamInterceptorsMatchStreamPredictions: both stream interceptors
// follow TorchServe's StreamPredictions2 (read through reflection, by field
// number) as the sidecar does: each request's responses, a status other
// than OK failing its request, and a request without sequenceId matched
// as the one being answered.
func TestStreamInterceptorsMatchStreamPredictions(t *testing.T) {
	srvRec, srvCol := newRecorder(t)
	cliRec, cliCol := newRecorder(t)
	g := grpc.NewServer(grpc.StreamInterceptor(srvRec.StreamServerInterceptor()))
	torchserve.RegisterInferenceAPIsServiceServer(g, tsStreamModel{})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(l)
	t.Cleanup(g.Stop)
	cc, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithStreamInterceptor(cliRec.StreamClientInterceptor()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	s, err := torchserve.NewInferenceAPIsServiceClient(cc).StreamPredictions2(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []*string{proto.String("a"), proto.String("bad"), nil} {
		if err := s.Send(&torchserve.PredictionsRequest{ModelName: "llm", SequenceId: id}); err != nil {
			t.Fatal(err)
		}
		n := 2
		if id != nil && *id == "bad" {
			n = 1
		}
		for range n {
			if _, err := s.Recv(); err != nil {
				t.Fatal(err)
			}
		}
	}
	s.CloseSend()
	if _, err := s.Recv(); err == nil {
		t.Fatal("a response after the last")
	}
	g.GracefulStop()
	srvRec.Close(context.Background())
	cliRec.Close(context.Background())
	for side, col := range map[string]*collector{"server": srvCol, "client": cliCol} {
		recs := col.all()
		if len(recs) != 1 {
			t.Fatalf("%s: %d records", side, len(recs))
		}
		reqs := recs[0].StreamRequests
		if len(reqs) != 3 {
			t.Fatalf("%s: stream requests %+v", side, reqs)
		}
		for i, w := range []struct {
			id        string
			responses int
			failed    bool
		}{{"a", 2, false}, {"bad", 0, true}, {"", 2, false}} {
			if r := reqs[i]; r.ID != w.id || r.Responses != w.responses || r.Error != w.failed || r.Final || r.LastResponse < r.FirstResponse || r.Responses > 0 && r.FirstResponse < r.Arrived {
				t.Errorf("%s: request %d: %+v, want id %q, %d responses, failed %v", side, i, r, w.id, w.responses, w.failed)
			}
		}
	}
}

// decoupledEcho answers ModelInfer too.
type decoupledEcho struct{ decoupledModel }

func (decoupledEcho) ModelInfer(_ context.Context, r *inference.ModelInferRequest) (*inference.ModelInferResponse, error) {
	return &inference.ModelInferResponse{ModelName: r.ModelName}, nil
}

// TestStreamClientInterceptorEndsWithoutDrain: the client stream
// interceptor records a call that never reads to a non-nil error, as gRPC
// allows: a stream with one response (client streaming), which grpc-go
// ends once that response arrives, and a stream the caller cancels instead
// of draining (a client that stops a generation).
func TestStreamClientInterceptorEndsWithoutDrain(t *testing.T) {
	cliRec, cliCol := newRecorder(t)
	_, cc := serveModel(t, decoupledEcho{}, grpc.EmptyServerOption{}, grpc.WithStreamInterceptor(cliRec.StreamClientInterceptor()))

	// A unary method driven as a client stream: one answer, then the end.
	desc := &grpc.StreamDesc{StreamName: "ModelInfer", ClientStreams: true}
	cs, err := cc.NewStream(context.Background(), desc, "/inference.GRPCInferenceService/ModelInfer")
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.SendMsg(&inference.ModelInferRequest{ModelName: "m"}); err != nil {
		t.Fatal(err)
	}
	if err := cs.CloseSend(); err != nil {
		t.Fatal(err)
	}
	var resp inference.ModelInferResponse
	if err := cs.RecvMsg(&resp); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	s, err := inference.NewGRPCInferenceServiceClient(cc).ModelStreamInfer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&inference.ModelInferRequest{ModelName: "llm", Id: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	cancel() // and never Recv again

	deadline := time.Now().Add(5 * time.Second)
	for len(cliCol.all()) < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cliRec.Close(context.Background())
	recs := cliCol.all()
	if len(recs) != 2 {
		t.Fatalf("%d records, want 2 (the client-streamed call and the cancelled stream)", len(recs))
	}
	byMethod := map[string]*record.Call{}
	for _, r := range recs {
		byMethod[r.Method] = r
	}
	if r := byMethod["infer"]; r == nil || r.Code != "OK" || r.Model != "m" || r.RequestMessages != 1 || r.ResponseMessages != 1 {
		t.Errorf("client-streamed call: %+v", r)
	}
	if r := byMethod["stream_infer"]; r == nil || r.Code != "CANCELLED" || r.ErrorKind != record.ErrClientCancel || r.ResponseMessages != 1 {
		t.Errorf("cancelled stream: %+v", r)
	}
}

// TestStreamInterceptorsClipRequestIDs: the interceptors keep of a stream
// request's id what the sidecar's scanner keeps (128 bytes): a caller's id
// goes into records and traces, once per request.
func TestStreamInterceptorsClipRequestIDs(t *testing.T) {
	srvRec, srvCol := newRecorder(t)
	cliRec, cliCol := newRecorder(t)
	g, cc := serveModel(t, decoupledModel{}, grpc.StreamInterceptor(srvRec.StreamServerInterceptor()),
		grpc.WithStreamInterceptor(cliRec.StreamClientInterceptor()))
	s, err := inference.NewGRPCInferenceServiceClient(cc).ModelStreamInfer(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{"a" + strings.Repeat("x", 100<<10), "b" + strings.Repeat("x", 100<<10)}
	for _, id := range ids {
		if err := s.Send(&inference.ModelInferRequest{ModelName: "llm", Id: id}); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if _, err := s.Recv(); err != nil {
				t.Fatal(err)
			}
		}
	}
	s.CloseSend()
	if _, err := s.Recv(); err == nil {
		t.Fatal("a response after the last")
	}
	g.GracefulStop()
	srvRec.Close(context.Background())
	cliRec.Close(context.Background())
	for side, col := range map[string]*collector{"server": srvCol, "client": cliCol} {
		recs := col.all()
		if len(recs) != 1 || len(recs[0].StreamRequests) != 2 {
			t.Fatalf("%s: records %+v", side, recs)
		}
		for i, r := range recs[0].StreamRequests {
			if r.ID != ids[i][:128] || r.Responses != 2 || !r.Final {
				t.Errorf("%s: request %d: id of %d bytes, %d responses, final %v; want the first 128 bytes, 2, final", side, i, len(r.ID), r.Responses, r.Final)
			}
		}
	}
}
