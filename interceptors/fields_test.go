package interceptors

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/inferwatch/inferwatch/inferapi"
	"github.com/inferwatch/inferwatch/proto/inference"
	"github.com/inferwatch/inferwatch/proto/tfserving"
	"github.com/inferwatch/inferwatch/proto/torchserve"
	"github.com/inferwatch/inferwatch/record"
)

// tfModel answers TensorFlow Serving's PredictionService and ModelService:
// Predict with fixed outputs and the model spec it served (version 7),
// Classify, Regress and MultiInference with a small result, GetModelStatus
// with the versions its model name says.
type tfModel struct {
	tfserving.UnimplementedPredictionServiceServer
	tfserving.UnimplementedModelServiceServer
}

func spec(name string, version int64, label string) *tfserving.ModelSpec {
	s := &tfserving.ModelSpec{Name: name, SignatureName: "serving_default"}
	switch {
	case version != 0:
		s.VersionChoice = &tfserving.ModelSpec_Version{Version: &tfserving.Int64Value{Value: version}}
	case label != "":
		s.VersionChoice = &tfserving.ModelSpec_VersionLabel{VersionLabel: label}
	}
	return s
}

func shape(dims ...int64) *tfserving.TensorShapeProto {
	sh := &tfserving.TensorShapeProto{}
	for _, d := range dims {
		sh.Dim = append(sh.Dim, &tfserving.TensorShapeProto_Dim{Size: d})
	}
	return sh
}

func (tfModel) Predict(_ context.Context, r *tfserving.PredictRequest) (*tfserving.PredictResponse, error) {
	return &tfserving.PredictResponse{ModelSpec: spec(r.GetModelSpec().GetName(), 7, ""), Outputs: map[string]*tfserving.TensorProto{
		"scores":  {Dtype: tfserving.DataType_DT_FLOAT, TensorShape: shape(4, 10), FloatVal: make([]float32, 40)},
		"classes": {Dtype: tfserving.DataType_DT_STRING, TensorShape: shape(4), StringVal: [][]byte{[]byte("cat"), []byte("dog"), []byte("cat"), []byte("cow")}},
	}}, nil
}

func (tfModel) Classify(context.Context, *tfserving.ClassificationRequest) (*tfserving.ClassificationResponse, error) {
	return &tfserving.ClassificationResponse{ModelSpec: spec("census", 1, ""), Result: []byte{1}}, nil
}

func (tfModel) Regress(context.Context, *tfserving.RegressionRequest) (*tfserving.RegressionResponse, error) {
	return &tfserving.RegressionResponse{ModelSpec: spec("census", 0, "stable"), Result: []byte{2}}, nil
}

func (tfModel) MultiInference(context.Context, *tfserving.MultiInferenceRequest) (*tfserving.MultiInferenceResponse, error) {
	return &tfserving.MultiInferenceResponse{Results: [][]byte{{1}, {2}}}, nil
}

func (tfModel) GetModelMetadata(_ context.Context, r *tfserving.GetModelMetadataRequest) (*tfserving.GetModelMetadataResponse, error) {
	return &tfserving.GetModelMetadataResponse{ModelSpec: r.ModelSpec}, nil
}

func (tfModel) GetModelStatus(_ context.Context, r *tfserving.GetModelStatusRequest) (*tfserving.GetModelStatusResponse, error) {
	switch r.GetModelSpec().GetName() {
	case "loading":
		return &tfserving.GetModelStatusResponse{ModelVersionStatus: []*tfserving.ModelVersionStatus{{Version: 1, State: tfserving.ModelVersionStatus_LOADING}}}, nil
	case "gone":
		return &tfserving.GetModelStatusResponse{}, nil
	}
	return &tfserving.GetModelStatusResponse{ModelVersionStatus: []*tfserving.ModelVersionStatus{
		{Version: 3, State: tfserving.ModelVersionStatus_END}, {Version: 4, State: tfserving.ModelVersionStatus_AVAILABLE},
	}}, nil
}

// tsServer answers TorchServe's InferenceAPIsService: StreamPredictions
// with one answer, StreamPredictions2 with one per request.
type tsServer struct {
	torchserve.UnimplementedInferenceAPIsServiceServer
}

func (tsServer) Ping(context.Context, *torchserve.PingRequest) (*torchserve.TorchServeHealthResponse, error) {
	return &torchserve.TorchServeHealthResponse{Health: "Healthy"}, nil
}

func (tsServer) Predictions(_ context.Context, r *torchserve.PredictionsRequest) (*torchserve.PredictionResponse, error) {
	return &torchserve.PredictionResponse{Prediction: []byte(r.ModelName)}, nil
}

func (tsServer) StreamPredictions(r *torchserve.PredictionsRequest, s grpc.ServerStreamingServer[torchserve.PredictionResponse]) error {
	return s.Send(&torchserve.PredictionResponse{Prediction: []byte(r.ModelName)})
}

func (tsServer) StreamPredictions2(s grpc.BidiStreamingServer[torchserve.PredictionsRequest, torchserve.PredictionResponse]) error {
	for {
		r, err := s.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := s.Send(&torchserve.PredictionResponse{Prediction: []byte(r.ModelName)}); err != nil {
			return err
		}
	}
}

// serveAPIs serves tfModel and tsServer on a grpc-go server with the server
// options and returns a client connection to it with the dial options, and
// its address.
func serveAPIs(t *testing.T, so []grpc.ServerOption, do ...grpc.DialOption) (*grpc.ClientConn, string) {
	t.Helper()
	g := grpc.NewServer(so...)
	tfserving.RegisterPredictionServiceServer(g, tfModel{})
	tfserving.RegisterModelServiceServer(g, tfModel{})
	torchserve.RegisterInferenceAPIsServiceServer(g, tsServer{})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(l)
	t.Cleanup(g.Stop)
	cc, err := grpc.NewClient(l.Addr().String(), append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, do...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc, l.Addr().String()
}

// fieldsView is what a record says that the message readers fill.
type fieldsView struct {
	API, Method, Model, Version, Code string
	Stream                            bool
	ReqMsgs, RespMsgs                 int
	Batch, InCount, OutCount          int
	Ready                             record.Readiness
	Inputs, Outputs                   []record.Tensor
}

func viewOf(c *record.Call) fieldsView {
	return fieldsView{c.API, c.Method, c.Model, c.Version, c.Code, c.Stream, c.RequestMessages, c.ResponseMessages,
		c.BatchSize, c.InputCount, c.OutputCount, c.Ready, c.Inputs, c.Outputs}
}

// apiCall is one call of the TF Serving and TorchServe fronts' tests and
// what every front should record of it.
// callInTurn makes one call and waits until each collector has one more
// record, so that records come in call order: a server's record may be
// submitted after its client has the answer.
func callInTurn(t *testing.T, cc *grpc.ClientConn, name string, do func(context.Context, *grpc.ClientConn) error, cols ...*collector) {
	t.Helper()
	want := make([]int, len(cols))
	for i, c := range cols {
		want[i] = c.len() + 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	err := do(ctx, cc)
	cancel()
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for i, c := range cols {
		for c.len() < want[i] && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
	}
}

type apiCall struct {
	name string
	do   func(ctx context.Context, cc *grpc.ClientConn) error
	want fieldsView
}

func tfPredict(req *tfserving.PredictRequest) func(context.Context, *grpc.ClientConn) error {
	return func(ctx context.Context, cc *grpc.ClientConn) error {
		_, err := tfserving.NewPredictionServiceClient(cc).Predict(ctx, req)
		return err
	}
}

func tfStatus(name string) func(context.Context, *grpc.ClientConn) error {
	return func(ctx context.Context, cc *grpc.ClientConn) error {
		_, err := tfserving.NewModelServiceClient(cc).GetModelStatus(ctx, &tfserving.GetModelStatusRequest{ModelSpec: spec(name, 4, "")})
		return err
	}
}

func tsPredictions(req *torchserve.PredictionsRequest) func(context.Context, *grpc.ClientConn) error {
	return func(ctx context.Context, cc *grpc.ClientConn) error {
		_, err := torchserve.NewInferenceAPIsServiceClient(cc).Predictions(ctx, req)
		return err
	}
}

func tsStream(req *torchserve.PredictionsRequest) func(context.Context, *grpc.ClientConn) error {
	return func(ctx context.Context, cc *grpc.ClientConn) error {
		st, err := torchserve.NewInferenceAPIsServiceClient(cc).StreamPredictions(ctx, req)
		if err != nil {
			return err
		}
		for {
			if _, err := st.Recv(); err == io.EOF {
				return nil
			} else if err != nil {
				return err
			}
		}
	}
}

// The calls' messages, shared with the sidecar agreement test.
var (
	// predictAll has a tensor of every kind of contents TensorProto
	// declares, all with the same leading dimension.
	predictAll = &tfserving.PredictRequest{ModelSpec: spec("resnet", 3, ""), OutputFilter: []string{"scores"},
		Inputs: map[string]*tfserving.TensorProto{
			"images": {Dtype: tfserving.DataType_DT_FLOAT, TensorShape: shape(4, 2, 3), TensorContent: make([]byte, 96)},
			"mask":   {Dtype: tfserving.DataType_DT_INT64, TensorShape: shape(4), Int64Val: []int64{1, 300, 0, -1}},             // packed: 1+2+1+10
			"ids":    {Dtype: tfserving.DataType_DT_INT32, TensorShape: shape(4), IntVal: []int32{-1, 5, 127, 128}},             // packed: 10+1+1+2
			"text":   {Dtype: tfserving.DataType_DT_STRING, TensorShape: shape(4), StringVal: [][]byte{{'a'}, {1, 2}, {}, {3}}}, // 1+2+0+1
			"flags":  {Dtype: tfserving.DataType_DT_BOOL, TensorShape: shape(4), BoolVal: []bool{true, false, true, false}},
			"probs":  {Dtype: tfserving.DataType_DT_DOUBLE, TensorShape: shape(4), DoubleVal: []float64{1, 2, 3, 4}},
			"half":   {Dtype: tfserving.DataType_DT_HALF, TensorShape: shape(4, 1), HalfVal: []int32{1, 200, 0, 1}}, // 1+2+1+1
		}}
	predictOut = []record.Tensor{
		{Name: "classes", Datatype: "BYTES", Shape: []int64{4}, Bytes: 12},
		{Name: "scores", Datatype: "FP32", Shape: []int64{4, 10}, Bytes: 160},
	}
	tsPredict = &torchserve.PredictionsRequest{ModelName: "bert", ModelVersion: "1.0",
		Input: map[string][]byte{"data": make([]byte, 100), "meta": []byte("hello"), "empty": nil}}
)

func apiCalls() []apiCall {
	many := &tfserving.PredictRequest{ModelSpec: spec("wide", 0, "canary"), Inputs: map[string]*tfserving.TensorProto{}}
	var manyIn []record.Tensor
	for i := range 20 {
		name := fmt.Sprintf("in%02d", i)
		many.Inputs[name] = &tfserving.TensorProto{Dtype: tfserving.DataType_DT_UINT8, TensorShape: shape(2), TensorContent: []byte{1, 2}}
		if i < record.MaxTensors {
			manyIn = append(manyIn, record.Tensor{Name: name, Datatype: "UINT8", Shape: []int64{2}, Bytes: 2})
		}
	}
	long := "x" + strings.Repeat("é", 200) // 401 bytes: 256 kept cut the 128th é in two
	tf := func(method, model, version string) fieldsView {
		return fieldsView{API: record.APITFServing, Method: method, Model: model, Version: version, Code: "OK", ReqMsgs: 1, RespMsgs: 1}
	}
	ts := func(method, model, version string) fieldsView {
		return fieldsView{API: record.APITorchServe, Method: method, Model: model, Version: version, Code: "OK", ReqMsgs: 1, RespMsgs: 1}
	}
	with := func(v fieldsView, f func(*fieldsView)) fieldsView { f(&v); return v }
	return []apiCall{
		{"TF predict: every kind of tensor contents; the request's version, not the answer's", tfPredict(predictAll),
			with(tf(inferapi.MethodPredict, "resnet", "3"), func(v *fieldsView) {
				v.Batch, v.InCount, v.OutCount = 4, 7, 2
				v.Inputs = []record.Tensor{ // in key order
					{Name: "flags", Datatype: "BOOL", Shape: []int64{4}, Bytes: 4},
					{Name: "half", Datatype: "FP16", Shape: []int64{4, 1}, Bytes: 5},
					{Name: "ids", Datatype: "INT32", Shape: []int64{4}, Bytes: 14},
					{Name: "images", Datatype: "FP32", Shape: []int64{4, 2, 3}, Bytes: 96},
					{Name: "mask", Datatype: "INT64", Shape: []int64{4}, Bytes: 14},
					{Name: "probs", Datatype: "FP64", Shape: []int64{4}, Bytes: 32},
					{Name: "text", Datatype: "BYTES", Shape: []int64{4}, Bytes: 4},
				}
				v.Outputs = predictOut
			})},
		// A 0 dimension is kept (the sidecar's scanner drops it: it is not
		// on the wire), so no agreement test sends one.
		{"TF predict: no version asked, the answer's; an unknown dtype; a zero dimension", tfPredict(&tfserving.PredictRequest{ModelSpec: spec("bert", 0, ""),
			Inputs: map[string]*tfserving.TensorProto{
				"x": {Dtype: tfserving.DataType_DT_BFLOAT16, TensorShape: shape(0, 3)},
				"y": {Dtype: 99, StringVal: [][]byte{[]byte("abc"), []byte("de")}},
			}}),
			with(tf(inferapi.MethodPredict, "bert", "7"), func(v *fieldsView) {
				v.InCount, v.OutCount = 2, 2
				v.Inputs = []record.Tensor{{Name: "x", Datatype: "BF16", Shape: []int64{0, 3}}, {Name: "y", Bytes: 5}}
				v.Outputs = predictOut
			})},
		{"TF predict: a version label; more tensors than a record keeps", tfPredict(many),
			with(tf(inferapi.MethodPredict, "wide", "canary"), func(v *fieldsView) {
				v.Batch, v.InCount, v.OutCount, v.Inputs, v.Outputs = 2, 20, 2, manyIn, predictOut
			})},
		{"TF classify: the request's model spec", func(ctx context.Context, cc *grpc.ClientConn) error {
			_, err := tfserving.NewPredictionServiceClient(cc).Classify(ctx, &tfserving.ClassificationRequest{ModelSpec: spec("census", 2, ""), Input: []byte{1}})
			return err
		}, tf(inferapi.MethodClassify, "census", "2")},
		{"TF regress: no model spec asked, the answer's", func(ctx context.Context, cc *grpc.ClientConn) error {
			_, err := tfserving.NewPredictionServiceClient(cc).Regress(ctx, &tfserving.RegressionRequest{Input: []byte{1}})
			return err
		}, tf(inferapi.MethodRegress, "census", "stable")},
		{"TF multi-inference: the first task's spec", func(ctx context.Context, cc *grpc.ClientConn) error {
			_, err := tfserving.NewPredictionServiceClient(cc).MultiInference(ctx, &tfserving.MultiInferenceRequest{Tasks: []*tfserving.InferenceTask{
				{ModelSpec: spec("heads", 1, ""), MethodName: "tensorflow/serving/classify"}, {ModelSpec: spec("heads", 0, "canary"), MethodName: "tensorflow/serving/regress"},
			}})
			return err
		}, tf(inferapi.MethodMultiInference, "heads", "1")},
		{"TF metadata", func(ctx context.Context, cc *grpc.ClientConn) error {
			_, err := tfserving.NewPredictionServiceClient(cc).GetModelMetadata(ctx, &tfserving.GetModelMetadataRequest{ModelSpec: spec("resnet", 0, ""), MetadataField: []string{"signature_def"}})
			return err
		}, tf(inferapi.MethodModelMetadata, "resnet", "")},
		{"TF status: a version available", tfStatus("resnet"),
			with(tf(inferapi.MethodModelReady, "resnet", "4"), func(v *fieldsView) { v.Ready = record.ReadyYes })},
		{"TF status: loading", tfStatus("loading"),
			with(tf(inferapi.MethodModelReady, "loading", "4"), func(v *fieldsView) { v.Ready = record.ReadyNo })},
		{"TF status: no versions", tfStatus("gone"),
			with(tf(inferapi.MethodModelReady, "gone", "4"), func(v *fieldsView) { v.Ready = record.ReadyNo })},
		{"TorchServe predictions", tsPredictions(tsPredict),
			with(ts(inferapi.MethodPredict, "bert", "1.0"), func(v *fieldsView) {
				v.InCount = 3
				v.Inputs = []record.Tensor{{Name: "data", Bytes: 100}, {Name: "empty"}, {Name: "meta", Bytes: 5}}
			})},
		{"TorchServe predictions: a model name over the bound", tsPredictions(&torchserve.PredictionsRequest{ModelName: long}),
			ts(inferapi.MethodPredict, "x"+strings.Repeat("é", 127), "")},
		{"TorchServe stream predictions: one answer is a stream", tsStream(&torchserve.PredictionsRequest{ModelName: "llm", Input: map[string][]byte{"prompt": []byte("hi")}}),
			with(ts(inferapi.MethodStreamPredict, "llm", ""), func(v *fieldsView) {
				v.Stream, v.InCount, v.Inputs = true, 1, []record.Tensor{{Name: "prompt", Bytes: 2}}
			})},
		{"TorchServe stream predictions 2: the first request's model", func(ctx context.Context, cc *grpc.ClientConn) error {
			st, err := torchserve.NewInferenceAPIsServiceClient(cc).StreamPredictions2(ctx)
			if err != nil {
				return err
			}
			for _, m := range []string{"llm", "other"} {
				if err := st.Send(&torchserve.PredictionsRequest{ModelName: m, ModelVersion: m + "-v"}); err != nil {
					return err
				}
				if _, err := st.Recv(); err != nil {
					return err
				}
			}
			st.CloseSend()
			if _, err := st.Recv(); err != io.EOF {
				return fmt.Errorf("stream end: %v", err)
			}
			return nil
		}, with(ts(inferapi.MethodStreamPredict, "llm", "llm-v"), func(v *fieldsView) { v.Stream, v.ReqMsgs, v.RespMsgs = true, 2, 2 })},
		{"TorchServe ping", func(ctx context.Context, cc *grpc.ClientConn) error {
			_, err := torchserve.NewInferenceAPIsServiceClient(cc).Ping(ctx, &torchserve.PingRequest{})
			return err
		}, ts(inferapi.MethodHealth, "", "")},
	}
}

// TestGRPCFrontsReadTFServingAndTorchServe: a real grpc-go server of TF
// Serving's and TorchServe's services, called by a real grpc-go client,
// through each in-process front in turn. Each records what the first
// request and response say — model, version, tensors (names, datatypes,
// shapes, bytes), batch size, readiness — and that a TorchServe
// StreamPredictions streams even with one answer.
func TestGRPCFrontsReadTFServingAndTorchServe(t *testing.T) {
	fronts := []struct {
		name string
		opts func(r *Recorder) ([]grpc.ServerOption, []grpc.DialOption)
	}{
		{"server interceptors", func(r *Recorder) ([]grpc.ServerOption, []grpc.DialOption) {
			return []grpc.ServerOption{grpc.UnaryInterceptor(r.UnaryServerInterceptor()), grpc.StreamInterceptor(r.StreamServerInterceptor())}, nil
		}},
		{"client interceptors", func(r *Recorder) ([]grpc.ServerOption, []grpc.DialOption) {
			return nil, []grpc.DialOption{grpc.WithUnaryInterceptor(r.UnaryClientInterceptor()), grpc.WithStreamInterceptor(r.StreamClientInterceptor())}
		}},
		{"stats handler", func(r *Recorder) ([]grpc.ServerOption, []grpc.DialOption) {
			return []grpc.ServerOption{grpc.StatsHandler(r.StatsHandler())}, nil
		}},
		{"client stats handler", func(r *Recorder) ([]grpc.ServerOption, []grpc.DialOption) {
			return nil, []grpc.DialOption{grpc.WithStatsHandler(r.StatsHandler())}
		}},
	}
	calls := apiCalls()
	for _, f := range fronts {
		t.Run(f.name, func(t *testing.T) {
			rec, col := newRecorder(t)
			so, do := f.opts(rec)
			cc, _ := serveAPIs(t, so, do...)
			for _, tc := range calls {
				callInTurn(t, cc, tc.name, tc.do, col)
			}
			rec.Close(context.Background())
			recs := col.all()
			if len(recs) != len(calls) {
				t.Fatalf("%d records, want %d", len(recs), len(calls))
			}
			for i, tc := range calls {
				if got := viewOf(recs[i]); !reflect.DeepEqual(got, tc.want) {
					t.Errorf("%s:\n got  %+v\n want %+v", tc.name, got, tc.want)
				}
			}
		})
	}
}

// TestGRPCInterceptorsAgreeWithSidecarTFServingTorchServe: the same TF
// Serving and TorchServe calls through a real sidecar between the client
// and server interceptors: the three records agree on model, version,
// tensors (in order: both record a map's entries by name), batch size, counts, bytes, streaming and readiness.
func TestGRPCInterceptorsAgreeWithSidecarTFServingTorchServe(t *testing.T) {
	srvRec, srvCol := newRecorder(t)
	cliRec, cliCol := newRecorder(t)
	_, upstream := serveAPIs(t, []grpc.ServerOption{grpc.UnaryInterceptor(srvRec.UnaryServerInterceptor()), grpc.StreamInterceptor(srvRec.StreamServerInterceptor())})
	addr, scCol := startSidecar(t, "grpc", upstream)
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(cliRec.UnaryClientInterceptor()), grpc.WithStreamInterceptor(cliRec.StreamClientInterceptor()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	calls := []struct {
		name string
		do   func(context.Context, *grpc.ClientConn) error
	}{
		{"TF predict", tfPredict(predictAll)},
		{"TF status", tfStatus("resnet")},
		{"TorchServe predictions", tsPredictions(tsPredict)},
		{"TorchServe stream predictions", tsStream(tsPredict)},
	}
	for _, tc := range calls {
		callInTurn(t, cc, tc.name, tc.do, scCol, srvCol)
	}
	srvRec.Close(context.Background())
	cliRec.Close(context.Background())
	a, c, s := srvCol.all(), cliCol.all(), scCol.all()
	if len(a) != len(calls) || len(c) != len(calls) || len(s) != len(calls) {
		t.Fatalf("records: server %d client %d sidecar %d, want %d each", len(a), len(c), len(s), len(calls))
	}
	for i, tc := range calls {
		if s[i].Model == "" || s[i].InputCount == 0 && s[i].Ready == record.ReadyUnknown {
			t.Errorf("%s: the sidecar read nothing of the call: %+v", tc.name, viewOf(s[i]))
		}
		sameCall(t, tc.name+" server", a[i], s[i])
		sameCall(t, tc.name+" client", c[i], s[i])
		if a[i].Ready != s[i].Ready || c[i].Ready != s[i].Ready {
			t.Errorf("%s: readiness server %v client %v, sidecar %v", tc.name, a[i].Ready, c[i].Ready, s[i].Ready)
		}
	}
}

// scan records what the sidecar's scanner reads of m, marshalled as kind
// in a gRPC frame, into a fresh record.
func scan(t *testing.T, kind inferapi.MessageKind, m proto.Message, response bool) *record.Call {
	t.Helper()
	body, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	frame := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(body)))
	var s inferapi.GRPCScanner
	s.Reset(kind, 0)
	if err := s.Feed(append(frame, body...)); err != nil {
		t.Fatal(err)
	}
	c := &record.Call{}
	if response {
		s.FillResponse(c)
	} else {
		s.FillRequest(c)
	}
	if s.Malformed() {
		t.Fatalf("the scanner found %T malformed", m)
	}
	return c
}

// TestFillFirstAgreesWithScanner: for each message, fillFirst reading the
// Go message records what the sidecar's scanner records from its bytes
// (tensors as sets: a map's wire order is random).
func TestFillFirstAgreesWithScanner(t *testing.T) {
	tests := []struct {
		name     string
		kind     inferapi.MessageKind
		m        proto.Message
		response bool
	}{
		{"predict request", inferapi.KindTFPredictRequest, predictAll, false},
		{"predict request, a label", inferapi.KindTFPredictRequest, &tfserving.PredictRequest{ModelSpec: spec("m", 0, "canary"),
			Inputs: map[string]*tfserving.TensorProto{"s": {Dtype: 99, StringVal: [][]byte{[]byte("abc")}}, "t": {Dtype: tfserving.DataType_DT_UINT64}}}, false},
		{"KServe request, a dynamic leading dimension", inferapi.KindInferRequest, &inference.ModelInferRequest{ModelName: "m", ModelVersion: "1",
			Inputs: []*inference.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: "FP32", Shape: []int64{-1, 4}}}}, false},
		{"KServe request, typed and raw contents", inferapi.KindInferRequest, &inference.ModelInferRequest{ModelName: "m",
			Inputs: []*inference.ModelInferRequest_InferInputTensor{
				{Name: "typed", Datatype: "FP32", Shape: []int64{2, 2}, Contents: &inference.InferTensorContents{Fp32Contents: []float32{1, 2, 3, 4}}},
				{Name: "ints", Datatype: "INT64", Shape: []int64{2}, Contents: &inference.InferTensorContents{Int64Contents: []int64{-1, 300}}},
			}}, false},
		{"KServe response, typed contents", inferapi.KindInferResponse, &inference.ModelInferResponse{ModelName: "m",
			Outputs: []*inference.ModelInferResponse_InferOutputTensor{{Name: "y", Datatype: "BYTES", Shape: []int64{1}, Contents: &inference.InferTensorContents{BytesContents: [][]byte{[]byte("abc")}}}}}, true},
		{"KServe response: the version that answered", inferapi.KindInferResponse, &inference.ModelInferResponse{ModelName: "m", ModelVersion: "7"}, true},
		{"KServe model ready request", inferapi.KindModelRequest, &inference.ModelReadyRequest{Name: "resnet", Version: "2"}, false},
		{"KServe statistics request", inferapi.KindModelRequest, &inference.ModelStatisticsRequest{Name: "bert"}, false},
		{"KServe repository load", inferapi.KindRepositoryRequest, &inference.RepositoryModelLoadRequest{RepositoryName: "r", ModelName: "resnet"}, false},
		{"KServe ready", inferapi.KindModelReadyResponse, &inference.ModelReadyResponse{Ready: true}, true},
		{"KServe not ready", inferapi.KindModelReadyResponse, &inference.ModelReadyResponse{}, true},
		{"predict request, zero dimensions", inferapi.KindTFPredictRequest, &tfserving.PredictRequest{ModelSpec: spec("m", 0, ""),
			Inputs: map[string]*tfserving.TensorProto{"e": {TensorShape: shape(0, 3, 0)}}}, false},
		{"multi-inference request, many tasks", inferapi.KindTFMultiRequest, &tfserving.MultiInferenceRequest{Tasks: append([]*tfserving.InferenceTask{{ModelSpec: spec("heads", 5, "")}},
			slices.Repeat([]*tfserving.InferenceTask{{ModelSpec: spec(strings.Repeat("h", 250), 6, "")}}, 40)...)}, false},
		{"predict request, long names", inferapi.KindTFPredictRequest, &tfserving.PredictRequest{ModelSpec: spec(strings.Repeat("ü", 300), 0, "l"+strings.Repeat("ß", 200)),
			Inputs: map[string]*tfserving.TensorProto{"x" + strings.Repeat("€", 100): {TensorShape: shape(-1, 5)}}}, false},
		{"predict response", inferapi.KindTFPredictResponse, &tfserving.PredictResponse{ModelSpec: spec("resnet", 9, ""),
			Outputs: map[string]*tfserving.TensorProto{"a": {Dtype: tfserving.DataType_DT_FLOAT, FloatVal: []float32{1, 2}}, "b": {HalfVal: []int32{-5}}}}, true},
		{"classify request", inferapi.KindTFRequest, &tfserving.ClassificationRequest{ModelSpec: spec("census", 12345678901, ""), Input: []byte{1}}, false},
		{"regress response", inferapi.KindTFResponse, &tfserving.RegressionResponse{ModelSpec: spec("census", 0, "stable"), Result: []byte{1}}, true},
		{"multi-inference request", inferapi.KindTFMultiRequest, &tfserving.MultiInferenceRequest{Tasks: []*tfserving.InferenceTask{
			{ModelSpec: spec("a", 1, "")}, {ModelSpec: spec("b", 0, "")}, {MethodName: "x"}}}, false},
		{"status request", inferapi.KindTFRequest, &tfserving.GetModelStatusRequest{ModelSpec: spec("resnet", -3, "")}, false},
		{"status response: available", inferapi.KindTFStatusResponse, &tfserving.GetModelStatusResponse{ModelVersionStatus: []*tfserving.ModelVersionStatus{
			{State: tfserving.ModelVersionStatus_LOADING}, {State: tfserving.ModelVersionStatus_AVAILABLE}}}, true},
		{"status response: unloading", inferapi.KindTFStatusResponse, &tfserving.GetModelStatusResponse{ModelVersionStatus: []*tfserving.ModelVersionStatus{
			{State: tfserving.ModelVersionStatus_UNLOADING}}}, true},
		{"status response: empty", inferapi.KindTFStatusResponse, &tfserving.GetModelStatusResponse{}, true},
		{"TorchServe predictions", inferapi.KindTSRequest, tsPredict, false},
		{"KServe request, long names and a deep shape", inferapi.KindInferRequest, &inference.ModelInferRequest{ModelName: strings.Repeat("ü", 300), ModelVersion: "v" + strings.Repeat("ß", 200),
			Inputs: []*inference.ModelInferRequest_InferInputTensor{{Name: strings.Repeat("€", 100), Datatype: strings.Repeat("D", 300), Shape: slices.Repeat([]int64{2}, 100)}}}, false},
		{"KServe response, long names and a deep shape", inferapi.KindInferResponse, &inference.ModelInferResponse{ModelName: strings.Repeat("ü", 300), ModelVersion: "v" + strings.Repeat("ß", 200),
			Outputs: []*inference.ModelInferResponse_InferOutputTensor{{Name: strings.Repeat("€", 100), Datatype: strings.Repeat("D", 300), Shape: slices.Repeat([]int64{3}, 100)}}}, true},
		{"KServe stream response, long names", inferapi.KindStreamInferResponse, &inference.ModelStreamInferResponse{InferResponse: &inference.ModelInferResponse{ModelName: strings.Repeat("ü", 300),
			Outputs: []*inference.ModelInferResponse_InferOutputTensor{{Name: strings.Repeat("€", 100), Shape: slices.Repeat([]int64{3}, 100)}}}}, true},
		{"TorchServe predictions, long", inferapi.KindTSRequest, &torchserve.PredictionsRequest{ModelName: "m", ModelVersion: strings.Repeat("日本", 100),
			Input: map[string][]byte{strings.Repeat("k", 300): {1}}}, false},
	}
	for _, tt := range tests {
		want := scan(t, tt.kind, tt.m, tt.response)
		want.RequestMessages, want.ResponseMessages = 0, 0
		got := &record.Call{}
		fillFirst(got, tt.kind, tt.m)
		if g, w := viewOf(got), viewOf(want); !reflect.DeepEqual(g, w) {
			t.Errorf("%s:\n fillFirst %+v\n scanner   %+v", tt.name, g, w)
		}
	}
}

// oddFile declares messages whose field numbers are those fillFirst reads,
// with other kinds, and tensor contents of kinds TensorProto does not use.
func oddFile(t *testing.T) protoreflect.FileDescriptor {
	t.Helper()
	opt := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()
	rep := descriptorpb.FieldDescriptorProto_LABEL_REPEATED.Enum()
	field := func(name string, n int32, label *descriptorpb.FieldDescriptorProto_Label, typ descriptorpb.FieldDescriptorProto_Type, typeName string) *descriptorpb.FieldDescriptorProto {
		f := &descriptorpb.FieldDescriptorProto{Name: proto.String(name), Number: proto.Int32(n), Label: label, Type: typ.Enum()}
		if typeName != "" {
			f.TypeName = proto.String(typeName)
		}
		return f
	}
	const (
		tInt32   = descriptorpb.FieldDescriptorProto_TYPE_INT32
		tInt64   = descriptorpb.FieldDescriptorProto_TYPE_INT64
		tSint32  = descriptorpb.FieldDescriptorProto_TYPE_SINT32
		tSint64  = descriptorpb.FieldDescriptorProto_TYPE_SINT64
		tFixed64 = descriptorpb.FieldDescriptorProto_TYPE_FIXED64
		tString  = descriptorpb.FieldDescriptorProto_TYPE_STRING
		tBytes   = descriptorpb.FieldDescriptorProto_TYPE_BYTES
		tMessage = descriptorpb.FieldDescriptorProto_TYPE_MESSAGE
	)
	entry := func(name string, key, value descriptorpb.FieldDescriptorProto_Type, valueType string) *descriptorpb.DescriptorProto {
		return &descriptorpb.DescriptorProto{Name: proto.String(name), Options: &descriptorpb.MessageOptions{MapEntry: proto.Bool(true)},
			Field: []*descriptorpb.FieldDescriptorProto{field("key", 1, opt, key, ""), field("value", 2, opt, value, valueType)}}
	}
	fdp := &descriptorpb.FileDescriptorProto{Name: proto.String("odd.proto"), Package: proto.String("odd"), Syntax: proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{
			{Name: proto.String("Inner"), Field: []*descriptorpb.FieldDescriptorProto{field("v", 1, opt, tInt32, "")}},
			// Odd: every field the top-level readers use, of another kind.
			{Name: proto.String("Odd"), Field: []*descriptorpb.FieldDescriptorProto{
				field("f1", 1, opt, tInt32, ""),
				field("f2", 2, rep, tMessage, ".odd.Odd.F2Entry"),
				field("f3", 3, rep, tString, ""),
			}, NestedType: []*descriptorpb.DescriptorProto{entry("F2Entry", tInt32, tString, "")}},
			// Spec: a name as bytes (the same on the wire), a version
			// whose value is an int32, a label that is a number.
			{Name: proto.String("Spec"), Field: []*descriptorpb.FieldDescriptorProto{
				field("name", 1, opt, tBytes, ""),
				field("version", 2, opt, tMessage, ".odd.Inner"),
				field("label", 4, opt, tInt64, ""),
			}},
			// Tensor: dtype and shape of other kinds, contents of kinds
			// TensorProto does not use.
			{Name: proto.String("Tensor"), Field: []*descriptorpb.FieldDescriptorProto{
				field("dtype", 1, opt, tString, ""),
				field("shape", 2, opt, tBytes, ""),
				field("content", 4, rep, tMessage, ".odd.Tensor.ContentEntry"),
				field("s", 5, opt, tSint64, ""),
				field("z", 6, rep, tSint32, ""),
				field("f", 7, rep, tFixed64, ""),
				field("msgs", 8, rep, tMessage, ".odd.Inner"),
				field("skipped", 18, opt, tBytes, ""),
			}, NestedType: []*descriptorpb.DescriptorProto{entry("ContentEntry", tString, tString, "")}},
			{Name: proto.String("Req"), Field: []*descriptorpb.FieldDescriptorProto{
				field("spec", 1, opt, tMessage, ".odd.Spec"),
				field("inputs", 2, rep, tMessage, ".odd.Req.InputsEntry"),
			}, NestedType: []*descriptorpb.DescriptorProto{entry("InputsEntry", tString, tMessage, ".odd.Tensor")}},
		}}
	fd, err := protodesc.NewFile(fdp, nil)
	if err != nil {
		t.Fatal(err)
	}
	return fd
}

// TestFillFirstUnexpectedMessages: messages whose fields are not of the
// kinds the readers expect are passed over, never a panic; nil messages,
// nil map values and nil list elements say nothing.
func TestFillFirstUnexpectedMessages(t *testing.T) {
	fd := oddFile(t)
	msg := func(name string) *dynamicpb.Message {
		return dynamicpb.NewMessage(fd.Messages().ByName(protoreflect.Name(name)))
	}
	set := func(m *dynamicpb.Message, field string, v protoreflect.Value) {
		m.Set(m.Descriptor().Fields().ByName(protoreflect.Name(field)), v)
	}
	list := func(m *dynamicpb.Message, field string, vs ...protoreflect.Value) {
		l := m.Mutable(m.Descriptor().Fields().ByName(protoreflect.Name(field))).List()
		for _, v := range vs {
			l.Append(v)
		}
	}
	odd := msg("Odd")
	set(odd, "f1", protoreflect.ValueOfInt32(7))
	odd.Mutable(odd.Descriptor().Fields().ByName("f2")).Map().Set(protoreflect.ValueOfInt32(1).MapKey(), protoreflect.ValueOfString("x"))
	list(odd, "f3", protoreflect.ValueOfString("a"))

	inner := msg("Inner")
	set(inner, "v", protoreflect.ValueOfInt32(150)) // 3 bytes marshalled
	sp := msg("Spec")
	set(sp, "name", protoreflect.ValueOfBytes([]byte("mo\xffdel")))
	set(sp, "version", protoreflect.ValueOfMessage(inner))
	set(sp, "label", protoreflect.ValueOfInt64(5))
	tensor := msg("Tensor")
	set(tensor, "dtype", protoreflect.ValueOfString("DT_FLOAT"))
	set(tensor, "shape", protoreflect.ValueOfBytes([]byte{8, 1}))
	tensor.Mutable(tensor.Descriptor().Fields().ByName("content")).Map().Set(protoreflect.ValueOfString("k").MapKey(), protoreflect.ValueOfString("vvvv"))
	set(tensor, "s", protoreflect.ValueOfInt64(-3))                                              // zigzag 5: 1 byte
	list(tensor, "z", protoreflect.ValueOfInt32(-1), protoreflect.ValueOfInt32(64))              // zigzag 1 and 128: 1 + 2 bytes
	list(tensor, "f", protoreflect.ValueOfUint64(1), protoreflect.ValueOfUint64(2))              // 16 bytes
	list(tensor, "msgs", protoreflect.ValueOfMessage(inner), protoreflect.ValueOfMessage(inner)) // 3 + 3 bytes
	set(tensor, "skipped", protoreflect.ValueOfBytes(make([]byte, 50)))                          // not contents: 18
	req := msg("Req")
	set(req, "spec", protoreflect.ValueOfMessage(sp))
	req.Mutable(req.Descriptor().Fields().ByName("inputs")).Map().Set(protoreflect.ValueOfString("in").MapKey(), protoreflect.ValueOfMessage(tensor))

	oddTensor := []record.Tensor{{Name: "in", Bytes: 1 + 3 + 16 + 6}}
	tests := []struct {
		name string
		kind inferapi.MessageKind
		m    any
		want fieldsView
	}{
		{"odd as TF request", inferapi.KindTFRequest, odd, fieldsView{}},
		{"odd as TF predict request", inferapi.KindTFPredictRequest, odd, fieldsView{}},
		{"odd as TF response", inferapi.KindTFResponse, odd, fieldsView{}},
		{"odd as TF predict response", inferapi.KindTFPredictResponse, odd, fieldsView{}},
		{"odd as TF multi-inference request", inferapi.KindTFMultiRequest, odd, fieldsView{}},
		{"odd as TF status response", inferapi.KindTFStatusResponse, odd, fieldsView{Ready: record.ReadyNo}},
		{"odd as TorchServe request", inferapi.KindTSRequest, odd, fieldsView{}},
		{"odd tensors as TF predict request", inferapi.KindTFPredictRequest, req, fieldsView{Model: "model", InCount: 1, Inputs: oddTensor}},
		{"odd tensors as TF predict response", inferapi.KindTFPredictResponse, req, fieldsView{}}, // outputs = 1 is a message, spec = 2 a map
		{"odd tensors as TorchServe request", inferapi.KindTSRequest, req, fieldsView{}},
		{"nil", inferapi.KindTFPredictRequest, nil, fieldsView{}},
		{"not a message", inferapi.KindTSRequest, "model", fieldsView{}},
		{"nil message", inferapi.KindTFPredictRequest, (*tfserving.PredictRequest)(nil), fieldsView{}},
		{"nil KServe request", inferapi.KindInferRequest, (*inference.ModelInferRequest)(nil), fieldsView{}},
		{"nil KServe response", inferapi.KindInferResponse, (*inference.ModelInferResponse)(nil), fieldsView{}},
		{"nil KServe stream response", inferapi.KindStreamInferResponse, (*inference.ModelStreamInferResponse)(nil), fieldsView{}},
		{"nil map value, nil dimension", inferapi.KindTFPredictRequest, &tfserving.PredictRequest{Inputs: map[string]*tfserving.TensorProto{
			"a": nil, "b": {TensorShape: &tfserving.TensorShapeProto{Dim: []*tfserving.TensorShapeProto_Dim{nil, {Size: 3}}}}}},
			fieldsView{InCount: 2, Inputs: []record.Tensor{{Name: "a"}, {Name: "b", Shape: []int64{0, 3}}}}},
		{"nil task", inferapi.KindTFMultiRequest, &tfserving.MultiInferenceRequest{Tasks: []*tfserving.InferenceTask{nil, {ModelSpec: spec("heads", 2, "")}}},
			fieldsView{}},
		{"nil version status", inferapi.KindTFStatusResponse, &tfserving.GetModelStatusResponse{ModelVersionStatus: []*tfserving.ModelVersionStatus{nil}},
			fieldsView{Ready: record.ReadyNo}},
		{"a message of another API", inferapi.KindTFStatusResponse, &torchserve.PredictionsRequest{ModelName: "bert"}, fieldsView{Ready: record.ReadyNo}},
	}
	for _, tt := range tests {
		c := &record.Call{}
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("%s: panicked: %v", tt.name, p)
				}
			}()
			fillFirst(c, tt.kind, tt.m)
		}()
		if got := viewOf(c); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s:\n got  %+v\n want %+v", tt.name, got, tt.want)
		}
	}
}
