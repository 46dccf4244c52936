package inferapi

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/inferwatch/inferwatch/proto/tfserving"
	"github.com/inferwatch/inferwatch/proto/torchserve"
	"github.com/inferwatch/inferwatch/record"
)

// tfSpec is a TensorFlow Serving ModelSpec with a numeric version (0: none).
func tfSpec(name string, version int64) *tfserving.ModelSpec {
	s := &tfserving.ModelSpec{Name: name, SignatureName: "serving_default"}
	if version != 0 {
		s.VersionChoice = &tfserving.ModelSpec_Version{Version: &tfserving.Int64Value{Value: version}}
	}
	return s
}

// tfShape is a TensorShapeProto of dims.
func tfShape(dims ...int64) *tfserving.TensorShapeProto {
	sh := &tfserving.TensorShapeProto{}
	for _, d := range dims {
		sh.Dim = append(sh.Dim, &tfserving.TensorShapeProto_Dim{Size: d})
	}
	return sh
}

// call builds the record a scan should fill.
func call(c record.Call, inputs, outputs []record.Tensor) record.Call {
	for _, t := range inputs {
		c.AddInput(t)
	}
	for _, t := range outputs {
		c.AddOutput(t)
	}
	return c
}

func TestGRPCScannerTFServing(t *testing.T) {
	predict := &tfserving.PredictRequest{
		ModelSpec: tfSpec("resnet", 3),
		Inputs: map[string]*tfserving.TensorProto{
			"images": {Dtype: tfserving.DataType_DT_FLOAT, TensorShape: tfShape(2, 3), TensorContent: make([]byte, 24)},
			"mask":   {Dtype: tfserving.DataType_DT_INT64, TensorShape: tfShape(2), Int64Val: []int64{1, 300}}, // packed: 1 + 2 bytes
		},
		OutputFilter: []string{"scores"},
	}
	// The binary protobuf of TensorFlow's own clients puts fields in number
	// order; a map's entries and an entry's value before its key are as
	// valid, and the scanner must not depend on either.
	var reordered []byte
	reordered = protowire.AppendTag(reordered, 2, protowire.BytesType)
	entry := protowire.AppendTag(nil, 2, protowire.BytesType)
	tensor := protowire.AppendTag(nil, 2, protowire.BytesType)
	tensor = protowire.AppendBytes(tensor, marshal(t, tfShape(4)))
	tensor = protowire.AppendTag(tensor, 5, protowire.Fixed32Type) // unpacked float_val
	tensor = protowire.AppendFixed32(tensor, 0)
	tensor = protowire.AppendTag(tensor, 5, protowire.Fixed32Type)
	tensor = protowire.AppendFixed32(tensor, 0)
	tensor = protowire.AppendTag(tensor, 1, protowire.VarintType)
	tensor = protowire.AppendVarint(tensor, uint64(tfserving.DataType_DT_HALF))
	entry = protowire.AppendBytes(entry, tensor)
	entry = protowire.AppendTag(entry, 1, protowire.BytesType)
	entry = protowire.AppendString(entry, "x")
	reordered = protowire.AppendBytes(reordered, entry)
	reordered = protowire.AppendTag(reordered, 1, protowire.BytesType)
	reordered = protowire.AppendBytes(reordered, marshal(t, &tfserving.ModelSpec{Name: "m", VersionChoice: &tfserving.ModelSpec_VersionLabel{VersionLabel: "canary"}}))

	// Map entries as a sender may order them: not by name.
	var unsorted []byte
	for _, e := range []struct {
		name string
		dim  int64
	}{{"token_ids", 3}, {"attention_mask", 5}} {
		tensor := protowire.AppendTag(nil, 2, protowire.BytesType)
		tensor = protowire.AppendBytes(tensor, marshal(t, tfShape(e.dim, 7)))
		entry := protowire.AppendTag(nil, 1, protowire.BytesType)
		entry = protowire.AppendString(entry, e.name)
		entry = protowire.AppendTag(entry, 2, protowire.BytesType)
		entry = protowire.AppendBytes(entry, tensor)
		unsorted = protowire.AppendTag(unsorted, 2, protowire.BytesType)
		unsorted = protowire.AppendBytes(unsorted, entry)
	}

	tests := []struct {
		name string
		kind MessageKind
		data []byte
		want record.Call
	}{
		{"predict request: a map's tensors by name, the batch from the first", KindTFPredictRequest, frame(false, unsorted),
			call(record.Call{BatchSize: 5, RequestMessages: 1}, []record.Tensor{
				{Name: "attention_mask", Shape: []int64{5, 7}}, {Name: "token_ids", Shape: []int64{3, 7}},
			}, nil)},
		{"predict request", KindTFPredictRequest, frame(false, marshal(t, predict)),
			call(record.Call{Model: "resnet", Version: "3", BatchSize: 2, RequestMessages: 1}, []record.Tensor{
				{Name: "images", Datatype: "FP32", Shape: []int64{2, 3}, Bytes: 24},
				{Name: "mask", Datatype: "INT64", Shape: []int64{2}, Bytes: 3},
			}, nil)},
		{"predict request, fields out of order, a version label", KindTFPredictRequest, frame(false, reordered),
			call(record.Call{Model: "m", Version: "canary", BatchSize: 4, RequestMessages: 1}, []record.Tensor{
				{Name: "x", Datatype: "FP16", Shape: []int64{4}, Bytes: 8},
			}, nil)},
		{"predict request without a version", KindTFPredictRequest, frame(false, marshal(t, &tfserving.PredictRequest{ModelSpec: tfSpec("bert", 0)})),
			record.Call{Model: "bert", RequestMessages: 1}},
		{"unknown dtype, scalar", KindTFPredictRequest, frame(false, marshal(t, &tfserving.PredictRequest{ModelSpec: tfSpec("m", 0),
			Inputs: map[string]*tfserving.TensorProto{"s": {Dtype: 99, StringVal: [][]byte{[]byte("abc"), []byte("de")}}}})),
			call(record.Call{Model: "m", RequestMessages: 1}, []record.Tensor{{Name: "s", Bytes: 5}}, nil)},
		{"a zero dimension (absent on the wire) is kept", KindTFPredictRequest, frame(false, marshal(t, &tfserving.PredictRequest{ModelSpec: tfSpec("m", 0),
			Inputs: map[string]*tfserving.TensorProto{"empty": {Dtype: tfserving.DataType_DT_FLOAT, TensorShape: tfShape(0, 3)}}})),
			call(record.Call{Model: "m", RequestMessages: 1}, []record.Tensor{{Name: "empty", Datatype: "FP32", Shape: []int64{0, 3}}}, nil)},
		{"predict response: the version that served", KindTFPredictResponse, frame(false, marshal(t, &tfserving.PredictResponse{
			ModelSpec: tfSpec("resnet", 7),
			Outputs:   map[string]*tfserving.TensorProto{"scores": {Dtype: tfserving.DataType_DT_FLOAT, TensorShape: tfShape(2, 10), FloatVal: make([]float32, 20)}},
		})),
			call(record.Call{Model: "resnet", Version: "7", ResponseMessages: 1}, nil, []record.Tensor{
				{Name: "scores", Datatype: "FP32", Shape: []int64{2, 10}, Bytes: 80},
			})},
		{"classify request", KindTFRequest, frame(false, marshal(t, &tfserving.ClassificationRequest{ModelSpec: tfSpec("census", 1), Input: []byte{1, 2, 3}})),
			record.Call{Model: "census", Version: "1", RequestMessages: 1}},
		{"regress response", KindTFResponse, frame(false, marshal(t, &tfserving.RegressionResponse{ModelSpec: tfSpec("census", 2), Result: []byte{9}})),
			record.Call{Model: "census", Version: "2", ResponseMessages: 1}},
		{"metadata request", KindTFRequest, frame(false, marshal(t, &tfserving.GetModelMetadataRequest{ModelSpec: tfSpec("resnet", 0), MetadataField: []string{"signature_def"}})),
			record.Call{Model: "resnet", RequestMessages: 1}},
		{"multi-inference request", KindTFMultiRequest, frame(false, marshal(t, &tfserving.MultiInferenceRequest{
			Tasks: []*tfserving.InferenceTask{{ModelSpec: tfSpec("heads", 0), MethodName: "tensorflow/serving/classify"}, {ModelSpec: tfSpec("heads", 0), MethodName: "tensorflow/serving/regress"}},
		})),
			record.Call{Model: "heads", RequestMessages: 1}},
		{"multi-inference request: the first task, however many follow", KindTFMultiRequest, frame(false, marshal(t, &tfserving.MultiInferenceRequest{
			Tasks: append([]*tfserving.InferenceTask{{ModelSpec: tfSpec("heads", 5)}}, slices.Repeat([]*tfserving.InferenceTask{{ModelSpec: tfSpec(strings.Repeat("h", 250), 6)}}, 40)...),
		})),
			record.Call{Model: "heads", Version: "5", RequestMessages: 1}},
		{"status: one version available", KindTFStatusResponse, frame(false, marshal(t, &tfserving.GetModelStatusResponse{ModelVersionStatus: []*tfserving.ModelVersionStatus{
			{Version: 1, State: tfserving.ModelVersionStatus_END}, {Version: 2, State: tfserving.ModelVersionStatus_AVAILABLE}, {Version: 3, State: tfserving.ModelVersionStatus_LOADING},
		}})),
			record.Call{Ready: record.ReadyYes, ResponseMessages: 1}},
		{"status: loading", KindTFStatusResponse, frame(false, marshal(t, &tfserving.GetModelStatusResponse{ModelVersionStatus: []*tfserving.ModelVersionStatus{
			{Version: 1, State: tfserving.ModelVersionStatus_LOADING},
		}})),
			record.Call{Ready: record.ReadyNo, ResponseMessages: 1}},
		{"status: no versions", KindTFStatusResponse, frame(false, nil),
			record.Call{Ready: record.ReadyNo, ResponseMessages: 1}},
	}
	for _, tt := range tests {
		for _, chunk := range []int{0, 1, 3, 7} {
			c, s, err := fill(tt.kind, tt.data, chunk)
			if err != nil {
				t.Fatalf("%s: %v", tt.name, err)
			}
			if s.Malformed() || !reflect.DeepEqual(c, tt.want) {
				t.Errorf("%s (chunk %d): got %+v (malformed %v), want %+v", tt.name, chunk, c, s.Malformed(), tt.want)
			}
		}
	}
}

func TestGRPCScannerTorchServe(t *testing.T) {
	seq := "s-1"
	tests := []struct {
		name string
		data []byte
		want record.Call
	}{
		{"predictions", frame(false, marshal(t, &torchserve.PredictionsRequest{ModelName: "bert", ModelVersion: "1.0",
			Input: map[string][]byte{"data": make([]byte, 100), "meta": []byte("hello")}})),
			call(record.Call{Model: "bert", Version: "1.0", RequestMessages: 1}, []record.Tensor{
				{Name: "data", Bytes: 100}, {Name: "meta", Bytes: 5},
			}, nil)},
		{"a stream of requests: the first one's model", frame(false,
			marshal(t, &torchserve.PredictionsRequest{ModelName: "llm", SequenceId: &seq}),
			marshal(t, &torchserve.PredictionsRequest{ModelName: "other", SequenceId: &seq})),
			record.Call{Model: "llm", RequestMessages: 2}},
		{"management request: the same first fields", frame(false, []byte("\x0a\x05mnist\x12\x011\x18\x01")), // DescribeModel{mnist, 1, customized}
			record.Call{Model: "mnist", Version: "1", RequestMessages: 1}},
	}
	for _, tt := range tests {
		for _, chunk := range []int{0, 1, 5} {
			c, s, err := fill(KindTSRequest, tt.data, chunk)
			if err != nil {
				t.Fatalf("%s: %v", tt.name, err)
			}
			if s.Malformed() || !reflect.DeepEqual(c, tt.want) {
				t.Errorf("%s (chunk %d): got %+v (malformed %v), want %+v", tt.name, chunk, c, s.Malformed(), tt.want)
			}
		}
	}
}

// TestGRPCScannerTFMalformed: a nested message that runs past its parent
// marks the call, as the KServe messages' do.
func TestGRPCScannerTFMalformed(t *testing.T) {
	body := marshal(t, &tfserving.PredictRequest{ModelSpec: tfSpec("m", 0),
		Inputs: map[string]*tfserving.TensorProto{"x": {TensorShape: tfShape(1, 2)}}})
	// The inputs entry is the last field: shorten the message by one byte so
	// that the entry, then the tensor and its shape, run past its end.
	c, s, err := fill(KindTFPredictRequest, frame(false, body[:len(body)-1]), 1)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Malformed() || !c.DecodeFail || c.Model != "m" {
		t.Errorf("malformed %v, decode fail %v, model %q: want true, true, m", s.Malformed(), c.DecodeFail, c.Model)
	}
}
