package modelserver

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/inferwatch/inferwatch/demo/model"
)

func post(t *testing.T, url, contentType string, body []byte, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatalf("new request: %v", err)
	}
	req.Header.Set("Content-Type", contentType)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read %s: %v", url, err)
	}
	return resp, b
}

func get(t *testing.T, url string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read %s: %v", url, err)
	}
	return resp, b
}

func TestHTTPEndpoints(t *testing.T) {
	ts := start(t, Options{})
	tests := []struct {
		path string
		code int
		want string // a substring of the body
	}{
		{"/v2", 200, `"binary_tensor_data"`},
		{"/v2/health/live", 200, `"live":true`},
		{"/v2/health/ready", 200, `"ready":true`},
		{"/v2/models/mnist-mlp", 200, `"name":"probabilities"`},
		{"/v2/models/mnist-mlp/versions/1", 200, `"versions":["1"]`},
		{"/v2/models/echo/ready", 200, `"ready":true`},
		{"/v2/models/mnist-mlp/versions/1/ready", 200, `"ready":true`},
		{"/v2/models/toy-llm", 200, `"inputs":[]`},
		{"/v2/models/nope", 404, `"error"`},
		{"/v2/models/mnist-mlp/versions/9/ready", 404, `"error"`},
		{"/v2/models/stats", 200, `"name":"echo"`},
		{"/v2/models/mnist-mlp/stats", 200, `"compute_infer"`},
		{"/v2/models/mnist-mlp/versions/1/stats", 200, `"inference_stats"`},
		{"/v2/models/nope/stats", 404, `"error"`},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			resp, body := get(t, ts.url+tc.path)
			if resp.StatusCode != tc.code || !strings.Contains(string(body), tc.want) {
				t.Errorf("GET %s = %d %s, want %d containing %s", tc.path, resp.StatusCode, body, tc.code, tc.want)
			}
		})
	}
}

func TestHTTPInferJSON(t *testing.T) {
	ts := start(t, Options{Seed: 5})
	want := model.NewMLP(5).Infer(image(2), 2)
	body, err := json.Marshal(map[string]any{
		"id": "req-1",
		"inputs": []any{map[string]any{
			"name": modelMLPInput, "shape": []int{2, model.InputSize}, "datatype": "FP32", "data": image(2),
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/v2/models/mnist-mlp/infer", "/v2/models/mnist-mlp/versions/1/infer"} {
		resp, b := post(t, ts.url+path, "application/json", body, nil)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, b)
		}
		var out struct {
			ModelName string `json:"model_name"`
			ID        string `json:"id"`
			Outputs   []struct {
				Name  string    `json:"name"`
				Shape []int64   `json:"shape"`
				Data  []float32 `json:"data"`
			} `json:"outputs"`
		}
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("%s: %v in %s", path, err, b)
		}
		if out.ModelName != modelMLP || out.ID != "req-1" || len(out.Outputs) != 1 ||
			!slices.Equal(out.Outputs[0].Shape, []int64{2, model.OutputSize}) || !slices.Equal(out.Outputs[0].Data, want) {
			t.Errorf("%s: response %s", path, b)
		}
		checkServerTiming(t, resp.Header.Get("Server-Timing"))
	}
}

// binaryBody builds a binary-extension body: JSON header, then raw bytes.
func binaryBody(t *testing.T, header any, raw ...[]byte) ([]byte, map[string]string) {
	t.Helper()
	h, err := json.Marshal(header)
	if err != nil {
		t.Fatal(err)
	}
	return slices.Concat(append([][]byte{h}, raw...)...), map[string]string{headerLength: strconv.Itoa(len(h))}
}

// splitBinary splits a binary-extension response into its header and data.
func splitBinary(t *testing.T, resp *http.Response, body []byte) (map[string]any, []byte) {
	t.Helper()
	n, err := strconv.Atoi(resp.Header.Get(headerLength))
	if err != nil || n > len(body) {
		t.Fatalf("%s = %q for a %d-byte body", headerLength, resp.Header.Get(headerLength), len(body))
	}
	var head map[string]any
	if err := json.Unmarshal(body[:n], &head); err != nil {
		t.Fatalf("response header: %v", err)
	}
	return head, body[n:]
}

func TestHTTPInferBinary(t *testing.T) {
	ts := start(t, Options{Seed: 5})
	x := float32ToRaw(image(1))
	payload := bytes.Repeat([]byte{1, 2, 3, 4, 5, 6, 7}, 1<<20)

	tests := []struct {
		name     string
		path     string
		header   any
		raw      [][]byte
		wantData []byte
	}{
		{"mlp binary out", "/v2/models/mnist-mlp/infer", map[string]any{
			"inputs":  []any{map[string]any{"name": "input", "shape": []int{1, 784}, "datatype": "FP32", "parameters": map[string]any{"binary_data_size": len(x)}}},
			"outputs": []any{map[string]any{"name": "probabilities", "parameters": map[string]any{"binary_data": true}}},
		}, [][]byte{x}, float32ToRaw(model.NewMLP(5).Infer(image(1), 1))},
		{"echo raw in raw out", "/v2/models/echo/infer", map[string]any{
			"inputs": []any{map[string]any{"name": "blob", "shape": []int{len(payload)}, "datatype": "UINT8", "parameters": map[string]any{"binary_data_size": len(payload)}}},
		}, [][]byte{payload}, payload},
		{"echo json in binary out", "/v2/models/echo/infer", map[string]any{
			"inputs":     []any{map[string]any{"name": "v", "shape": []int{2, 2}, "datatype": "INT16", "data": [][]int{{1, -2}, {3, 4}}}},
			"parameters": map[string]any{"binary_data_output": true},
		}, nil, []byte{1, 0, 0xfe, 0xff, 3, 0, 4, 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body, hdr := binaryBody(t, tc.header, tc.raw...)
			resp, b := post(t, ts.url+tc.path, "application/octet-stream", body, hdr)
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
			head, data := splitBinary(t, resp, b)
			if !bytes.Equal(data, tc.wantData) {
				t.Errorf("binary data differs (%d bytes, want %d)", len(data), len(tc.wantData))
			}
			outs, _ := head["outputs"].([]any)
			if len(outs) != 1 {
				t.Fatalf("outputs %v", head["outputs"])
			}
			params, _ := outs[0].(map[string]any)["parameters"].(map[string]any)
			if size, _ := params["binary_data_size"].(float64); int(size) != len(tc.wantData) {
				t.Errorf("binary_data_size %v, want %d", params["binary_data_size"], len(tc.wantData))
			}
			checkServerTiming(t, resp.Header.Get("Server-Timing"))
		})
	}
}

func TestHTTPInferErrors(t *testing.T) {
	ts := start(t, Options{})
	const oversized = `{"inputs":[{"name":"a","shape":[4],"datatype":"UINT8","parameters":{"binary_data_size":4}}]}`
	tests := []struct {
		name, path, body string
		hdr              map[string]string
		code             int
	}{
		{"unknown model", "/v2/models/nope/infer", `{"inputs":[]}`, nil, 404},
		{"bad json", "/v2/models/mnist-mlp/infer", `{"inputs":`, nil, 400},
		{"bad shape", "/v2/models/mnist-mlp/infer", `{"inputs":[{"name":"input","shape":[1,3],"datatype":"FP32","data":[1,2,3]}]}`, nil, 400},
		{"string data", "/v2/models/mnist-mlp/infer", `{"inputs":[{"name":"input","shape":[1,784],"datatype":"FP32","data":["x"]}]}`, nil, 400},
		{"no data", "/v2/models/echo/infer", `{"inputs":[{"name":"a","shape":[1],"datatype":"FP32"}]}`, nil, 400},
		{"header too long", "/v2/models/echo/infer", `{}`, map[string]string{headerLength: "99"}, 400},
		{"binary size too big", "/v2/models/echo/infer", oversized + "ab", map[string]string{headerLength: strconv.Itoa(len(oversized))}, 400},
		{"v1 unknown verb", "/v1/models/mnist-mlp:explain", `{}`, nil, 404},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := post(t, ts.url+tc.path, "application/json", []byte(tc.body), tc.hdr)
			if resp.StatusCode != tc.code {
				t.Fatalf("status %d (%s), want %d", resp.StatusCode, b, tc.code)
			}
			var e struct {
				Error string `json:"error"`
			}
			if err := json.Unmarshal(b, &e); err != nil || e.Error == "" {
				t.Errorf("body %s is not {\"error\": ...}", b)
			}
			t.Logf("%d %s", resp.StatusCode, e.Error)
		})
	}
}

func TestHTTPPredictV1(t *testing.T) {
	ts := start(t, Options{Seed: 9})
	x := image(3)
	want := model.NewMLP(9).Infer(x, 3)
	instances := make([][]float32, 3)
	for i := range instances {
		instances[i] = x[i*model.InputSize : (i+1)*model.InputSize]
	}
	body, err := json.Marshal(map[string]any{"instances": instances})
	if err != nil {
		t.Fatal(err)
	}
	resp, b := post(t, ts.url+"/v1/models/mnist-mlp:predict", "application/json", body, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	var out struct {
		Predictions [][]float32 `json:"predictions"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Predictions) != 3 || !slices.Equal(slices.Concat(out.Predictions...), want) {
		t.Errorf("predictions %v", out.Predictions)
	}
	checkServerTiming(t, resp.Header.Get("Server-Timing"))

	resp, b = post(t, ts.url+"/v1/models/mnist-mlp:predict", "application/json", []byte(`{"instances":[[1,2]]}`), nil)
	if resp.StatusCode != 400 {
		t.Errorf("short instance: %d %s, want 400", resp.StatusCode, b)
	}
}
