package modelload_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/inferwatch/inferwatch/demo/modelserver"
	"github.com/inferwatch/inferwatch/inferapi"
	"github.com/inferwatch/inferwatch/metricset"
	"github.com/inferwatch/inferwatch/modelload"
	"github.com/inferwatch/inferwatch/proto/inference"
	"github.com/inferwatch/inferwatch/record"
)

// TestPollerSeesLoadsNobodyAsked: the embedded model server unloads and
// loads its MLP on its own (as Triton's poll mode does), not through the
// sidecar; the poller reads the repository index over gRPC and REST and the
// tracker follows, the next inference being the cold call.
func TestPollerSeesLoadsNobodyAsked(t *testing.T) {
	s := modelserver.New(modelserver.Options{WarmupRows: -1})
	t.Cleanup(s.Close)
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	s.RegisterGRPC(g)
	go g.Serve(gl)
	t.Cleanup(g.Stop)
	hs := httptest.NewServer(s.HTTPHandler())
	t.Cleanup(hs.Close)

	for _, tc := range []struct {
		name string
		o    modelload.PollOptions
	}{
		{"grpc", modelload.PollOptions{GRPCAddr: gl.Addr().String()}},
		{"http", modelload.PollOptions{HTTPBase: hs.URL}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set := metricset.New(metricset.Options{})
			tr := modelload.New(set)
			p, err := tr.NewPoller(tc.o)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			ctx := context.Background()
			infer := func() {
				tr.Observe(&record.Call{Start: time.Now(), End: time.Millisecond, Protocol: record.ProtocolGRPC, API: record.APIKServeV2,
					Method: inferapi.MethodInfer, Model: "mnist-mlp", Version: "1", Code: "OK"})
			}
			if err := p.Poll(ctx); err != nil {
				t.Fatal(err)
			}
			if got := scrape(t, set); len(got) != 0 {
				t.Fatalf("models no call named are followed: %v", got)
			}
			infer() // names the model
			steps := []struct {
				name string
				op   func() error
				want map[string]string
			}{
				{"unloaded behind the sidecar's back", func() error { return s.Unload("mnist-mlp") }, map[string]string{
					`inferwatch_model_ready{model="mnist-mlp"}`:                                  "0",
					`inferwatch_model_ready_transitions_total{model="mnist-mlp",to="not_ready"}`: "1",
				}},
				{"loaded again", func() error { return s.Load("mnist-mlp") }, map[string]string{
					`inferwatch_model_ready{model="mnist-mlp"}`:                              "1",
					`inferwatch_model_ready_transitions_total{model="mnist-mlp",to="ready"}`: "1",
				}},
			}
			for _, st := range steps {
				if err := st.op(); err != nil {
					t.Fatal(err)
				}
				if err := p.Poll(ctx); err != nil {
					t.Fatal(err)
				}
				got := scrape(t, set)
				for k, v := range st.want {
					if got[k] != v {
						t.Errorf("%s: %s = %q, want %q", st.name, k, got[k], v)
					}
				}
			}
			infer()
			infer()
			if got := scrape(t, set)[`inferwatch_model_cold_request_duration_seconds_count{model="mnist-mlp",version="1"}`]; got != "1" {
				t.Errorf("cold calls %q, want 1", got)
			}
		})
	}
}

// TestPollerStopsWithoutIndex: an upstream without the repository extension
// ends polling by itself (KServe servers, older Tritons).
func TestPollerStopsWithoutIndex(t *testing.T) {
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	inference.RegisterGRPCInferenceServiceServer(g, inference.UnimplementedGRPCInferenceServiceServer{})
	go g.Serve(gl)
	t.Cleanup(g.Stop)
	hs := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(hs.Close)
	anything := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("hello")) }))
	t.Cleanup(anything.Close)
	for _, o := range []modelload.PollOptions{
		{GRPCAddr: gl.Addr().String(), Interval: 10 * time.Millisecond},
		{HTTPBase: hs.URL, Interval: 10 * time.Millisecond},
		{HTTPBase: anything.URL, Interval: 10 * time.Millisecond},
	} {
		p, err := modelload.New(metricset.New(metricset.Options{})).NewPoller(o)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		p.Run(ctx)
		if ctx.Err() != nil {
			t.Errorf("%+v: Run went on polling an upstream without an index", o)
		}
		cancel()
		p.Close()
	}
	if _, err := modelload.New(metricset.New(metricset.Options{})).NewPoller(modelload.PollOptions{}); err == nil {
		t.Error("a poller with no upstream was made")
	}
}

// bigIndex is a repository index of 120 000 models (about 9 MiB as JSON,
// 5 MiB as protobuf), the one a call names last and not ready.
type bigIndex struct {
	inference.UnimplementedGRPCInferenceServiceServer
}

const bigIndexModels = 120000

func (bigIndex) RepositoryIndex(context.Context, *inference.RepositoryIndexRequest) (*inference.RepositoryIndexResponse, error) {
	resp := &inference.RepositoryIndexResponse{}
	for i := range bigIndexModels {
		resp.Models = append(resp.Models, &inference.RepositoryIndexResponse_ModelIndex{
			Name: fmt.Sprintf("model-%06d", i), Version: "1", State: "READY", Reason: "loaded from /models/ensemble/x",
		})
	}
	resp.Models = append(resp.Models, &inference.RepositoryIndexResponse_ModelIndex{Name: "llama", Version: "1", State: "UNAVAILABLE", Reason: "unloaded"})
	return resp, nil
}

// TestPollerReadsALargeIndex: a large repository's index, past the 8 MiB
// the REST answer was cut to and gRPC's 4 MiB default receive limit, is
// still an index: it was taken for "no repository index" (REST: polling
// stopped for good) or failed every poll (gRPC).
func TestPollerReadsALargeIndex(t *testing.T) {
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	inference.RegisterGRPCInferenceServiceServer(g, bigIndex{})
	go g.Serve(gl)
	t.Cleanup(g.Stop)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		resp, _ := bigIndex{}.RepositoryIndex(context.Background(), nil)
		type entry struct {
			Name    string `json:"name"`
			Version string `json:"version"`
			State   string `json:"state"`
			Reason  string `json:"reason"`
		}
		index := make([]entry, 0, len(resp.Models))
		for _, m := range resp.Models {
			index = append(index, entry{m.Name, m.Version, m.State, m.Reason})
		}
		b, _ := json.Marshal(index)
		if len(b) <= 8<<20 {
			t.Errorf("the REST index is %d bytes, not past 8 MiB", len(b))
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(b)
	}))
	t.Cleanup(hs.Close)
	for _, tc := range []struct {
		name string
		o    modelload.PollOptions
	}{
		{"grpc", modelload.PollOptions{GRPCAddr: gl.Addr().String(), Interval: time.Minute}},
		{"http", modelload.PollOptions{HTTPBase: hs.URL, Interval: time.Minute}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set := metricset.New(metricset.Options{})
			tr := modelload.New(set)
			p, err := tr.NewPoller(tc.o)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			tr.Observe(&record.Call{Start: time.Now(), End: time.Millisecond, Protocol: record.ProtocolHTTP, API: record.APIKServeV2,
				Method: inferapi.MethodInfer, Model: "llama", Version: "1", Code: "200"})
			time.Sleep(time.Millisecond) // the index answer comes after the call
			if err := p.Poll(context.Background()); err != nil {
				t.Fatalf("poll: %v", err)
			}
			if got := scrape(t, set)[`inferwatch_model_ready{model="llama"}`]; got != "0" {
				t.Errorf("llama ready %q, want 0 as the index says", got)
			}
		})
	}
}
