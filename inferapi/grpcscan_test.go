package inferapi

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/inferwatch/inferwatch/proto/inference"
	"github.com/inferwatch/inferwatch/record"
)

// frame wraps message bodies in gRPC length prefixes.
func frame(compressed bool, msgs ...[]byte) []byte {
	var out []byte
	for _, m := range msgs {
		flag := byte(0)
		if compressed {
			flag = 1
		}
		out = append(out, flag)
		out = binary.BigEndian.AppendUint32(out, uint32(len(m)))
		out = append(out, m...)
	}
	return out
}

func marshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	return b
}

// feed scans data in chunks of the given size (all at once when <= 0).
func feed(s *GRPCScanner, data []byte, chunk int) error {
	if chunk <= 0 {
		return s.Feed(data)
	}
	for len(data) > 0 {
		n := min(chunk, len(data))
		if err := s.Feed(data[:n]); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

// request says whether a stream of kind messages goes from client to server.
func (k MessageKind) request() bool {
	switch k {
	case KindInferRequest, KindModelRequest, KindRepositoryRequest,
		KindTFRequest, KindTFPredictRequest, KindTFMultiRequest, KindTSRequest:
		return true
	}
	return false
}

// fill records what a scanner of kind saw in data.
func fill(kind MessageKind, data []byte, chunk int) (record.Call, *GRPCScanner, error) {
	var s GRPCScanner
	s.Reset(kind, 0)
	err := feed(&s, data, chunk)
	var c record.Call
	if kind.request() {
		s.FillRequest(&c)
	} else {
		s.FillResponse(&c)
	}
	return c, &s, err
}

func fp32(vals ...float32) *inference.InferTensorContents {
	return &inference.InferTensorContents{Fp32Contents: vals}
}

func TestGRPCScannerRequest(t *testing.T) {
	long := strings.Repeat("n", 300)
	manyInputs := &inference.ModelInferRequest{ModelName: "many"}
	var manyWant []record.Tensor
	for i := range record.MaxTensors + 4 {
		manyInputs.Inputs = append(manyInputs.Inputs, &inference.ModelInferRequest_InferInputTensor{Name: "x", Datatype: "INT8", Shape: []int64{2}})
		manyInputs.RawInputContents = append(manyInputs.RawInputContents, []byte{1, 2})
		if i < record.MaxTensors {
			manyWant = append(manyWant, record.Tensor{Name: "x", Datatype: "INT8", Shape: []int64{2}, Bytes: 2})
		}
	}
	deep := make([]int64, 70)
	for i := range deep {
		deep[i] = 1
	}
	tests := []struct {
		name string
		msg  *inference.ModelInferRequest
		want record.Call
	}{
		{
			name: "raw contents",
			msg: &inference.ModelInferRequest{
				ModelName: "resnet", ModelVersion: "3", Id: "req-1",
				Parameters: map[string]*inference.InferParameter{"p": {ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: 5}}},
				Inputs: []*inference.ModelInferRequest_InferInputTensor{
					{Name: "input__0", Datatype: "FP32", Shape: []int64{8, 3, 224, 224}},
					{Name: "mask", Datatype: "BOOL", Shape: []int64{8}},
				},
				Outputs:          []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "out"}},
				RawInputContents: [][]byte{make([]byte, 8*3*224*224*4), make([]byte, 8)},
			},
			want: record.Call{
				Model: "resnet", Version: "3", BatchSize: 8, InputCount: 2, RequestMessages: 1,
				Inputs: []record.Tensor{
					{Name: "input__0", Datatype: "FP32", Shape: []int64{8, 3, 224, 224}, Bytes: 8 * 3 * 224 * 224 * 4},
					{Name: "mask", Datatype: "BOOL", Shape: []int64{8}, Bytes: 8},
				},
			},
		},
		{
			name: "typed contents",
			msg: &inference.ModelInferRequest{
				ModelName: "m",
				Inputs: []*inference.ModelInferRequest_InferInputTensor{
					{Name: "a", Datatype: "FP32", Shape: []int64{1, 3}, Contents: fp32(1, 2, 3)},
					{Name: "b", Datatype: "BYTES", Shape: []int64{2}, Contents: &inference.InferTensorContents{BytesContents: [][]byte{[]byte("hello"), []byte("x")}}},
				},
			},
			want: record.Call{
				Model: "m", BatchSize: 1, InputCount: 2, RequestMessages: 1,
				Inputs: []record.Tensor{
					{Name: "a", Datatype: "FP32", Shape: []int64{1, 3}, Bytes: 2 + 12}, // tag, length, 3 floats
					{Name: "b", Datatype: "BYTES", Shape: []int64{2}, Bytes: 2 + 5 + 2 + 1},
				},
			},
		},
		{
			name: "dynamic batch is unknown",
			msg: &inference.ModelInferRequest{
				ModelName: "m",
				Inputs:    []*inference.ModelInferRequest_InferInputTensor{{Name: "a", Datatype: "INT64", Shape: []int64{-1, 4}}},
			},
			want: record.Call{Model: "m", InputCount: 1, RequestMessages: 1, Inputs: []record.Tensor{{Name: "a", Datatype: "INT64", Shape: []int64{-1, 4}}}},
		},
		{
			name: "scalar input",
			msg: &inference.ModelInferRequest{
				ModelName: "m",
				Inputs:    []*inference.ModelInferRequest_InferInputTensor{{Name: "a", Datatype: "INT64"}},
			},
			want: record.Call{Model: "m", InputCount: 1, RequestMessages: 1, Inputs: []record.Tensor{{Name: "a", Datatype: "INT64"}}},
		},
		{
			name: "bounds",
			msg: &inference.ModelInferRequest{
				ModelName: long, ModelVersion: long,
				Inputs: []*inference.ModelInferRequest_InferInputTensor{{Name: long, Datatype: "FP32", Shape: deep}},
			},
			want: record.Call{
				Model: long[:maxField], Version: long[:maxField], BatchSize: 1, InputCount: 1, RequestMessages: 1,
				Inputs: []record.Tensor{{Name: long[:maxField], Datatype: "FP32", Shape: deep[:maxDims]}},
			},
		},
		{
			name: "more tensors than kept",
			msg:  manyInputs,
			want: record.Call{Model: "many", BatchSize: 2, InputCount: record.MaxTensors + 4, RequestMessages: 1, Inputs: manyWant},
		},
		{
			name: "empty",
			msg:  &inference.ModelInferRequest{},
			want: record.Call{RequestMessages: 1},
		},
	}
	for _, tt := range tests {
		data := frame(false, marshal(t, tt.msg))
		for _, chunk := range []int{0, 1, 2, 3, 5, 7, 64, 4096} {
			c, s, err := fill(KindInferRequest, data, chunk)
			if err != nil {
				t.Fatalf("%s/chunk %d: Feed: %v", tt.name, chunk, err)
			}
			if !reflect.DeepEqual(c, tt.want) {
				t.Errorf("%s/chunk %d:\n got %+v\nwant %+v", tt.name, chunk, c, tt.want)
			}
			if s.Bytes() != int64(len(data)) || s.Malformed() || s.Compressed() {
				t.Errorf("%s/chunk %d: Bytes %d (want %d), Malformed %v, Compressed %v", tt.name, chunk, s.Bytes(), len(data), s.Malformed(), s.Compressed())
			}
		}
	}
}

// TestGRPCScannerWire covers encodings the generated marshaller never writes.
func TestGRPCScannerWire(t *testing.T) {
	tensor := func(fields ...[]byte) []byte { return bytes.Join(fields, nil) }
	str := func(num protowire.Number, v string) []byte {
		return protowire.AppendString(protowire.AppendTag(nil, num, protowire.BytesType), v)
	}
	unpacked := func(dims ...int64) []byte {
		var b []byte
		for _, d := range dims {
			b = protowire.AppendTag(b, 3, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(d))
		}
		return b
	}
	msg := func(num protowire.Number, body []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), body)
	}
	fixed := protowire.AppendFixed64(protowire.AppendTag(nil, 9, protowire.Fixed64Type), 7)
	fixed = protowire.AppendFixed32(protowire.AppendTag(fixed, 10, protowire.Fixed32Type), 7)
	tests := []struct {
		name string
		body []byte
		want record.Call
	}{
		{
			name: "unpacked shape",
			body: tensor(str(1, "m"), msg(5, tensor(str(1, "x"), str(2, "FP32"), unpacked(4, 2)))),
			want: record.Call{Model: "m", BatchSize: 4, InputCount: 1, RequestMessages: 1, Inputs: []record.Tensor{{Name: "x", Datatype: "FP32", Shape: []int64{4, 2}}}},
		},
		{
			name: "packed and unpacked shape concatenate",
			body: tensor(msg(5, tensor(unpacked(4), msg(3, protowire.AppendVarint(nil, 5)), unpacked(6)))),
			want: record.Call{BatchSize: 4, InputCount: 1, RequestMessages: 1, Inputs: []record.Tensor{{Shape: []int64{4, 5, 6}}}},
		},
		{
			name: "repeated string field: last wins",
			body: tensor(str(1, "first"), str(2, "v"), str(1, "second"), msg(5, tensor(str(1, "a"), str(1, "b"), str(2, "FP16"), str(1, "c")))),
			want: record.Call{Model: "second", Version: "v", InputCount: 1, RequestMessages: 1, Inputs: []record.Tensor{{Name: "c", Datatype: "FP16"}}},
		},
		{
			name: "unknown fields of every wire type",
			body: tensor(fixed, unpacked(1)[0:0], protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 1<<60), str(1, "m"), msg(5, tensor(fixed, str(1, "x")))),
			want: record.Call{Model: "m", InputCount: 1, RequestMessages: 1, Inputs: []record.Tensor{{Name: "x"}}},
		},
		{
			name: "known field with another wire type is skipped",
			body: tensor(protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 3), str(2, "v")),
			want: record.Call{Version: "v", RequestMessages: 1},
		},
		{
			// Groups are proto2; parsers pass them over as unknown fields.
			name: "unknown groups",
			body: tensor([]byte{0x0b, 0x0b, 0x08, 0x01, 0x0a, 0x01, 'x', 0x0d, 1, 2, 3, 4, 0x0c, 0x12, 0x00, 0x0c}, str(1, "m"),
				msg(5, tensor([]byte{0x3b, 0x1a, 0x01, 0x07, 0x18, 0x05, 0x3c}, str(1, "t")))),
			want: record.Call{Model: "m", InputCount: 1, RequestMessages: 1, Inputs: []record.Tensor{{Name: "t"}}},
		},
		{
			name: "raw contents without inputs",
			body: tensor(msg(7, make([]byte, 10))),
			want: record.Call{RequestMessages: 1},
		},
	}
	for _, tt := range tests {
		data := frame(false, tt.body)
		for _, chunk := range []int{0, 1, 3} {
			c, s, err := fill(KindInferRequest, data, chunk)
			if err != nil || s.Malformed() {
				t.Fatalf("%s/chunk %d: err %v, malformed %v", tt.name, chunk, err, s.Malformed())
			}
			if !reflect.DeepEqual(c, tt.want) {
				t.Errorf("%s/chunk %d:\n got %+v\nwant %+v", tt.name, chunk, c, tt.want)
			}
		}
	}
}

func TestGRPCScannerMalformed(t *testing.T) {
	good := marshal(t, &inference.ModelInferRequest{ModelName: "m"})
	tests := []struct {
		name  string
		data  []byte
		model string // what was read before the fault
		msgs  int    // with the good message appended
	}{
		{"truncated tag", frame(false, []byte{0x80}), "", 2},
		{"truncated length", frame(false, []byte{0x0a, 0x80}), "", 2},
		{"length past the end", frame(false, []byte{0x0a, 0x05, 'a'}), "", 2},
		{"field number zero", frame(false, []byte{0x02, 0x00}), "", 2},
		{"group left open", frame(false, []byte{0x0b, 0x10, 0x01}), "", 2},
		{"group left open in a tensor", frame(false, []byte{0x2a, 0x01, 0x0b}), "", 2},
		{"stray end group", frame(false, []byte{0x0c}), "", 2},
		{"wire type 6", frame(false, []byte{0x0e}), "", 2},
		{"overlong varint", frame(false, []byte{0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}), "", 2},
		{"fixed64 past the end", frame(false, append(append([]byte{}, good...), 0x09, 1, 2)), "m", 2},
		{"tensor past its message", frame(false, []byte{0x2a, 0x02, 0x0a, 0x05, 'a', 'b', 'c'}), "", 2},
		{"packed shape cut mid-varint", frame(false, []byte{0x2a, 0x03, 0x1a, 0x01, 0x80}), "", 2},
		{"overlong packed dimension", frame(false, []byte{0x2a, 0x0d, 0x1a, 0x0b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}), "", 2},
		{"invalid frame flag", append([]byte{2, 0, 0, 0, 1, 0xff}, frame(false, good)...), "", 3},
	}
	for _, tt := range tests {
		for _, chunk := range []int{0, 1, 2} {
			data := append(append([]byte{}, tt.data...), frame(false, good)...)
			c, s, err := fill(KindInferRequest, data, chunk)
			if err != nil {
				t.Fatalf("%s/chunk %d: Feed error %v; malformed input must not error", tt.name, chunk, err)
			}
			if !s.Malformed() || !c.DecodeFail {
				t.Errorf("%s/chunk %d: Malformed %v, DecodeFail %v; want both", tt.name, chunk, s.Malformed(), c.DecodeFail)
			}
			// Framing survives a malformed body: every message is counted.
			if s.Messages() != tt.msgs {
				t.Errorf("%s/chunk %d: Messages %d, want %d", tt.name, chunk, s.Messages(), tt.msgs)
			}
			if c.Model != tt.model {
				t.Errorf("%s/chunk %d: Model %q, want %q", tt.name, chunk, c.Model, tt.model)
			}
		}
	}
}

func TestGRPCScannerStream(t *testing.T) {
	first := &inference.ModelInferRequest{
		ModelName: "llm", ModelVersion: "1",
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "text", Datatype: "BYTES", Shape: []int64{1}}},
		RawInputContents: [][]byte{[]byte("\x05\x00\x00\x00hello")},
	}
	later := &inference.ModelInferRequest{ModelName: "other", Inputs: []*inference.ModelInferRequest_InferInputTensor{{Name: "z"}}}
	data := frame(false, marshal(t, first), marshal(t, later), nil, marshal(t, later))
	c, s, err := fill(KindInferRequest, data, 3)
	if err != nil {
		t.Fatal(err)
	}
	want := record.Call{Model: "llm", Version: "1", BatchSize: 1, InputCount: 1, RequestMessages: 4,
		Inputs: []record.Tensor{{Name: "text", Datatype: "BYTES", Shape: []int64{1}, Bytes: 9}}}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("got %+v\nwant %+v", c, want)
	}
	if s.Messages() != 4 || s.Bytes() != int64(len(data)) {
		t.Errorf("Messages %d Bytes %d", s.Messages(), s.Bytes())
	}

	// A partial trailing message is not counted.
	c, _, _ = fill(KindInferRequest, data[:len(data)-1], 0)
	if c.RequestMessages != 3 {
		t.Errorf("partial stream: RequestMessages %d, want 3", c.RequestMessages)
	}
}

func TestGRPCScannerResponse(t *testing.T) {
	resp := &inference.ModelInferResponse{
		ModelName: "resnet", ModelVersion: "2", Id: "x",
		Outputs: []*inference.ModelInferResponse_InferOutputTensor{
			{Name: "probs", Datatype: "FP32", Shape: []int64{8, 1000}},
			{Name: "label", Datatype: "INT64", Shape: []int64{8}, Contents: &inference.InferTensorContents{Int64Contents: []int64{1, 2}}},
		},
		RawOutputContents: [][]byte{make([]byte, 32000)},
	}
	outputs := []record.Tensor{
		{Name: "probs", Datatype: "FP32", Shape: []int64{8, 1000}, Bytes: 32000},
		{Name: "label", Datatype: "INT64", Shape: []int64{8}, Bytes: 2 + 2},
	}
	errOnly := &inference.ModelStreamInferResponse{ErrorMessage: "boom"}
	tests := []struct {
		name string
		kind MessageKind
		data []byte
		pre  record.Call // what the request side filled
		want record.Call
	}{
		{
			name: "unary",
			kind: KindInferResponse,
			data: frame(false, marshal(t, resp)),
			want: record.Call{Model: "resnet", Version: "2", OutputCount: 2, ResponseMessages: 1, Outputs: outputs},
		},
		{
			name: "request's model wins",
			kind: KindInferResponse,
			data: frame(false, marshal(t, resp)),
			pre:  record.Call{Model: "alias", Version: "7"},
			want: record.Call{Model: "alias", Version: "7", OutputCount: 2, ResponseMessages: 1, Outputs: outputs},
		},
		{
			name: "stream",
			kind: KindStreamInferResponse,
			data: frame(false,
				marshal(t, &inference.ModelStreamInferResponse{InferResponse: resp}),
				marshal(t, &inference.ModelStreamInferResponse{InferResponse: &inference.ModelInferResponse{ModelName: "later"}}),
				marshal(t, errOnly)),
			want: record.Call{Model: "resnet", Version: "2", OutputCount: 2, ResponseMessages: 3, Outputs: outputs},
		},
		{
			name: "stream starting with an error",
			kind: KindStreamInferResponse,
			data: frame(false, marshal(t, errOnly), marshal(t, &inference.ModelStreamInferResponse{InferResponse: resp})),
			want: record.Call{ResponseMessages: 2},
		},
		{
			name: "other kind only counts",
			kind: KindOther,
			data: frame(false, marshal(t, resp), marshal(t, resp)),
			want: record.Call{ResponseMessages: 2},
		},
	}
	for _, tt := range tests {
		for _, chunk := range []int{0, 1, 6} {
			var s GRPCScanner
			s.Reset(tt.kind, 0)
			if err := feed(&s, tt.data, chunk); err != nil {
				t.Fatal(err)
			}
			c := tt.pre
			s.FillResponse(&c)
			if !reflect.DeepEqual(c, tt.want) || s.Malformed() {
				t.Errorf("%s/chunk %d: malformed %v\n got %+v\nwant %+v", tt.name, chunk, s.Malformed(), c, tt.want)
			}
		}
	}
}

func TestGRPCScannerCompressed(t *testing.T) {
	body := marshal(t, &inference.ModelInferRequest{ModelName: "m", Inputs: []*inference.ModelInferRequest_InferInputTensor{{Name: "x"}}})
	data := append(frame(true, body), frame(false, body)...)
	var s GRPCScanner
	s.Reset(KindInferRequest, 0)
	s.Capture(1<<20, nil)
	if err := feed(&s, data, 4); err != nil {
		t.Fatal(err)
	}
	var c record.Call
	s.FillRequest(&c)
	want := record.Call{RequestMessages: 2}
	if !reflect.DeepEqual(c, want) || !s.Compressed() || s.Malformed() || s.Captured() != nil {
		t.Errorf("got %+v, Compressed %v, Malformed %v, Captured %v", c, s.Compressed(), s.Malformed(), s.Captured())
	}
}

func TestGRPCScannerTooLarge(t *testing.T) {
	small := marshal(t, &inference.ModelInferRequest{ModelName: "m"})
	big := marshal(t, &inference.ModelInferRequest{ModelName: "m", RawInputContents: [][]byte{make([]byte, 100)}})
	tests := []struct {
		name     string
		limit    int64
		data     []byte
		tooLarge bool
		messages int
	}{
		{"under", int64(len(big)), frame(false, small, big), false, 2},
		{"no limit", 0, frame(false, small, big), false, 2},
		{"second message over", int64(len(big)) - 1, frame(false, small, big), true, 1},
		{"compressed over", 10, frame(true, big), true, 0},
		{"declared only", 10, []byte{0, 0xff, 0xff, 0xff, 0xff}, true, 0},
	}
	for _, tt := range tests {
		for _, chunk := range []int{0, 1} {
			var s GRPCScanner
			s.Reset(KindInferRequest, tt.limit)
			err := feed(&s, tt.data, chunk)
			if got := errors.Is(err, ErrTooLarge); got != tt.tooLarge {
				t.Errorf("%s/chunk %d: err %v, want too large %v", tt.name, chunk, err, tt.tooLarge)
			}
			if s.Messages() != tt.messages {
				t.Errorf("%s/chunk %d: Messages %d, want %d", tt.name, chunk, s.Messages(), tt.messages)
			}
			if tt.tooLarge {
				if err2 := s.Feed([]byte{0}); !errors.Is(err2, ErrTooLarge) {
					t.Errorf("%s/chunk %d: Feed after the limit: %v, want ErrTooLarge again", tt.name, chunk, err2)
				}
			}
		}
	}
}

func TestGRPCScannerCapture(t *testing.T) {
	body := marshal(t, &inference.ModelInferRequest{ModelName: "m", RawInputContents: [][]byte{[]byte("abc")}})
	data := frame(false, body, body)
	tests := []struct {
		name string
		max  int
		room int64 // what the reserve hands out; -1: no reserve
		data []byte
		want []byte
	}{
		{"fits", len(body), -1, data, body},
		{"too big", len(body) - 1, -1, data, nil},
		{"off", 0, -1, data, nil},
		{"incomplete", len(body), -1, data[:len(body)], nil},
		{"empty message", 10, -1, frame(false, nil), []byte{}},
		{"budget enough", len(body), int64(len(body)), data, body},
		{"budget short", len(body), int64(len(body)) - 1, data, nil},
	}
	for _, tt := range tests {
		var s GRPCScanner
		s.Reset(KindInferRequest, 0)
		var asked []int64
		var reserve func(int64) bool
		if tt.room >= 0 {
			reserve = func(n int64) bool { asked = append(asked, n); return n <= tt.room }
		}
		s.Capture(tt.max, reserve)
		if err := feed(&s, tt.data, 3); err != nil {
			t.Fatal(err)
		}
		got := s.Captured()
		if !bytes.Equal(got, tt.want) || (got == nil) != (tt.want == nil) {
			t.Errorf("%s: Captured %q, want %q", tt.name, got, tt.want)
		}
		if reserve != nil && (len(asked) != 1 || asked[0] != int64(len(body))) {
			t.Errorf("%s: reserve asked for %v, want once for the declared %d bytes", tt.name, asked, len(body))
		}
		if got != nil {
			var m inference.ModelInferRequest
			if err := proto.Unmarshal(got, &m); err != nil {
				t.Errorf("%s: captured bytes do not decode: %v", tt.name, err)
			}
		}
	}
}

func TestGRPCScannerReuse(t *testing.T) {
	a := frame(false, marshal(t, &inference.ModelInferRequest{ModelName: "a", Inputs: []*inference.ModelInferRequest_InferInputTensor{{Name: "in", Shape: []int64{3}}}}))
	b := frame(false, marshal(t, &inference.ModelInferRequest{ModelVersion: "2"}))
	var s GRPCScanner
	s.Reset(KindInferRequest, 0)
	s.Capture(100, nil)
	if err := s.Feed(a); err != nil {
		t.Fatal(err)
	}
	s.Reset(KindInferRequest, 0)
	if err := s.Feed(b); err != nil {
		t.Fatal(err)
	}
	var c record.Call
	s.FillRequest(&c)
	want := record.Call{Version: "2", RequestMessages: 1}
	if !reflect.DeepEqual(c, want) || s.Captured() != nil || s.Bytes() != int64(len(b)) {
		t.Errorf("after Reset: got %+v, Captured %v, Bytes %d", c, s.Captured(), s.Bytes())
	}
}

func TestGRPCScannerAllocs(t *testing.T) {
	req := &inference.ModelInferRequest{
		ModelName: "resnet", ModelVersion: "1",
		Inputs: []*inference.ModelInferRequest_InferInputTensor{
			{Name: "a", Datatype: "FP32", Shape: []int64{4, 3, 8, 8}},
			{Name: "b", Datatype: "FP32", Shape: []int64{4}, Contents: fp32(1, 2, 3, 4)},
		},
		RawInputContents: [][]byte{make([]byte, 4*3*8*8*4)},
	}
	data := frame(false, marshal(t, req))
	var s GRPCScanner
	allocs := testing.AllocsPerRun(100, func() {
		s.Reset(KindInferRequest, 1<<20)
		if err := feed(&s, data, 7); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("Reset+Feed allocates %.1f times per call, want 0", allocs)
	}
}

func BenchmarkGRPCScanner(b *testing.B) {
	small := frame(false, marshal(b, &inference.ModelInferRequest{
		ModelName: "resnet50", ModelVersion: "1", Id: "42",
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "input__0", Datatype: "FP32", Shape: []int64{1, 3, 224, 224}}},
		Outputs:          []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "output__0"}},
		RawInputContents: [][]byte{make([]byte, 64)},
	}))
	large := frame(false, marshal(b, &inference.ModelInferRequest{
		ModelName:        "resnet50",
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "input__0", Datatype: "FP32", Shape: []int64{16, 256, 1024}}},
		RawInputContents: [][]byte{make([]byte, 16<<20)},
	}))
	cases := []struct {
		name  string
		data  []byte
		chunk int
	}{
		{"small", small, 0},
		{"16MiB/32KiB-chunks", large, 32 << 10},
	}
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			var s GRPCScanner
			b.ReportAllocs()
			b.SetBytes(int64(len(bc.data)))
			for b.Loop() {
				s.Reset(KindInferRequest, 0)
				if err := feed(&s, bc.data, bc.chunk); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestGRPCScannerControlMessages reads the model out of the non-inference
// requests that name one (readiness, metadata, statistics, Triton's
// repository load/unload) and the answer out of ModelReady responses.
func TestGRPCScannerControlMessages(t *testing.T) {
	params := map[string]*inference.ModelRepositoryParameter{
		"config": {ParameterChoice: &inference.ModelRepositoryParameter_StringParam{StringParam: `{"max_batch_size":8}`}},
	}
	tests := []struct {
		name string
		kind MessageKind
		data []byte
		want record.Call
	}{
		{"model ready request", KindModelRequest, frame(false, marshal(t, &inference.ModelReadyRequest{Name: "resnet", Version: "2"})),
			record.Call{Model: "resnet", Version: "2", RequestMessages: 1}},
		{"statistics request without a version", KindModelRequest, frame(false, marshal(t, &inference.ModelStatisticsRequest{Name: "bert"})),
			record.Call{Model: "bert", RequestMessages: 1}},
		{"repository load", KindRepositoryRequest, frame(false, marshal(t, &inference.RepositoryModelLoadRequest{RepositoryName: "repo", ModelName: "resnet", Parameters: params})),
			record.Call{Model: "resnet", RequestMessages: 1}},
		{"repository unload without a repository", KindRepositoryRequest, frame(false, marshal(t, &inference.RepositoryModelUnloadRequest{ModelName: "bert"})),
			record.Call{Model: "bert", RequestMessages: 1}},
		{"ready", KindModelReadyResponse, frame(false, marshal(t, &inference.ModelReadyResponse{Ready: true})),
			record.Call{Ready: record.ReadyYes, ResponseMessages: 1}},
		{"not ready (an empty message in proto3)", KindModelReadyResponse, frame(false, marshal(t, &inference.ModelReadyResponse{Ready: false})),
			record.Call{Ready: record.ReadyNo, ResponseMessages: 1}},
		{"no answer", KindModelReadyResponse, nil, record.Call{}},
		{"compressed answer is not read", KindModelReadyResponse, frame(true, marshal(t, &inference.ModelReadyResponse{Ready: true})),
			record.Call{ResponseMessages: 1}},
	}
	for _, tt := range tests {
		for _, chunk := range []int{0, 1, 3} {
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
