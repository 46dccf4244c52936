package sidecar_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/inferwatch/inferwatch/config"
	"github.com/inferwatch/inferwatch/demo/model"
	"github.com/inferwatch/inferwatch/demo/modelserver"
	"github.com/inferwatch/inferwatch/internal/exposition"
	"github.com/inferwatch/inferwatch/proto/inference"
	"github.com/inferwatch/inferwatch/sidecar"
)

// TestModelLoadMetrics unloads, loads and reloads the embedded model
// server's MLP through a running sidecar, over gRPC and REST, and reads the
// model lifecycle metrics back from /metrics: how many loads of each kind,
// durations above zero and within what the client measured, one cold call
// per load, readiness and its transitions.
func TestModelLoadMetrics(t *testing.T) {
	for _, plane := range []string{config.DataPlaneStdlib, config.DataPlaneFrame} {
		t.Run(plane, func(t *testing.T) { testModelLoadMetrics(t, plane) })
	}
}

func testModelLoadMetrics(t *testing.T, plane string) {
	_, grpcUp, httpUp := startModelServer(t)
	sc := startSidecar(t, plane, grpcUp, httpUp, 0)
	grpcAddr, httpBase := sc.RouteAddrs()[0].String(), "http://"+sc.RouteAddrs()[1].String()
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := inference.NewGRPCInferenceServiceClient(conn)
	ctx := context.Background()
	const m = "mnist-mlp"

	// timed runs op and returns how long the client waited for it.
	timed := func(what string, op func() error) float64 {
		t.Helper()
		start := time.Now()
		if err := op(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return time.Since(start).Seconds()
	}
	grpcLoad := func() error {
		_, err := c.RepositoryModelLoad(ctx, &inference.RepositoryModelLoadRequest{ModelName: m})
		return err
	}
	grpcInfer := func() error {
		_, err := c.ModelInfer(ctx, &inference.ModelInferRequest{ModelName: m, Inputs: []*inference.ModelInferRequest_InferInputTensor{
			{Name: "input", Datatype: "FP32", Shape: []int64{1, model.InputSize}}}, RawInputContents: [][]byte{make([]byte, 4*model.InputSize)}})
		return err
	}
	httpLoad := func() error { return httpPost(httpBase+"/v2/repository/models/"+m+"/load", "", 200) }
	httpInfer := func() error {
		body := `{"inputs":[{"name":"input","datatype":"FP32","shape":[1,784],"data":[` + strings.Repeat("0.5,", model.InputSize-1) + `0.5]}]}`
		return httpPost(httpBase+"/v2/models/"+m+"/infer", body, 200)
	}

	ready, err := c.ModelReady(ctx, &inference.ModelReadyRequest{Name: m})
	if err != nil || !ready.GetReady() {
		t.Fatalf("ModelReady = %v, %v", ready, err)
	}
	var initial, reload, cold float64 // client-measured sums
	timed("gRPC unload", func() error {
		_, err := c.RepositoryModelUnload(ctx, &inference.RepositoryModelUnloadRequest{ModelName: m})
		return err
	})
	if r, err := c.ModelReady(ctx, &inference.ModelReadyRequest{Name: m}); err != nil || r.GetReady() {
		t.Fatalf("ModelReady after unload = %v, %v", r, err)
	}
	if err := grpcInfer(); status.Code(err) != codes.Unavailable {
		t.Fatalf("infer after unload: %v", err)
	}
	initial += timed("gRPC load", grpcLoad)
	cold += timed("gRPC infer", grpcInfer)
	timed("gRPC infer", grpcInfer)
	timed("gRPC infer", grpcInfer)
	reload += timed("gRPC reload", grpcLoad)
	cold += timed("gRPC infer", grpcInfer)
	timed("gRPC infer", grpcInfer)
	if _, err := c.RepositoryModelLoad(ctx, &inference.RepositoryModelLoadRequest{ModelName: "nope"}); status.Code(err) != codes.NotFound {
		t.Fatalf("load of an unknown model: %v", err)
	}

	timed("REST unload", func() error { return httpPost(httpBase+"/v2/repository/models/"+m+"/unload", "", 200) })
	timed("REST ready", func() error { return httpGet(httpBase+"/v2/models/"+m+"/ready", 400) })
	initial += timed("REST load", httpLoad)
	timed("REST ready", func() error { return httpGet(httpBase+"/v2/models/"+m+"/ready", 200) })
	cold += timed("REST infer", httpInfer)
	timed("REST infer", httpInfer)
	reload += timed("REST reload", httpLoad)
	cold += timed("REST infer", httpInfer)

	want := map[string]float64{
		`inferwatch_model_load_seconds_count{model="mnist-mlp",version="unknown",kind="initial"}`: 2,
		`inferwatch_model_load_seconds_count{model="mnist-mlp",version="unknown",kind="reload"}`:  2,
		`inferwatch_model_unload_seconds_count{model="mnist-mlp",version="unknown"}`:              2,
		`inferwatch_model_cold_request_duration_seconds_count{model="mnist-mlp",version="1"}`:     4,
		`inferwatch_model_load_failures_total{model="nope",op="load"}`:                            1,
		`inferwatch_model_ready{model="mnist-mlp"}`:                                               1,
		`inferwatch_model_ready_transitions_total{model="mnist-mlp",to="not_ready"}`:              2,
		`inferwatch_model_ready_transitions_total{model="mnist-mlp",to="ready"}`:                  2,
	}
	// The records reach the sinks off the data path: wait until the last
	// one (the cold call of the REST reload) has been counted.
	var got map[string]float64
	deadline := time.Now().Add(20 * time.Second)
	for {
		got = scrapeModelMetrics(t, "http://"+sc.AdminAddr().String()+"/metrics")
		if got[`inferwatch_model_cold_request_duration_seconds_count{model="mnist-mlp",version="1"}`] >= 4 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	for series, v := range want {
		if got[series] != v {
			t.Errorf("%s = %v, want %v", series, got[series], v)
		}
	}
	for _, b := range []struct {
		sum    string
		client float64
	}{
		{`inferwatch_model_load_seconds_sum{model="mnist-mlp",version="unknown",kind="initial"}`, initial},
		{`inferwatch_model_load_seconds_sum{model="mnist-mlp",version="unknown",kind="reload"}`, reload},
		{`inferwatch_model_cold_request_duration_seconds_sum{model="mnist-mlp",version="1"}`, cold},
	} {
		if v := got[b.sum]; v <= 0 || v > b.client {
			t.Errorf("%s = %v, want above 0 and at most the %v s the client measured", b.sum, v, b.client)
		}
	}
	t.Logf("client-measured loads: initial %.4f s, reload %.4f s; sidecar: %.4f s, %.4f s", initial, reload,
		got[`inferwatch_model_load_seconds_sum{model="mnist-mlp",version="unknown",kind="initial"}`],
		got[`inferwatch_model_load_seconds_sum{model="mnist-mlp",version="unknown",kind="reload"}`])
}

// TestModelReadinessPolled: with the upstream polled, a model unloaded and
// loaded on the server's side (not through the sidecar) shows in
// inferwatch_model_ready, and the first call after the load is cold.
func TestModelReadinessPolled(t *testing.T) {
	s, grpcUp, httpUp := startModelServer(t)
	sc := startSidecar(t, config.DataPlaneStdlib, grpcUp, httpUp, 20*time.Millisecond)
	metricsURL := "http://" + sc.AdminAddr().String() + "/metrics"
	infer := func() {
		t.Helper()
		body := `{"inputs":[{"name":"input","datatype":"FP32","shape":[1,784],"data":[` + strings.Repeat("0,", model.InputSize-1) + `0]}]}`
		if err := httpPost("http://"+sc.RouteAddrs()[1].String()+"/v2/models/mnist-mlp/infer", body, 200); err != nil {
			t.Fatal(err)
		}
	}
	// waitFor polls /metrics until series has value v.
	waitFor := func(series string, v float64) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			got := scrapeModelMetrics(t, metricsURL)
			if got[series] == v {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s = %v, want %v", series, got[series], v)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	infer() // names the model: from now on it is followed
	waitFor(`inferwatch_model_ready{model="mnist-mlp"}`, 1)
	if err := s.Unload("mnist-mlp"); err != nil {
		t.Fatal(err)
	}
	waitFor(`inferwatch_model_ready{model="mnist-mlp"}`, 0)
	if err := s.Load("mnist-mlp"); err != nil {
		t.Fatal(err)
	}
	waitFor(`inferwatch_model_ready{model="mnist-mlp"}`, 1)
	infer()
	waitFor(`inferwatch_model_cold_request_duration_seconds_count{model="mnist-mlp",version="1"}`, 1)
	got := scrapeModelMetrics(t, metricsURL)
	for series, v := range map[string]float64{
		`inferwatch_model_ready_transitions_total{model="mnist-mlp",to="not_ready"}`: 1,
		`inferwatch_model_ready_transitions_total{model="mnist-mlp",to="ready"}`:     1,
	} {
		if got[series] != v {
			t.Errorf("%s = %v, want %v", series, got[series], v)
		}
	}
}

func startModelServer(t *testing.T) (s *modelserver.Server, grpcAddr, httpAddr string) {
	t.Helper()
	s = modelserver.New(modelserver.Options{Seed: 1})
	t.Cleanup(s.Close)
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(modelserver.GRPCServerOptions()...)
	s.RegisterGRPC(g)
	go g.Serve(gl)
	t.Cleanup(g.Stop)
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: s.HTTPHandler(), ReadHeaderTimeout: 5 * time.Second}
	go hs.Serve(hl)
	t.Cleanup(func() { hs.Close() })
	return s, gl.Addr().String(), hl.Addr().String()
}

// startSidecar puts a sidecar with a gRPC and an HTTP route in front of the
// model server; poll > 0 polls the gRPC upstream (statistics and the
// repository index) at that interval.
func startSidecar(t *testing.T, plane, grpcUp, httpUp string, poll time.Duration) *sidecar.Sidecar {
	t.Helper()
	cfg := config.Default()
	cfg.AdminListen = "127.0.0.1:0"
	cfg.DataPlane = plane
	no, polled := false, poll > 0
	cfg.Routes = []config.Route{
		{Name: "grpc", Protocol: "grpc", Listen: "127.0.0.1:0", Upstream: grpcUp, MaxMessageBytes: config.DefaultMaxMessageBytes, Readiness: "none",
			TritonStats: config.TritonStats{Enabled: &polled, Interval: config.Duration(poll)}},
		{Name: "http", Protocol: "http", Listen: "127.0.0.1:0", Upstream: httpUp, MaxMessageBytes: config.DefaultMaxMessageBytes, Readiness: "none", TritonStats: config.TritonStats{Enabled: &no}},
	}
	cfg.Host.GPUDisabled, cfg.Host.BPFDisabled = true, true
	cfg.Tracing.Disabled = true
	cfg.Finish()
	sc, err := sidecar.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := sc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		sc.Shutdown(ctx)
	})
	return sc
}

func httpPost(url, body string, want int) error {
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	return checkResponse(resp, err, want)
}

func httpGet(url string, want int) error {
	resp, err := http.Get(url)
	return checkResponse(resp, err, want)
}

func checkResponse(resp *http.Response, err error, want int) error {
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		return fmt.Errorf("status %d (%s), want %d", resp.StatusCode, b, want)
	}
	return nil
}

// scrapeModelMetrics reads the inferwatch_model_* samples of a /metrics
// page, histogram buckets aside.
func scrapeModelMetrics(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	p, err := exposition.Parse(string(b))
	if err != nil {
		t.Fatal(err)
	}
	out := p.Series("inferwatch_model_")
	for series := range out {
		if strings.Contains(series, "_bucket{") {
			delete(out, series)
		}
	}
	return out
}
