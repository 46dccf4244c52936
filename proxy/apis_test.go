package proxy

import (
	"context"
	"io"
	"reflect"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/inferwatch/inferwatch/proto/tfserving"
	"github.com/inferwatch/inferwatch/proto/torchserve"
	"github.com/inferwatch/inferwatch/record"
)

// tfServer answers TensorFlow Serving's Predict with its inputs doubled as
// outputs, and GetModelStatus with one available version; model "missing"
// is NOT_FOUND, as tensorflow_model_server answers.
type tfServer struct {
	tfserving.UnimplementedPredictionServiceServer
	tfserving.UnimplementedModelServiceServer
}

func (tfServer) Predict(_ context.Context, req *tfserving.PredictRequest) (*tfserving.PredictResponse, error) {
	if req.GetModelSpec().GetName() == "missing" {
		return nil, status.Error(codes.NotFound, "Servable not found for request: Latest(missing)")
	}
	res := &tfserving.PredictResponse{
		ModelSpec: &tfserving.ModelSpec{Name: req.GetModelSpec().GetName(), VersionChoice: &tfserving.ModelSpec_Version{Version: &tfserving.Int64Value{Value: 4}}},
		Outputs:   map[string]*tfserving.TensorProto{},
	}
	for name, in := range req.Inputs {
		res.Outputs[name+"_out"] = &tfserving.TensorProto{Dtype: in.Dtype, TensorShape: in.TensorShape, TensorContent: append(in.TensorContent, in.TensorContent...)}
	}
	return res, nil
}

func (tfServer) GetModelStatus(_ context.Context, req *tfserving.GetModelStatusRequest) (*tfserving.GetModelStatusResponse, error) {
	return &tfserving.GetModelStatusResponse{ModelVersionStatus: []*tfserving.ModelVersionStatus{
		{Version: 3, State: tfserving.ModelVersionStatus_END}, {Version: 4, State: tfserving.ModelVersionStatus_AVAILABLE},
	}}, nil
}

// tsServer answers TorchServe's Predictions with the input's length, and
// StreamPredictions with one answer per input.
type tsServer struct {
	torchserve.UnimplementedInferenceAPIsServiceServer
}

func (tsServer) Predictions(_ context.Context, req *torchserve.PredictionsRequest) (*torchserve.PredictionResponse, error) {
	return &torchserve.PredictionResponse{Prediction: []byte(req.ModelName)}, nil
}

func (tsServer) StreamPredictions(req *torchserve.PredictionsRequest, s grpc.ServerStreamingServer[torchserve.PredictionResponse]) error {
	for name := range req.Input {
		if err := s.Send(&torchserve.PredictionResponse{Prediction: []byte(name)}); err != nil {
			return err
		}
	}
	return nil
}

func TestGRPCTFServingAndTorchServe(t *testing.T) {
	s := grpc.NewServer()
	tfserving.RegisterPredictionServiceServer(s, tfServer{})
	tfserving.RegisterModelServiceServer(s, tfServer{})
	torchserve.RegisterInferenceAPIsServiceServer(s, tsServer{})
	l := listen(t)
	go s.Serve(l)
	defer s.Stop()
	h := newHarness(t, l.Addr().String(), true)
	cc := dial(t, h.addr)
	ctx := context.Background()

	// TensorFlow Serving: Predict, a NOT_FOUND, GetModelStatus.
	tf := tfserving.NewPredictionServiceClient(cc)
	req := &tfserving.PredictRequest{
		ModelSpec: &tfserving.ModelSpec{Name: "resnet", VersionChoice: &tfserving.ModelSpec_VersionLabel{VersionLabel: "stable"}},
		Inputs: map[string]*tfserving.TensorProto{"images": {Dtype: tfserving.DataType_DT_UINT8,
			TensorShape:   &tfserving.TensorShapeProto{Dim: []*tfserving.TensorShapeProto_Dim{{Size: 8}, {Size: 64}, {Size: 64}, {Size: 3}}},
			TensorContent: make([]byte, 8*64*64*3)}},
	}
	res, err := tf.Predict(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(res.Outputs["images_out"].GetTensorContent()); n != 2*8*64*64*3 {
		t.Fatalf("Predict through the sidecar: %d output bytes, want %d", n, 2*8*64*64*3)
	}
	if _, err := tf.Predict(ctx, &tfserving.PredictRequest{ModelSpec: &tfserving.ModelSpec{Name: "missing"}}); status.Code(err) != codes.NotFound {
		t.Fatalf("Predict of a missing model: %v, want NOT_FOUND", err)
	}
	if _, err := tfserving.NewModelServiceClient(cc).GetModelStatus(ctx, &tfserving.GetModelStatusRequest{ModelSpec: &tfserving.ModelSpec{Name: "resnet"}}); err != nil {
		t.Fatal(err)
	}

	// TorchServe: Predictions and a server stream with one answer.
	ts := torchserve.NewInferenceAPIsServiceClient(cc)
	if _, err := ts.Predictions(ctx, &torchserve.PredictionsRequest{ModelName: "bert", ModelVersion: "2.0", Input: map[string][]byte{"data": make([]byte, 1000)}}); err != nil {
		t.Fatal(err)
	}
	st, err := ts.StreamPredictions(ctx, &torchserve.PredictionsRequest{ModelName: "llama", Input: map[string][]byte{"prompt": []byte("hi")}})
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := st.Recv(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}

	type view struct {
		API, Method, Model, Version, Code string
		Inputs, Outputs                   []record.Tensor
		BatchSize                         int
		Ready                             record.Readiness
		Stream, DecodeFail                bool
		RequestMessages, ResponseMessages int
	}
	shape := []int64{8, 64, 64, 3}
	want := []view{
		{API: "tfserving", Method: "predict", Model: "resnet", Version: "4", Code: "OK", BatchSize: 8,
			Inputs:  []record.Tensor{{Name: "images", Datatype: "UINT8", Shape: shape, Bytes: 8 * 64 * 64 * 3}},
			Outputs: []record.Tensor{{Name: "images_out", Datatype: "UINT8", Shape: shape, Bytes: 2 * 8 * 64 * 64 * 3}},
			// The request named the label; the answer says the version
			// that served, and the record keeps the first it read.
			RequestMessages: 1, ResponseMessages: 1},
		{API: "tfserving", Method: "predict", Model: "missing", Code: "NOT_FOUND", RequestMessages: 1},
		{API: "tfserving", Method: "model_ready", Model: "resnet", Code: "OK", Ready: record.ReadyYes, RequestMessages: 1, ResponseMessages: 1},
		{API: "torchserve", Method: "predict", Model: "bert", Version: "2.0", Code: "OK",
			Inputs: []record.Tensor{{Name: "data", Bytes: 1000}}, RequestMessages: 1, ResponseMessages: 1},
		{API: "torchserve", Method: "stream_predict", Model: "llama", Code: "OK", Stream: true,
			Inputs: []record.Tensor{{Name: "prompt", Bytes: 2}}, RequestMessages: 1, ResponseMessages: 1},
	}
	want[0].Version = "stable" // the request's label is read first
	recs := h.waitRecords(len(want))
	for i, w := range want {
		c := recs[i]
		got := view{c.API, c.Method, c.Model, c.Version, c.Code, c.Inputs, c.Outputs, c.BatchSize, c.Ready, c.Stream, c.DecodeFail, c.RequestMessages, c.ResponseMessages}
		if !reflect.DeepEqual(got, w) {
			t.Errorf("call %d:\n got %+v\nwant %+v", i, got, w)
		}
	}
}
