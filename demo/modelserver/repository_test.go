package modelserver

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/inferwatch/inferwatch/proto/inference"
)

// TestRepositoryGRPC unloads, loads and reloads the MLP over Triton's
// repository extension and checks what each step does to readiness, the
// index and inference; a reload rebuilds the same seeded weights.
func TestRepositoryGRPC(t *testing.T) {
	ts := start(t, Options{Seed: 7})
	ctx := context.Background()
	c := ts.client
	before, err := c.ModelInfer(ctx, mlpRequestRaw(2))
	if err != nil {
		t.Fatalf("infer: %v", err)
	}
	type step struct {
		name      string
		op        func() error
		code      codes.Code // of op
		ready     bool       // ModelReady afterwards
		inferCode codes.Code
	}
	load := func(m string) func() error {
		return func() error {
			_, err := c.RepositoryModelLoad(ctx, &inference.RepositoryModelLoadRequest{ModelName: m})
			return err
		}
	}
	unload := func(m string) func() error {
		return func() error {
			_, err := c.RepositoryModelUnload(ctx, &inference.RepositoryModelUnloadRequest{ModelName: m})
			return err
		}
	}
	for _, st := range []step{
		{"unload", unload(modelMLP), codes.OK, false, codes.Unavailable},
		{"unload again", unload(modelMLP), codes.OK, false, codes.Unavailable},
		{"load unknown model", load("nope"), codes.NotFound, false, codes.Unavailable},
		{"unload unknown model", unload("nope"), codes.NotFound, false, codes.Unavailable},
		{"load", load(modelMLP), codes.OK, true, codes.OK},
		{"reload", load(modelMLP), codes.OK, true, codes.OK},
	} {
		if err := st.op(); status.Code(err) != st.code {
			t.Fatalf("%s: %v, want %v", st.name, err, st.code)
		}
		r, err := c.ModelReady(ctx, &inference.ModelReadyRequest{Name: modelMLP})
		if err != nil || r.GetReady() != st.ready {
			t.Fatalf("%s: ModelReady = %v, %v; want ready %v", st.name, r, err, st.ready)
		}
		idx, err := c.RepositoryIndex(ctx, &inference.RepositoryIndexRequest{})
		if err != nil {
			t.Fatalf("%s: index: %v", st.name, err)
		}
		want := "UNAVAILABLE"
		if st.ready {
			want = "READY"
		}
		i := slices.IndexFunc(idx.GetModels(), func(m *inference.RepositoryIndexResponse_ModelIndex) bool { return m.GetName() == modelMLP })
		if i < 0 || idx.GetModels()[i].GetState() != want {
			t.Fatalf("%s: index %v, want %s %s", st.name, idx.GetModels(), modelMLP, want)
		}
		readyOnly, err := c.RepositoryIndex(ctx, &inference.RepositoryIndexRequest{Ready: true})
		if err != nil || slices.ContainsFunc(readyOnly.GetModels(), func(m *inference.RepositoryIndexResponse_ModelIndex) bool { return m.GetName() == modelMLP }) != st.ready {
			t.Fatalf("%s: ready index %v, %v", st.name, readyOnly.GetModels(), err)
		}
		after, err := c.ModelInfer(ctx, mlpRequestRaw(2))
		if status.Code(err) != st.inferCode {
			t.Fatalf("%s: infer %v, want %v", st.name, err, st.inferCode)
		}
		if err == nil && !slices.EqualFunc(after.GetRawOutputContents(), before.GetRawOutputContents(), func(a, b []byte) bool { return string(a) == string(b) }) {
			t.Fatalf("%s: outputs differ from the first load's", st.name)
		}
	}
	if _, err := c.ModelInfer(ctx, &inference.ModelInferRequest{ModelName: modelEcho, Inputs: []*inference.ModelInferRequest_InferInputTensor{{Name: "input", Datatype: "UINT8", Shape: []int64{1, 1}}}, RawInputContents: [][]byte{{9}}}); err != nil {
		t.Fatalf("echo, never unloaded: %v", err)
	}
}

// TestRepositoryHTTP does the same over REST: POST /v2/repository/...
func TestRepositoryHTTP(t *testing.T) {
	ts := start(t, Options{WarmupRows: -1})
	tests := []struct {
		name, path, body string
		code             int
		readyCode        int // GET /v2/models/mnist-mlp/ready afterwards
		indexState       string
	}{
		{"unload", "/v2/repository/models/mnist-mlp/unload", "", 200, 400, "UNAVAILABLE"},
		{"load with parameters", "/v2/repository/models/mnist-mlp/load", `{"parameters":{"config":"{}"}}`, 200, 200, "READY"},
		{"reload", "/v2/repository/models/mnist-mlp/load", "", 200, 200, "READY"},
		{"load unknown", "/v2/repository/models/nope/load", "", 404, 200, "READY"},
		{"bad body", "/v2/repository/models/mnist-mlp/unload", `{`, 400, 200, "READY"},
		{"unload again", "/v2/repository/models/mnist-mlp/unload", "{}", 200, 400, "UNAVAILABLE"},
	}
	for _, tt := range tests {
		resp, body := post(t, ts.url+tt.path, "application/json", []byte(tt.body), nil)
		if resp.StatusCode != tt.code {
			t.Fatalf("%s: %d %s, want %d", tt.name, resp.StatusCode, body, tt.code)
		}
		if resp, body := get(t, ts.url+"/v2/models/mnist-mlp/ready"); resp.StatusCode != tt.readyCode {
			t.Fatalf("%s: ready %d %s, want %d", tt.name, resp.StatusCode, body, tt.readyCode)
		}
		resp, body = post(t, ts.url+"/v2/repository/index", "application/json", nil, nil)
		var idx []repositoryEntry
		if err := json.Unmarshal(body, &idx); err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: index %d %s: %v", tt.name, resp.StatusCode, body, err)
		}
		i := slices.IndexFunc(idx, func(e repositoryEntry) bool { return e.Name == modelMLP })
		if i < 0 || idx[i].State != tt.indexState {
			t.Fatalf("%s: index %+v, want %s", tt.name, idx, tt.indexState)
		}
	}
	resp, body := post(t, ts.url+"/v2/models/mnist-mlp/infer", "application/json", []byte(`{"inputs":[]}`), nil)
	if resp.StatusCode != 503 {
		t.Fatalf("infer on an unloaded model: %d %s, want 503", resp.StatusCode, body)
	}
}

// BenchmarkLoad is what one load of the MLP costs (weights and warm-up).
func BenchmarkLoad(b *testing.B) {
	s := New(Options{})
	defer s.Close()
	for b.Loop() {
		if err := s.Load(modelMLP); err != nil {
			b.Fatal(err)
		}
	}
}
