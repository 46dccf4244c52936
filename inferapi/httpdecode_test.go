package inferapi

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	"github.com/inferwatch/inferwatch/record"
)

var (
	jsonType  = http.Header{"Content-Type": {"application/json"}}
	octetType = http.Header{"Content-Type": {"application/octet-stream"}}
	sseType   = http.Header{"Content-Type": {"text/event-stream; charset=utf-8"}}
	curlType  = http.Header{"Content-Type": {"application/x-www-form-urlencoded"}} // curl -d's default
)

// binaryBody builds a KServe v2 binary-extension body and its headers.
func binaryBody(header string, raw int) (http.Header, string) {
	h := http.Header{"Content-Type": {"application/octet-stream"}}
	h.Set(headerJSONLength, strconv.Itoa(len(header)))
	return h, header + strings.Repeat("\x00", raw)
}

type httpCase struct {
	name      string
	route     Route
	header    http.Header
	body      string
	truncated bool
	pre       record.Call // what the call held before
	want      record.Call
	wantErr   bool
}

func runHTTPCases(t *testing.T, response bool, tests []httpCase) {
	t.Helper()
	for _, tt := range tests {
		c := tt.pre
		var err error
		if response {
			err = DecodeHTTPResponse(tt.route, tt.header, []byte(tt.body), tt.truncated, &c)
		} else {
			err = DecodeHTTPRequest(tt.route, tt.header, []byte(tt.body), tt.truncated, &c)
		}
		if (err != nil) != tt.wantErr {
			t.Errorf("%s: err = %v, want error %v", tt.name, err, tt.wantErr)
		}
		want := tt.want
		if tt.wantErr {
			want.DecodeFail = true
		}
		if !reflect.DeepEqual(c, want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tt.name, c, want)
		}
		if tt.wantErr {
			continue // what the scan makes of it: TestScanHTTP, FuzzHTTPDecode
		}
		// The bracket scan of every call reads a valid body alike.
		s := tt.pre
		if response {
			err = ScanHTTPResponse(tt.route, tt.header, []byte(tt.body), tt.truncated, &s)
		} else {
			err = ScanHTTPRequest(tt.route, tt.header, []byte(tt.body), tt.truncated, &s)
		}
		if err != nil || !reflect.DeepEqual(s, want) {
			t.Errorf("%s: scan: %v\n got %+v\nwant %+v", tt.name, err, s, want)
		}
	}
}

// TestScanHTTP: where the bracket scan and the validating decode part ways,
// and where they must not.
func TestScanHTTP(t *testing.T) {
	infer := HTTPRoute("POST", "/v2/models/m/infer", "")
	two := func(a, b string) string {
		return `{"inputs":[{"name":"a","shape":[2],"datatype":"BYTES","data":` + a + `},` +
			`{"name":"b","shape":[1,2],"datatype":"FP32","data":` + b + `}]}`
	}
	whole := two(`["a","b"]`, `[[1,2]]`)
	cutData := whole[:strings.LastIndex(whole, "[[1,2")+len("[[1,2")]
	named := []record.Tensor{{Name: "a", Datatype: "BYTES", Shape: []int64{2}}, {Name: "b", Datatype: "FP32", Shape: []int64{1, 2}, Bytes: 8}}
	for _, tc := range []struct {
		name          string
		body          string
		cut           bool
		scanErr       bool // the scan fails
		validateFails bool // the validating decode fails
		inputs        []record.Tensor
	}{
		{name: "brackets and quotes inside strings", body: two(`["]]","[\"[",  "\\"]`, `[[1,2]]`), inputs: named},
		{name: "nested and empty arrays", body: two(`[[],[[]],"x"]`, `[[1e3,-0.5],[]]`), inputs: named},
		{name: "malformed numbers: only the validating walk sees them", body: two(`["a","b"]`, `[[1..2,--3,,]]`), validateFails: true, inputs: named},
		{name: "object punctuation inside an array", body: two(`[{"k" 1}]`, `[[1,2]]`), validateFails: true, inputs: named},
		{name: "cut inside data, declared", body: cutData, cut: true, inputs: named},
		{name: "cut inside data, undeclared", body: cutData, scanErr: true, validateFails: true, inputs: named},
		{name: "cut inside a string in data", body: `{"inputs":[{"name":"a","data":["x]`, scanErr: true, validateFails: true, inputs: []record.Tensor{{Name: "a"}}},
		{name: "bad escape inside data", body: two(`["\q"]`, `[1]`), scanErr: true, validateFails: true, inputs: []record.Tensor{{Name: "a", Datatype: "BYTES", Shape: []int64{2}}}},
		{name: "unbalanced: more closing", body: `{"inputs":[{"name":"a","data":[1]]}]}`, scanErr: true, validateFails: true, inputs: []record.Tensor{{Name: "a"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var v, s record.Call
			verr := DecodeHTTPRequest(infer, jsonType, []byte(tc.body), tc.cut, &v)
			serr := ScanHTTPRequest(infer, jsonType, []byte(tc.body), tc.cut, &s)
			if (verr != nil) != tc.validateFails {
				t.Errorf("validating decode: %v, want failure %v", verr, tc.validateFails)
			}
			if (serr != nil) != tc.scanErr || s.DecodeFail != tc.scanErr {
				t.Errorf("scan: %v (DecodeFail %v), want failure %v", serr, s.DecodeFail, tc.scanErr)
			}
			if !reflect.DeepEqual(s.Inputs, tc.inputs) {
				t.Errorf("scan read inputs %+v, want %+v", s.Inputs, tc.inputs)
			}
		})
	}
}

func TestDecodeHTTPRequestKServeV2(t *testing.T) {
	infer := HTTPRoute("POST", "/v2/models/m/infer", "")
	full := `{"id":"1","parameters":{"x":1},"inputs":[` +
		`{"name":"in0","shape":[2,3],"datatype":"FP32","data":[[1,2,3],[4,5,6]]},` +
		`{"data":["a","b"],"datatype":"BYTES","name":"text","shape":[2]}],` +
		`"outputs":[{"name":"out"}]}`
	in0 := record.Tensor{Name: "in0", Datatype: "FP32", Shape: []int64{2, 3}, Bytes: 24}
	text := record.Tensor{Name: "text", Datatype: "BYTES", Shape: []int64{2}}
	two := record.Call{BatchSize: 2, InputCount: 2, Inputs: []record.Tensor{in0, text}}
	binHeader := `{"inputs":[{"name":"a","shape":[1,4],"datatype":"FP32","parameters":{"binary_data_size":16}},` +
		`{"name":"b","shape":[1],"datatype":"BYTES","parameters":{"binary_data_size":9}}]}`
	binH, bin := binaryBody(binHeader, 25)
	bin1 := record.Call{BatchSize: 1, InputCount: 2, Inputs: []record.Tensor{
		{Name: "a", Datatype: "FP32", Shape: []int64{1, 4}, Bytes: 16},
		{Name: "b", Datatype: "BYTES", Shape: []int64{1}, Bytes: 9},
	}}
	var many strings.Builder
	many.WriteString(`{"inputs":[`)
	for i := range record.MaxTensors + 3 {
		if i > 0 {
			many.WriteByte(',')
		}
		fmt.Fprintf(&many, `{"name":"t%d","shape":[1],"datatype":"INT64"}`, i)
	}
	many.WriteString(`]}`)
	var manyWant record.Call
	for i := range record.MaxTensors + 3 {
		manyWant.AddInput(record.Tensor{Name: fmt.Sprintf("t%d", i), Datatype: "INT64", Shape: []int64{1}, Bytes: 8})
	}
	manyWant.BatchSize = 1
	runHTTPCases(t, false, []httpCase{
		{name: "json", route: infer, header: jsonType, body: full, want: two},
		{name: "json without content type", route: infer, body: " \n" + full, want: two},
		{name: "json+ext content type", route: infer, header: http.Header{"Content-Type": {"application/vnd.x+json; charset=utf-8"}}, body: full, want: two},
		{name: "cut inside data keeps shape", route: infer, header: jsonType, body: full[:strings.Index(full, "[4,5")], truncated: true,
			want: record.Call{BatchSize: 2, InputCount: 1, Inputs: []record.Tensor{in0}}},
		{name: "cut inside shape keeps the name", route: infer, header: jsonType, body: full[:strings.Index(full, "3],")], truncated: true,
			want: record.Call{InputCount: 1, Inputs: []record.Tensor{{Name: "in0"}}}},
		{name: "cut before inputs", route: infer, header: jsonType, body: full[:10], truncated: true},
		{name: "cut without truncation is malformed", route: infer, header: jsonType, body: full[:strings.Index(full, "[4,5")], wantErr: true,
			want: record.Call{BatchSize: 2, InputCount: 1, Inputs: []record.Tensor{in0}}},
		{name: "dynamic or overflowing shape", route: infer, header: jsonType, body: `{"inputs":[{"name":"a","shape":[-1,3],"datatype":"FP32"},{"name":"b","shape":[4611686018427387904,4],"datatype":"FP32"}]}`,
			want: record.Call{InputCount: 2, Inputs: []record.Tensor{{Name: "a", Datatype: "FP32", Shape: []int64{-1, 3}}, {Name: "b", Datatype: "FP32", Shape: []int64{1 << 62, 4}}}}},
		{name: "more tensors than kept", route: infer, header: jsonType, body: many.String(), want: manyWant},
		{name: "curl -d", route: infer, header: curlType, body: full, want: two},
		{name: "binary extension", route: infer, header: binH, body: bin, want: bin1},
		{name: "binary extension cut in the raw part", route: infer, header: binH, body: bin[:len(binHeader)+3], truncated: true, want: bin1},
		{name: "binary extension cut in the JSON header", route: infer, header: binH, body: bin[:strings.Index(binHeader, `"b"`)], truncated: true,
			want: record.Call{BatchSize: 1, InputCount: 1, Inputs: bin1.Inputs[:1]}},
		{name: "binary sizes disagree with the body", route: infer, header: binH, body: bin[:len(bin)-1], wantErr: true, want: bin1},
		{name: "binary header longer than the body", route: infer, header: binH, body: bin[:10], wantErr: true},
		{name: "binary header not a number", route: infer, header: http.Header{headerJSONLength: {"ten"}}, body: bin, wantErr: true},
		{name: "octet-stream without the extension is not parsed", route: infer, header: octetType, body: full},
		{name: "compressed body is not parsed", route: infer, header: http.Header{"Content-Type": {"application/json"}, "Content-Encoding": {"gzip"}}, body: "\x1f\x8b"},
		{name: "compressed binary extension is not parsed", route: infer, header: http.Header{headerJSONLength: {"12"}, "Content-Encoding": {"gzip"}}, body: "\x1f\x8b"},
		{name: "text without content type is not parsed", route: infer, body: "hello"},
		{name: "empty body", route: infer, header: jsonType},
		{name: "syntax error", route: infer, header: jsonType, body: `{"inputs":[{"name":"a",,}]}`, wantErr: true, want: record.Call{InputCount: 1, Inputs: []record.Tensor{{Name: "a"}}}},
		{name: "syntax error in a truncated body", route: infer, header: jsonType, body: `{"inputs":]`, truncated: true, wantErr: true},
		{name: "inputs not a list", route: infer, header: jsonType, body: `{"inputs":{"a":1}}`, wantErr: true},
		{name: "shape not integers", route: infer, header: jsonType, body: `{"inputs":[{"name":"a","shape":[1.5]}]}`, wantErr: true, want: record.Call{InputCount: 1, Inputs: []record.Tensor{{Name: "a"}}}},
		{name: "name not a string", route: infer, header: jsonType, body: `{"inputs":[{"name":7}]}`, wantErr: true},
		{name: "negative binary size", route: infer, header: jsonType, body: `{"inputs":[{"name":"a","parameters":{"binary_data_size":-1}}]}`, wantErr: true, want: record.Call{InputCount: 1, Inputs: []record.Tensor{{Name: "a"}}}},
		{name: "top level not an object", route: infer, header: jsonType, body: `[1]`, wantErr: true},
		{name: "long name clipped", route: infer, header: jsonType, body: `{"inputs":[{"name":"` + strings.Repeat("é", 200) + `"}]}`,
			want: record.Call{InputCount: 1, Inputs: []record.Tensor{{Name: strings.Repeat("é", 128)}}}},
		{name: "metadata route is not decoded", route: HTTPRoute("GET", "/v2/models/m", ""), header: jsonType, body: `{`},
	})
}

func TestDecodeHTTPResponseKServeV2(t *testing.T) {
	infer := HTTPRoute("POST", "/v2/models/m/infer", "")
	body := `{"model_name":"resnet","model_version":"4","id":"1","outputs":[{"name":"probs","datatype":"FP16","shape":[1,10],"data":[0,1,2,3,4,5,6,7,8,9]}]}`
	probs := record.Tensor{Name: "probs", Datatype: "FP16", Shape: []int64{1, 10}, Bytes: 20}
	binHeader := `{"model_name":"resnet","outputs":[{"name":"probs","datatype":"FP16","shape":[1,10],"parameters":{"binary_data_size":20}}]}`
	binH, bin := binaryBody(binHeader, 20)
	runHTTPCases(t, true, []httpCase{
		{name: "json", route: infer, header: jsonType, body: body,
			want: record.Call{Model: "resnet", Version: "4", OutputCount: 1, Outputs: []record.Tensor{probs}}},
		{name: "request's model wins", route: infer, header: jsonType, body: body, pre: record.Call{Model: "alias", Version: "1"},
			want: record.Call{Model: "alias", Version: "1", OutputCount: 1, Outputs: []record.Tensor{probs}}},
		{name: "binary extension", route: infer, header: binH, body: bin,
			want: record.Call{Model: "resnet", OutputCount: 1, Outputs: []record.Tensor{probs}}},
		{name: "error body", route: infer, header: jsonType, body: `{"error":"model not found"}`},
		{name: "plain-text error", route: infer, header: http.Header{"Content-Type": {"text/plain"}}, body: `not found`},
	})
}

func TestDecodeHTTPKServeV1AndTFServing(t *testing.T) {
	predict := HTTPRoute("POST", "/v1/models/m:predict", "")
	tfPredict := HTTPRoute("POST", "/v1/models/m/versions/2:predict", "")
	classify := HTTPRoute("POST", "/v1/models/m:classify", "")
	instances := `{"signature_name":"serving_default","instances":[[1,2],[3,4],{"b64":"AAAA"}]}`
	runHTTPCases(t, false, []httpCase{
		{name: "instances", route: predict, header: jsonType, body: instances, want: record.Call{BatchSize: 3}},
		{name: "instances cut", route: predict, header: jsonType, body: instances[:len(instances)-5], truncated: true},
		{name: "columnar object", route: tfPredict, header: jsonType, body: `{"inputs":{"image":[[[1,2],[3,4]],[[5,6],[7,8]]],"scale":0.5}}`,
			want: record.Call{BatchSize: 2, InputCount: 2, Inputs: []record.Tensor{{Name: "image", Shape: []int64{2, 2, 2}}, {Name: "scale"}}}},
		{name: "columnar cut keeps names", route: tfPredict, header: jsonType, body: `{"inputs":{"a":[1],"b":[[1,2],[3`, truncated: true,
			want: record.Call{BatchSize: 1, InputCount: 2, Inputs: []record.Tensor{{Name: "a", Shape: []int64{1}}, {Name: "b"}}}},
		{name: "columnar list", route: tfPredict, header: jsonType, body: `{"inputs":[[1,2,3]]}`,
			want: record.Call{BatchSize: 1, InputCount: 1, Inputs: []record.Tensor{{Shape: []int64{1, 3}}}}},
		{name: "examples", route: classify, header: jsonType, body: `{"examples":[{"x":1},{"x":2}]}`, want: record.Call{BatchSize: 2}},
		{name: "instances not a list", route: predict, header: jsonType, body: `{"instances":{}}`, wantErr: true},
		{name: "octet-stream", route: predict, header: octetType, body: instances},
		// curl -d, as TF Serving's and KServe's examples post, sends JSON
		// as application/x-www-form-urlencoded; the servers read it as JSON.
		{name: "curl -d", route: predict, header: curlType, body: `{"instances": [1.0, 2.0, 5.0]}`, want: record.Call{BatchSize: 3}},
		{name: "curl -d, not JSON", route: predict, header: curlType, body: `instances=1`},
	})
	runHTTPCases(t, true, []httpCase{
		{name: "predictions", route: predict, header: jsonType, body: `{"predictions":[[0.1,0.9],[0.8,0.2]]}`, want: record.Call{OutputCount: 2}},
		{name: "predictions cut", route: predict, header: jsonType, body: `{"predictions":[[0.1,0.9],[0.8`, truncated: true},
		{name: "columnar outputs", route: tfPredict, header: jsonType, body: `{"outputs":{"scores":[[0.1,0.9]],"labels":[1]}}`,
			want: record.Call{OutputCount: 2, Outputs: []record.Tensor{{Name: "scores", Shape: []int64{1, 2}}, {Name: "labels", Shape: []int64{1}}}}},
		{name: "classify result", route: classify, header: jsonType, body: `{"result":[[["a",0.1]],[["b",0.2]],[["c",0.3]]]}`, want: record.Call{OutputCount: 3}},
		{name: "error", route: predict, header: jsonType, body: `{"error":"bad input"}`},
		{name: "malformed", route: predict, header: jsonType, body: `{"predictions":[1,]}`, wantErr: true},
	})
}

func TestDecodeHTTPOpenAI(t *testing.T) {
	chat := HTTPRoute("POST", "/v1/chat/completions", "")
	completions := HTTPRoute("POST", "/v1/completions", "")
	embeddings := HTTPRoute("POST", "/v1/embeddings", "")
	responses := HTTPRoute("POST", "/v1/responses", "")
	runHTTPCases(t, false, []httpCase{
		{name: "chat", route: chat, header: jsonType, body: `{"model":"llama-3","messages":[{"role":"user","content":"hi"}],"stream":true}`,
			want: record.Call{Model: "llama-3", Stream: true, BatchSize: 1}},
		{name: "stream false and null", route: chat, header: jsonType, body: `{"stream":false,"model":"m","stream_options":null}`, want: record.Call{Model: "m", BatchSize: 1}},
		{name: "route's model wins", route: chat, header: jsonType, body: `{"model":"x"}`, pre: record.Call{Model: "y"}, want: record.Call{Model: "y", BatchSize: 1}},
		{name: "prompt list", route: completions, header: jsonType, body: `{"model":"m","prompt":["a","b","c"]}`, want: record.Call{Model: "m", BatchSize: 3}},
		{name: "prompt string", route: completions, header: jsonType, body: `{"prompt":"once upon a time"}`, want: record.Call{BatchSize: 1}},
		{name: "prompt string cut", route: completions, header: jsonType, body: `{"model":"m","prompt":"once upon a ti`, truncated: true, want: record.Call{Model: "m", BatchSize: 1}},
		{name: "prompt tokens", route: completions, header: jsonType, body: `{"prompt":[1,2,3]}`, want: record.Call{BatchSize: 1}},
		{name: "prompt token lists", route: completions, header: jsonType, body: `{"prompt":[[1,2],[3]]}`, want: record.Call{BatchSize: 2}},
		{name: "prompt tokens cut", route: completions, header: jsonType, body: `{"prompt":[1,2,3`, truncated: true, want: record.Call{BatchSize: 1}},
		{name: "prompt list cut", route: completions, header: jsonType, body: `{"model":"m","prompt":["a","b`, truncated: true, want: record.Call{Model: "m"}},
		{name: "embeddings list", route: embeddings, header: jsonType, body: `{"input":["a","b"],"model":"e5"}`, want: record.Call{Model: "e5", BatchSize: 2}},
		// The Responses API's input is one conversation: a string, or a
		// list of its items (messages, tool outputs), never a batch.
		{name: "responses input items", route: responses, header: jsonType, body: `{"model":"gpt","input":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"input_text","text":"hi"}]}],"stream":true}`,
			want: record.Call{Model: "gpt", Stream: true, BatchSize: 1}},
		{name: "responses input text", route: responses, header: jsonType, body: `{"input":"hi"}`, want: record.Call{BatchSize: 1}},
		{name: "responses input cut", route: responses, header: jsonType, body: `{"model":"gpt","input":[{"role":"user","content":"h`, truncated: true, want: record.Call{Model: "gpt", BatchSize: 1}},
		{name: "malformed", route: chat, header: jsonType, body: `{"model":}`, wantErr: true},
		{name: "model not a string", route: chat, header: jsonType, body: `{"model":1}`, wantErr: true},
		{name: "multipart is not parsed", route: chat, header: http.Header{"Content-Type": {"multipart/form-data; boundary=x"}}, body: `--x`},
	})
	sse := "data: {\"id\":\"1\",\"model\":\"llama-3\",\"choices\":[]}\n\ndata: {\"model\":\"other\"}\n\ndata: [DONE]\n\n"
	runHTTPCases(t, true, []httpCase{
		{name: "json", route: chat, header: jsonType, body: `{"id":"x","object":"chat.completion","model":"llama-3","choices":[{"index":0}]}`, want: record.Call{Model: "llama-3"}},
		{name: "event stream", route: chat, header: sseType, body: sse, want: record.Call{Model: "llama-3", Stream: true}},
		{name: "event stream after a comment", route: chat, header: sseType, body: ": keep-alive\n\n" + sse, want: record.Call{Model: "llama-3", Stream: true}},
		{name: "event data on several lines", route: chat, header: sseType, body: "data: {\"model\":\ndata: \"m2\"}\n\n", want: record.Call{Model: "m2", Stream: true}},
		{name: "event stream cut in the first event", route: chat, header: sseType, body: sse[:20], truncated: true, want: record.Call{Stream: true}},
		{name: "event stream done only", route: chat, header: sseType, body: "data: [DONE]\n\n", want: record.Call{Stream: true}},
		{name: "event stream malformed", route: chat, header: sseType, body: "data: {\"model\"}\n\n", wantErr: true, want: record.Call{Stream: true}},
	})
}

func TestDecodeHTTPNotDecoded(t *testing.T) {
	body := []byte(`{"inputs":[{"name":"a","shape":[1]}]}`)
	routes := []Route{
		HTTPRoute("POST", "/predictions/m", ""),
		HTTPRoute("POST", "/unknown", ""),
		HTTPRoute("GET", "/v2/health/ready", ""),
	}
	for _, r := range routes {
		var c record.Call
		if err := DecodeHTTPRequest(r, jsonType, body, false, &c); err != nil || !reflect.DeepEqual(c, record.Call{}) {
			t.Errorf("%+v: request decoded to %+v, %v", r, c, err)
		}
		if err := DecodeHTTPResponse(r, jsonType, body, false, &c); err != nil || !reflect.DeepEqual(c, record.Call{}) {
			t.Errorf("%+v: response decoded to %+v, %v", r, c, err)
		}
	}
}

func TestDecodeHTTPErrorContext(t *testing.T) {
	var c record.Call
	err := DecodeHTTPRequest(HTTPRoute("POST", "/v2/models/m/infer", ""), jsonType, []byte(`{"inputs":[`), false, &c)
	if err == nil || !strings.Contains(err.Error(), "kserve_v2 infer request") || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("err = %v, want context and io.ErrUnexpectedEOF", err)
	}
}

// TestDecodeV2Allocs holds the KServe v2 JSON decoder to the allocations
// of what it keeps: a tensor's name (but Go makes one-byte strings for
// free), its shape, and the record's tensor list. Keys, datatypes, numbers
// and the lexer's state cost none: this decode runs on every call.
func TestDecodeV2Allocs(t *testing.T) {
	infer := HTTPRoute("POST", "/v2/models/m/infer", "")
	for _, tc := range []struct {
		name     string
		body     string
		response bool
		want     float64
	}{
		{name: "flat data", body: `{"id":"1","inputs":[{"name":"input","shape":[1,4],"datatype":"FP32","data":[0.5,1,2e3,-4]}]}`, want: 3},
		{name: "nested data", body: `{"inputs":[{"name":"input","shape":[2,2],"datatype":"INT64","parameters":{"binary_data_size":0,"x":[1]},"data":[[1,2],[3,4]]}]}`, want: 3},
		{name: "two tensors", body: `{"inputs":[{"name":"a","shape":[1],"datatype":"BYTES","data":["x"]},{"name":"b","shape":[1],"datatype":"BOOL","data":[true]}]}`, want: 4}, // one-byte names are free; the list grows once
		{name: "response", body: `{"model_name":"m","model_version":"1","outputs":[{"name":"p","shape":[1,2],"datatype":"FP32","data":[0.1,0.9]}]}`, response: true, want: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			decode := DecodeHTTPRequest
			if tc.response {
				decode = DecodeHTTPResponse
			}
			body := []byte(tc.body)
			var c record.Call
			if err := decode(infer, jsonType, body, false, &c); err != nil || c.InputCount+c.OutputCount == 0 {
				t.Fatalf("decode: %v, record %+v", err, c)
			}
			got := testing.AllocsPerRun(50, func() {
				c = record.Call{}
				_ = decode(infer, jsonType, body, false, &c)
			})
			if got > tc.want {
				t.Errorf("%.0f allocations a decode, want at most %.0f", got, tc.want)
			}
		})
	}
}

// TestDecodeGenerate: a generate extension body is checked for being JSON
// and read for nothing else (it carries no tensors); a streamed answer makes
// the call a stream.
func TestDecodeGenerate(t *testing.T) {
	rt := HTTPRoute("POST", "/v2/models/llama/generate_stream", "")
	jsonH := http.Header{"Content-Type": {"application/json"}}
	for _, tc := range []struct {
		name       string
		h          http.Header
		body       string
		response   bool
		wantErr    bool
		wantStream bool
	}{
		{"request", jsonH, `{"text_input":"hi","parameters":{"stream":true,"max_tokens":8}}`, false, false, false},
		{"malformed request", jsonH, `{"text_input":"hi",`, false, true, false},
		{"malformed request, curl -d", curlType, `{"text_input":"hi",`, false, true, false},
		{"whole answer", jsonH, `{"model_name":"llama","text_output":"hello"}`, true, false, false},
		{"streamed answer", http.Header{"Content-Type": {"text/event-stream; charset=utf-8"}}, "data: {\"text_output\":\"he\"}\n\n", true, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c record.Call
			decode := DecodeHTTPRequest
			if tc.response {
				decode = DecodeHTTPResponse
			}
			err := decode(rt, tc.h, []byte(tc.body), false, &c)
			if (err != nil) != tc.wantErr || c.DecodeFail != tc.wantErr || c.Stream != tc.wantStream || c.InputCount != 0 {
				t.Fatalf("err %v, decode failed %v, stream %v, inputs %d", err, c.DecodeFail, c.Stream, c.InputCount)
			}
		})
	}
}

// TestDecodeHTTPColumnarDeepNesting holds TF Serving's columnar decode to a
// bounded stack: a body of nested '[' as deep as the default capture (1 MiB)
// must not take a stack frame per level. Under a 64 MiB stack limit the
// recursive walk died with a fatal stack overflow, which no recover catches;
// with a capture of 8 MiB it did so under the runtime's default 1 GB limit.
func TestDecodeHTTPColumnarDeepNesting(t *testing.T) {
	defer debug.SetMaxStack(debug.SetMaxStack(64 << 20))
	route := HTTPRoute("POST", "/v1/models/m:predict", record.APITFServing)
	deep := strings.Repeat("[", 1<<20-16)
	cases := []struct {
		name, body string
		truncated  bool
		wantDims   int // of the first tensor; -1: no tensor
	}{
		{name: "cut open", body: `{"inputs":` + deep, truncated: true, wantDims: -1},
		{name: "named, cut open", body: `{"inputs":{"a":` + deep, truncated: true, wantDims: 0},
		{name: "closed", body: `{"inputs":{"a":` + deep[:100] + strings.Repeat("]", 100) + `}}`, wantDims: MaxDims},
	}
	for _, tc := range cases {
		for _, scan := range []bool{false, true} {
			for _, response := range []bool{false, true} {
				var c record.Call
				body := tc.body
				if response {
					body = strings.Replace(body, `"inputs"`, `"outputs"`, 1)
				}
				var err error
				switch {
				case scan && response:
					err = ScanHTTPResponse(route, jsonType, []byte(body), tc.truncated, &c)
				case scan:
					err = ScanHTTPRequest(route, jsonType, []byte(body), tc.truncated, &c)
				case response:
					err = DecodeHTTPResponse(route, jsonType, []byte(body), tc.truncated, &c)
				default:
					err = DecodeHTTPRequest(route, jsonType, []byte(body), tc.truncated, &c)
				}
				if err != nil {
					t.Errorf("%s scan=%v response=%v: %v", tc.name, scan, response, err)
				}
				tensors := c.Inputs
				if response {
					tensors = c.Outputs
				}
				got := -1
				if len(tensors) > 0 {
					got = len(tensors[0].Shape)
				}
				if got != tc.wantDims {
					t.Errorf("%s scan=%v response=%v: first tensor has %d dims, want %d", tc.name, scan, response, got, tc.wantDims)
				}
			}
		}
	}
}
