package inferapi

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/inferwatch/inferwatch/proto/inference"
	"github.com/inferwatch/inferwatch/proto/tfserving"
	"github.com/inferwatch/inferwatch/proto/torchserve"
	"github.com/inferwatch/inferwatch/record"
)

// fuzzReader hands out fuzz bytes as the parts of a generated message; once
// the bytes run out it hands out zeros.
type fuzzReader []byte

func (r *fuzzReader) byte() byte {
	if len(*r) == 0 {
		return 0
	}
	b := (*r)[0]
	*r = (*r)[1:]
	return b
}

func (r *fuzzReader) string(max int) string {
	n := min(int(r.byte())%(max+1), len(*r))
	s := strings.ToValidUTF8(string((*r)[:n]), "é") // proto3 strings are UTF-8
	*r = (*r)[n:]
	return s
}

func (r *fuzzReader) int64() int64 {
	var b [8]byte
	for i := range int(r.byte() % 9) {
		b[i] = r.byte()
	}
	return int64(binary.LittleEndian.Uint64(b[:]))
}

// fuzzRequest builds a valid ModelInferRequest from fuzz bytes and the call
// record a scan of it must produce.
func fuzzRequest(t *testing.T, data []byte) (*inference.ModelInferRequest, record.Call) {
	r := fuzzReader(data)
	clip := func(s string, n int) string { return strings.ToValidUTF8(s[:min(len(s), n)], "") }
	msg := &inference.ModelInferRequest{ModelName: r.string(255) + r.string(255), ModelVersion: r.string(20), Id: r.string(10)}
	want := record.Call{Model: clip(msg.ModelName, maxField), Version: msg.ModelVersion, RequestMessages: 1}
	if r.byte()%2 == 1 {
		msg.Parameters = map[string]*inference.InferParameter{r.string(8): {ParameterChoice: &inference.InferParameter_StringParam{StringParam: r.string(30)}}}
	}
	inputs := int(r.byte() % (record.MaxTensors + 5))
	raws := inputs
	if r.byte()%4 == 0 {
		raws = int(r.byte() % (record.MaxTensors + 5))
	}
	for i := range inputs {
		in := &inference.ModelInferRequest_InferInputTensor{Name: r.string(255) + r.string(100), Datatype: r.string(8)}
		for range int(r.byte() % 70) {
			in.Shape = append(in.Shape, r.int64())
		}
		tensor := record.Tensor{Name: clip(in.Name, maxField), Datatype: in.Datatype}
		if len(in.Shape) > 0 {
			tensor.Shape = in.Shape[:min(len(in.Shape), maxDims)]
		}
		switch r.byte() % 4 {
		case 1:
			in.Contents = &inference.InferTensorContents{}
			for range int(r.byte()) {
				in.Contents.Int64Contents = append(in.Contents.Int64Contents, r.int64())
			}
			in.Contents.BytesContents = append(in.Contents.BytesContents, []byte(r.string(40)))
		case 2:
			in.Parameters = map[string]*inference.InferParameter{"k": {ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: true}}}
		}
		if in.Contents != nil {
			tensor.Bytes = int64(len(marshal(t, in.Contents)))
		}
		if i < raws {
			n := int(r.byte()) * int(r.byte()%8)
			msg.RawInputContents = append(msg.RawInputContents, make([]byte, n))
			tensor.Bytes += int64(n)
		}
		msg.Inputs = append(msg.Inputs, in)
		want.AddInput(tensor)
		if i == 0 && len(in.Shape) > 0 && in.Shape[0] > 0 && in.Shape[0] <= 1<<31-1 {
			want.BatchSize = int(in.Shape[0])
		}
	}
	for range raws - inputs {
		msg.RawInputContents = append(msg.RawInputContents, []byte(r.string(10)))
	}
	if r.byte()%2 == 1 {
		msg.Outputs = append(msg.Outputs, &inference.ModelInferRequest_InferRequestedOutputTensor{Name: r.string(20)})
	}
	return msg, want
}

// scanResult is everything a scan exposes, for comparing two scans.
type scanResult struct {
	Call                  record.Call
	Err                   bool
	Messages              int
	Bytes                 int64
	Malformed, Compressed bool
	Captured              []byte
}

// scanChunked scans data split at the sizes sizes gives, cycling, and returns
// what the scanner saw.
func scanChunked(kind MessageKind, limit int64, data, sizes []byte) scanResult {
	var s GRPCScanner
	s.Reset(kind, limit)
	s.Capture(1<<10, nil)
	var err error
	for i := 0; len(data) > 0; i++ {
		n := len(data)
		if len(sizes) > 0 {
			n = min(n, int(sizes[i%len(sizes)])+1)
		}
		if e := s.Feed(data[:n]); err == nil {
			err = e
		}
		data = data[n:]
	}
	if err != nil && !errors.Is(err, ErrTooLarge) {
		panic(err)
	}
	res := scanResult{Err: err != nil, Messages: s.Messages(), Bytes: s.Bytes(), Malformed: s.Malformed(), Compressed: s.Compressed(), Captured: s.Captured()}
	if kind.request() {
		s.FillRequest(&res.Call)
	} else {
		s.FillResponse(&res.Call)
	}
	return res
}

func FuzzGRPCScanner(f *testing.F) {
	body := marshal(f, &inference.ModelInferRequest{
		ModelName: "m", ModelVersion: "1",
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: "FP32", Shape: []int64{2, 2}, Contents: fp32(1, 2, 3, 4)}},
		RawInputContents: [][]byte{{1, 2, 3}},
	})
	stream := marshal(f, &inference.ModelStreamInferResponse{InferResponse: &inference.ModelInferResponse{
		ModelName: "m", Outputs: []*inference.ModelInferResponse_InferOutputTensor{{Name: "y", Shape: []int64{1}}},
	}})
	tf := marshal(f, &tfserving.PredictRequest{ModelSpec: &tfserving.ModelSpec{Name: "m", VersionChoice: &tfserving.ModelSpec_Version{Version: &tfserving.Int64Value{Value: 2}}},
		Inputs: map[string]*tfserving.TensorProto{"x": {Dtype: tfserving.DataType_DT_FLOAT, TensorShape: &tfserving.TensorShapeProto{Dim: []*tfserving.TensorShapeProto_Dim{{Size: 2}}}, FloatVal: []float32{1, 2}}}})
	ts := marshal(f, &torchserve.PredictionsRequest{ModelName: "m", ModelVersion: "1", Input: map[string][]byte{"data": {1, 2}}})
	f.Add(frame(false, tf), []byte{2})
	f.Add(frame(false, ts), []byte{1, 9})
	f.Add(frame(false, body, body), []byte{0, 3, 200})
	f.Add(frame(true, body), []byte{4})
	f.Add(frame(false, stream), []byte{1})
	f.Add(body, []byte{})
	f.Add([]byte{0, 0, 0, 0, 3, 0x2a, 0x01, 0x1a}, []byte{0})
	f.Add([]byte{0x7b, 0x7c}, []byte{0}) // an empty unknown group: valid protobuf
	f.Add([]byte("\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f\x10\x11\x12\x13\x14"), []byte{1, 2})
	f.Fuzz(func(t *testing.T, data, sizes []byte) {
		// Any bytes, framed as they come and framed as one message body: a
		// chunked scan sees exactly what a single Feed sees.
		limit := int64(len(data) / 2)
		for _, in := range [][]byte{data, frame(false, data)} {
			for kind := KindOther; kind < kindCount; kind++ {
				for _, lim := range []int64{0, limit} {
					whole := scanChunked(kind, lim, in, nil)
					chunked := scanChunked(kind, lim, in, sizes)
					if !reflect.DeepEqual(whole, chunked) {
						t.Fatalf("kind %d limit %d: chunked scan differs\nwhole   %+v\nchunked %+v", kind, lim, whole, chunked)
					}
				}
			}
		}

		// What the protobuf runtime accepts as the kind's message, the scanner
		// does not call malformed (it may accept more: it reads less).
		for kind, m := range map[MessageKind]proto.Message{
			KindInferRequest:        &inference.ModelInferRequest{},
			KindInferResponse:       &inference.ModelInferResponse{},
			KindStreamInferResponse: &inference.ModelStreamInferResponse{},
			KindModelRequest:        &inference.ModelReadyRequest{},
			KindRepositoryRequest:   &inference.RepositoryModelLoadRequest{},
			KindModelReadyResponse:  &inference.ModelReadyResponse{},
			KindTFRequest:           &tfserving.ClassificationRequest{},
			KindTFResponse:          &tfserving.RegressionResponse{},
			KindTFPredictRequest:    &tfserving.PredictRequest{},
			KindTFPredictResponse:   &tfserving.PredictResponse{},
			KindTFMultiRequest:      &tfserving.MultiInferenceRequest{},
			KindTFStatusResponse:    &tfserving.GetModelStatusResponse{},
			KindTSRequest:           &torchserve.PredictionsRequest{},
		} {
			if proto.Unmarshal(data, m) == nil && scanChunked(kind, 0, frame(false, data), sizes).Malformed {
				t.Fatalf("kind %d: proto.Unmarshal accepts the body, the scanner calls it malformed", kind)
			}
		}

		// A valid request built from the bytes reads back as the truth.
		msg, want := fuzzRequest(t, data)
		wire := marshal(t, msg)
		// A second message cut short is not counted and changes nothing.
		stream := frame(false, wire, wire)
		got := scanChunked(KindInferRequest, 0, stream[:len(stream)-1-len(wire)/2], sizes)
		if got.Malformed || got.Err || got.Messages != 1 {
			t.Fatalf("valid request: malformed %v, err %v, messages %d", got.Malformed, got.Err, got.Messages)
		}
		if !reflect.DeepEqual(got.Call, want) {
			t.Fatalf("valid request read as\n %+v\nwant %+v", got.Call, want)
		}
	})
}

func FuzzServerTiming(f *testing.F) {
	f.Add(`preprocess;dur=12.3;desc="x", infer;dur=4`, "cache;desc=hit")
	f.Add(`a;desc="q\"uo;te,d";dur="1.5"`, `;dur=1,,`)
	f.Add(`é/x y;DUR=1e3`, `b;dur=-1, c;dur=NaN, d;dur=1e400`)
	f.Add(`a;desc="\`, `"`)
	f.Fuzz(func(t *testing.T, a, b string) {
		prior := []record.Stage{{Name: "kept"}}
		got := ParseServerTiming([]string{a, b}, prior)
		if len(got) > 1+maxStages || got[0] != prior[0] {
			t.Fatalf("%d stages, or the prior one lost: %+v", len(got), got)
		}
		for _, s := range got[1:] {
			if s.Name == "" || len(s.Name) > maxStageName || strings.IndexFunc(s.Name, func(r rune) bool { return r > 0x7f || !labelByte(byte(r)) }) >= 0 {
				t.Fatalf("name %q is not a safe label", s.Name)
			}
			if s.Duration < 0 || s.Source != StageSourceServerTiming {
				t.Fatalf("stage %+v", s)
			}
		}
	})
}

func FuzzHTTPDecode(f *testing.F) {
	f.Add([]byte(`{"inputs":[{"name":"in0","shape":[2,3],"datatype":"FP32","data":[[1,2,3],[4,5,6]]}],"outputs":[{"name":"o"}]}`), uint8(0), uint16(40))
	f.Add([]byte(`{"model_name":"m","outputs":[{"name":"p","datatype":"FP16","shape":[1,2],"parameters":{"binary_data_size":4}}]}`+"\x00\x00\x00\x00"), uint8(8*3), uint16(104))
	f.Add([]byte(`{"instances":[[1,2],[3,4]],"inputs":{"a":[[1]],"b":2},"examples":[{}]}`), uint8(1), uint16(20))
	f.Add([]byte(`{"predictions":[1,2],"outputs":[[1,2]],"result":[]}`), uint8(2), uint16(9))
	f.Add([]byte(`{"model":"m","stream":true,"prompt":["a",[1,2]],"input":[1]}`), uint8(3), uint16(30))
	f.Add([]byte("data: {\"model\":\ndata: \"m\"}\n\ndata: [DONE]\n\n"), uint8(3+8*2), uint16(12))
	f.Add([]byte(` {"inputs":[{"shape":[-1,4611686018427387904,3]}]}`), uint8(0+8*4), uint16(1))
	routes := []Route{
		HTTPRoute("POST", "/v2/models/m/infer", ""),
		HTTPRoute("POST", "/v1/models/m:predict", ""),
		HTTPRoute("POST", "/v1/models/m/versions/1:classify", ""),
		HTTPRoute("POST", "/v1/chat/completions", ""),
		HTTPRoute("POST", "/v1/completions", ""),
		HTTPRoute("POST", "/v1/embeddings", ""),
		HTTPRoute("POST", "/predictions/m", ""),
		HTTPRoute("GET", "/x", ""),
	}
	f.Fuzz(func(t *testing.T, body []byte, sel uint8, cut uint16) {
		headers := []http.Header{
			jsonType,
			octetType,
			sseType,
			{headerJSONLength: {strconv.Itoa(int(cut) % (len(body) + 1))}},
			{},
		}
		r := routes[int(sel)%len(routes)]
		h := headers[int(sel/8)%len(headers)]
		prefix := body[:int(cut)%(len(body)+1)]
		for _, decode := range []func(Route, http.Header, []byte, bool, *record.Call) error{DecodeHTTPRequest, DecodeHTTPResponse} {
			var whole record.Call
			err := decode(r, h, body, false, &whole)
			if (err != nil) != whole.DecodeFail {
				t.Fatalf("err %v but DecodeFail %v", err, whole.DecodeFail)
			}
			if len(whole.Inputs) > record.MaxTensors || len(whole.Outputs) > record.MaxTensors || whole.BatchSize < 0 {
				t.Fatalf("record out of bounds: %+v", whole)
			}
			// A body that decodes whole decodes cut at any point, as long as
			// the cut is declared.
			var part record.Call
			if perr := decode(r, h, prefix, true, &part); err == nil && perr != nil {
				t.Fatalf("whole body decodes, its %d-byte prefix fails: %v", len(prefix), perr)
			}
		}
		// The bracket scan of every call: no panic on anything, and on what
		// the validating decode accepts, the same record, whole or cut.
		for i, scan := range []func(Route, http.Header, []byte, bool, *record.Call) error{ScanHTTPRequest, ScanHTTPResponse} {
			decode := []func(Route, http.Header, []byte, bool, *record.Call) error{DecodeHTTPRequest, DecodeHTTPResponse}[i]
			for _, in := range []struct {
				b   []byte
				cut bool
			}{{body, false}, {prefix, true}} {
				var want, got record.Call
				werr := decode(r, h, in.b, in.cut, &want)
				gerr := scan(r, h, in.b, in.cut, &got)
				if (gerr != nil) != got.DecodeFail {
					t.Fatalf("scan: err %v but DecodeFail %v", gerr, got.DecodeFail)
				}
				if werr == nil && (gerr != nil || !reflect.DeepEqual(want, got)) {
					t.Fatalf("decode accepts %q (cut %v), scan: %v\nwant %+v\n got %+v", in.b, in.cut, gerr, want, got)
				}
			}
		}
	})
}

// FuzzGenerateDecode: Triton generate extension bodies, request and
// response, JSON or a stream: no panic, an error exactly when DecodeFail,
// and a body that decodes whole decodes cut anywhere when the cut is said.
func FuzzGenerateDecode(f *testing.F) {
	f.Add([]byte(`{"text_input":"hi","parameters":{"stream":true,"max_tokens":8},"extra":[1,{"a":null}]}`), uint16(12), false)
	f.Add([]byte("data: {\"text_output\":\"he\"}\n\n"), uint16(3), true)
	routes := []Route{HTTPRoute("POST", "/v2/models/m/generate", ""), HTTPRoute("POST", "/v2/models/m/versions/2/generate_stream", "")}
	f.Fuzz(func(t *testing.T, body []byte, cut uint16, stream bool) {
		h := jsonType
		if stream {
			h = sseType
		}
		prefix := body[:int(cut)%(len(body)+1)]
		for _, r := range routes {
			for _, decode := range []func(Route, http.Header, []byte, bool, *record.Call) error{DecodeHTTPRequest, DecodeHTTPResponse, ScanHTTPRequest, ScanHTTPResponse} {
				var whole, part record.Call
				err := decode(r, h, body, false, &whole)
				if (err != nil) != whole.DecodeFail || whole.InputCount != 0 || whole.OutputCount != 0 {
					t.Fatalf("err %v, DecodeFail %v, tensors %d/%d", err, whole.DecodeFail, whole.InputCount, whole.OutputCount)
				}
				if perr := decode(r, h, prefix, true, &part); err == nil && perr != nil {
					t.Fatalf("whole body decodes, its %d-byte prefix fails: %v", len(prefix), perr)
				}
			}
		}
	})
}

// FuzzSSE: any bytes, in any split, through the event-stream scanner and
// the OpenAI and Triton generate event readers: no panic, events bounded, and the split does not
// change what is found.
func FuzzSSE(f *testing.F) {
	f.Add([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: [DONE]\n\n"), 7)
	f.Add([]byte("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2}}\r\n\r\n"), 3)
	f.Add([]byte(": c\revent: x\rdata: {\"type\":\"response.output_text.delta\"}\r\r"), 1)
	f.Add([]byte("data: {\"model_name\":\"m\",\"text_output\":\"a\"}\n\ndata: {\"error\":\"x\"}\n\n"), 5)
	f.Fuzz(func(t *testing.T, stream []byte, split int) {
		collect := func(pieces ...[]byte) []string {
			var s SSEScanner
			var out []string
			for _, p := range pieces {
				s.Feed(p, func(data []byte, cut bool) {
					if len(data) > maxEventData {
						t.Fatalf("event of %d bytes past the bound", len(data))
					}
					ev, err := ParseOpenAIEvent(data)
					gen, gerr := ParseGenerateEvent(data)
					out = append(out, fmt.Sprintf("%q %v %+v %v %+v %v", data, cut, ev, err != nil, gen, gerr != nil))
				})
			}
			return out
		}
		whole := collect(stream)
		if len(stream) > 0 {
			split = ((split % len(stream)) + len(stream)) % len(stream)
			if parts := collect(stream[:split], stream[split:]); !slices.Equal(whole, parts) {
				t.Fatalf("split at %d: %q, whole: %q", split, parts, whole)
			}
		}
	})
}

// FuzzStreamHeads: the per-message readers of ModelStreamInfer and of
// TorchServe's StreamPredictions take any bytes, whole or cut anywhere,
// without a panic; a real message's id and final flag (TorchServe: its
// failed status) come back from any head long enough to hold them, and a
// TorchServe head cut anywhere yields the id whole or none.
func FuzzStreamHeads(f *testing.F) {
	res, _ := proto.Marshal(&inference.ModelStreamInferResponse{InferResponse: &inference.ModelInferResponse{
		Id: "r1", Parameters: map[string]*inference.InferParameter{FinalResponseParam: {ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: true}}},
		RawOutputContents: [][]byte{make([]byte, 64)}}})
	req, _ := proto.Marshal(&inference.ModelInferRequest{ModelName: "m", Id: "r1", RawInputContents: [][]byte{make([]byte, 64)}})
	f.Add(res, "r1", true)
	f.Add(req, "r1", false)
	f.Add([]byte{0x0a, 0x05, 'o', 'o', 'p', 's'}, "", false)
	tsReq, _ := proto.Marshal(&torchserve.PredictionsRequest{ModelName: "m", Input: map[string][]byte{"prompt": []byte("hi")}, SequenceId: proto.String("s1")})
	tsRes, _ := proto.Marshal(&torchserve.PredictionResponse{Prediction: []byte("tok"), SequenceId: proto.String("s1"), Status: &status.Status{Code: 13, Message: "failed"}})
	f.Add(tsReq, "s1", false)
	f.Add(tsRes, "s1", true)
	f.Fuzz(func(t *testing.T, b []byte, id string, final bool) {
		for cut := range len(b) + 1 {
			InferRequestHead(b[:cut])
			StreamResponseHead(b[:cut])
			PredictionsRequestHead(b[:cut])
			PredictionResponseHead(b[:cut])
		}
		if len(id) > maxID {
			return
		}
		r, err := proto.Marshal(&inference.ModelStreamInferResponse{InferResponse: &inference.ModelInferResponse{
			Id: id, Parameters: map[string]*inference.InferParameter{FinalResponseParam: {ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: final}}},
			RawOutputContents: [][]byte{b}}})
		if err != nil {
			return // an id that is not UTF-8: no encoder sends it
		}
		if h := StreamResponseHead(r); h.ID != id || h.Final != final || h.Error {
			t.Fatalf("response head %+v, want id %q final %v", h, id, final)
		}
		q, _ := proto.Marshal(&inference.ModelInferRequest{ModelName: "m", Id: id, RawInputContents: [][]byte{b}})
		if h := InferRequestHead(q); h.ID != id {
			t.Fatalf("request head id %q, want %q", h.ID, id)
		}

		var code int32
		if final {
			code = 13 // INTERNAL: TorchServe's failed request
		}
		tq, _ := proto.Marshal(&torchserve.PredictionsRequest{ModelName: "m", Input: map[string][]byte{"in": b}, SequenceId: &id})
		tr, _ := proto.Marshal(&torchserve.PredictionResponse{Prediction: b, SequenceId: &id, Status: &status.Status{Code: code, Message: "m"}})
		if h := PredictionsRequestHead(tq); h.ID != id {
			t.Fatalf("TorchServe request head id %q, want %q", h.ID, id)
		}
		if h := PredictionResponseHead(tr); h.ID != id || h.Error != final || h.Final {
			t.Fatalf("TorchServe response head %+v, want id %q failed %v", h, id, final)
		}
		for cut := range len(tq) {
			if h := PredictionsRequestHead(tq[:cut]); h.ID != "" && h.ID != id {
				t.Fatalf("TorchServe request cut at %d: id %q, want %q or none", cut, h.ID, id)
			}
		}
		for cut := range len(tr) {
			if h := PredictionResponseHead(tr[:cut]); h.ID != "" && h.ID != id || h.Error && !final {
				t.Fatalf("TorchServe response cut at %d: %+v, want id %q or none, failed %v at most", cut, h, id, final)
			}
		}
	})
}

// FuzzHeadFields: the fields HeadFields hands over of any bytes are the
// same however the stream is cut into chunks, and for a valid message
// they are what the protobuf runtime's wire functions read.
func FuzzHeadFields(f *testing.F) {
	tsReq, _ := proto.Marshal(&torchserve.PredictionsRequest{ModelName: "m", Input: map[string][]byte{"prompt": make([]byte, 2000)}, SequenceId: proto.String("s1")})
	tsRes, _ := proto.Marshal(&torchserve.PredictionResponse{Prediction: make([]byte, 300), SequenceId: proto.String("s1"), Status: &status.Status{Code: 13, Message: "failed"}})
	f.Add(tsReq, uint64(1<<4), uint16(1024), []byte{7})
	f.Add(tsRes, uint64(1<<2|1<<3), uint16(1024), []byte{0, 200})
	f.Add([]byte{0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, ^uint64(0), uint16(40), []byte{})
	f.Fuzz(func(t *testing.T, b []byte, want uint64, max uint16, sizes []byte) {
		stream := frame(false, b)
		whole, wholeOK := heads(stream, want, int(max), nil)
		chunked, chunkedOK := heads(stream, want, int(max), sizes)
		if len(whole) != 1 || !reflect.DeepEqual(whole, chunked) || !slices.Equal(wholeOK, chunkedOK) {
			t.Fatalf("heads %q (whole %v), chunked %q (whole %v)", whole, wholeOK, chunked, chunkedOK)
		}
		if ref, refWhole, ok := pickRef(b, want, int(max)); ok && (!bytes.Equal(whole[0], ref) || wholeOK[0] != refWhole) {
			t.Fatalf("head %q (whole %v), want %q (whole %v)", whole[0], wholeOK[0], ref, refWhole)
		}
	})
}
