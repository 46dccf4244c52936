package modelserver

import (
	"bytes"
	"context"
	"math"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/inferwatch/inferwatch/demo/model"
	"github.com/inferwatch/inferwatch/proto/inference"
)

func mlpRequestRaw(batch int) *inference.ModelInferRequest {
	return &inference.ModelInferRequest{
		ModelName: modelMLP,
		Inputs: []*inference.ModelInferRequest_InferInputTensor{
			{Name: modelMLPInput, Datatype: "FP32", Shape: []int64{int64(batch), model.InputSize}},
		},
		RawInputContents: [][]byte{float32ToRaw(image(batch))},
	}
}

func TestGRPCHealthAndMetadata(t *testing.T) {
	ts := start(t, Options{})
	ctx := context.Background()
	c := ts.client

	if r, err := c.ServerLive(ctx, &inference.ServerLiveRequest{}); err != nil || !r.GetLive() {
		t.Fatalf("ServerLive = %v, %v", r, err)
	}
	if r, err := c.ServerReady(ctx, &inference.ServerReadyRequest{}); err != nil || !r.GetReady() {
		t.Fatalf("ServerReady = %v, %v", r, err)
	}
	md, err := c.ServerMetadata(ctx, &inference.ServerMetadataRequest{})
	if err != nil {
		t.Fatalf("ServerMetadata: %v", err)
	}
	for _, ext := range []string{"statistics", "binary_tensor_data", "model_repository"} {
		if !slices.Contains(md.GetExtensions(), ext) {
			t.Errorf("extensions %v lack %q", md.GetExtensions(), ext)
		}
	}

	tests := []struct {
		name, model, version string
		code                 codes.Code
	}{
		{"mlp", modelMLP, "", codes.OK},
		{"mlp v1", modelMLP, "1", codes.OK},
		{"echo", modelEcho, "1", codes.OK},
		{"unknown version", modelMLP, "7", codes.NotFound},
		{"unknown model", "nope", "", codes.NotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := c.ModelReady(ctx, &inference.ModelReadyRequest{Name: tc.model, Version: tc.version})
			if status.Code(err) != tc.code {
				t.Fatalf("ModelReady code %v, want %v", status.Code(err), tc.code)
			}
			if err == nil && !r.GetReady() {
				t.Error("ModelReady: not ready")
			}
			m, err := c.ModelMetadata(ctx, &inference.ModelMetadataRequest{Name: tc.model, Version: tc.version})
			if status.Code(err) != tc.code {
				t.Fatalf("ModelMetadata code %v, want %v", status.Code(err), tc.code)
			}
			if err == nil && (m.GetName() != tc.model || len(m.GetInputs()) == 0) {
				t.Errorf("ModelMetadata = %v", m)
			}
		})
	}
}

func TestGRPCModelInfer(t *testing.T) {
	ts := start(t, Options{Seed: 3})
	want := model.NewMLP(3).Infer(image(2), 2)

	typed := &inference.ModelInferRequest{
		ModelName: modelMLP, ModelVersion: "1",
		Inputs: []*inference.ModelInferRequest_InferInputTensor{{
			Name: modelMLPInput, Datatype: "FP32", Shape: []int64{2, model.InputSize},
			Contents: &inference.InferTensorContents{Fp32Contents: image(2)},
		}},
	}
	tests := []struct {
		name string
		req  *inference.ModelInferRequest
	}{
		{"raw", mlpRequestRaw(2)},
		{"typed", typed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var trailer metadata.MD
			resp, err := ts.client.ModelInfer(context.Background(), tc.req, grpc.Trailer(&trailer))
			if err != nil {
				t.Fatalf("ModelInfer: %v", err)
			}
			out := resp.GetOutputs()
			if len(out) != 1 || out[0].GetName() != modelMLPOutput || !slices.Equal(out[0].GetShape(), []int64{2, model.OutputSize}) {
				t.Fatalf("outputs %v", out)
			}
			if len(resp.GetRawOutputContents()) != 1 {
				t.Fatalf("%d raw outputs, want 1", len(resp.GetRawOutputContents()))
			}
			if got := rawToFloat32(resp.GetRawOutputContents()[0]); !slices.Equal(got, want) {
				t.Errorf("probabilities differ from the model's")
			}
			st := trailer.Get(serverTimingKey)
			if len(st) != 1 {
				t.Fatalf("trailer server-timing = %v", st)
			}
			if d := checkServerTiming(t, st[0]); d["infer"] <= 0 {
				t.Errorf("infer stage %v, want > 0", d["infer"])
			}
		})
	}
}

func TestGRPCModelInferErrors(t *testing.T) {
	ts := start(t, Options{})
	bad := func(edit func(r *inference.ModelInferRequest)) *inference.ModelInferRequest {
		r := mlpRequestRaw(1)
		edit(r)
		return r
	}
	tests := []struct {
		name string
		req  *inference.ModelInferRequest
		code codes.Code
	}{
		{"unknown model", bad(func(r *inference.ModelInferRequest) { r.ModelName = "nope" }), codes.NotFound},
		{"unknown version", bad(func(r *inference.ModelInferRequest) { r.ModelVersion = "2" }), codes.NotFound},
		{"bad shape", bad(func(r *inference.ModelInferRequest) { r.Inputs[0].Shape = []int64{1, 783} }), codes.InvalidArgument},
		{"short data", bad(func(r *inference.ModelInferRequest) { r.RawInputContents[0] = r.RawInputContents[0][:100] }), codes.InvalidArgument},
		{"wrong dtype", bad(func(r *inference.ModelInferRequest) { r.Inputs[0].Datatype = "FP64" }), codes.InvalidArgument},
		{"raw count", bad(func(r *inference.ModelInferRequest) { r.RawInputContents = append(r.RawInputContents, nil) }), codes.InvalidArgument},
		{"unknown output", bad(func(r *inference.ModelInferRequest) {
			r.Outputs = []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "logits"}}
		}), codes.InvalidArgument},
		{"llm over v2", bad(func(r *inference.ModelInferRequest) { r.ModelName = modelLLM }), codes.InvalidArgument},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ts.client.ModelInfer(context.Background(), tc.req)
			if status.Code(err) != tc.code {
				t.Fatalf("code %v (%v), want %v", status.Code(err), err, tc.code)
			}
		})
	}
}

func TestGRPCEcho(t *testing.T) {
	ts := start(t, Options{})
	big := bytes.Repeat([]byte("inferwatch"), 16<<20/10)
	tests := []struct {
		name string
		req  *inference.ModelInferRequest
	}{
		{"raw 16MiB", &inference.ModelInferRequest{
			ModelName:        modelEcho,
			Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "input", Datatype: "UINT8", Shape: []int64{int64(len(big))}}},
			RawInputContents: [][]byte{big},
		}},
		{"typed", &inference.ModelInferRequest{
			ModelName: modelEcho,
			Inputs: []*inference.ModelInferRequest_InferInputTensor{
				{Name: "a", Datatype: "FP32", Shape: []int64{2, 2}, Contents: &inference.InferTensorContents{Fp32Contents: []float32{1, 2, 3, math.Pi}}},
				{Name: "b", Datatype: "INT64", Shape: []int64{1}, Contents: &inference.InferTensorContents{Int64Contents: []int64{-7}}},
			},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := ts.client.ModelInfer(context.Background(), tc.req)
			if err != nil {
				t.Fatalf("ModelInfer: %v", err)
			}
			if len(resp.GetOutputs()) != len(tc.req.GetInputs()) {
				t.Fatalf("%d outputs for %d inputs", len(resp.GetOutputs()), len(tc.req.GetInputs()))
			}
			for i, in := range tc.req.GetInputs() {
				out := resp.GetOutputs()[i]
				if out.GetName() != in.GetName() || out.GetDatatype() != in.GetDatatype() || !slices.Equal(out.GetShape(), in.GetShape()) {
					t.Errorf("output %d = %v, want the input's name/datatype/shape", i, out)
				}
				if raw := tc.req.GetRawInputContents(); len(raw) > 0 {
					if !bytes.Equal(resp.GetRawOutputContents()[i], raw[i]) {
						t.Errorf("output %d bytes differ", i)
					}
				} else if !slices.Equal(out.GetContents().GetFp32Contents(), in.GetContents().GetFp32Contents()) ||
					!slices.Equal(out.GetContents().GetInt64Contents(), in.GetContents().GetInt64Contents()) {
					t.Errorf("output %d typed contents differ", i)
				}
			}
		})
	}
}

func TestGRPCStreamInfer(t *testing.T) {
	ts := start(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := ts.client.ModelStreamInfer(ctx)
	if err != nil {
		t.Fatalf("ModelStreamInfer: %v", err)
	}
	const n = 5
	for i := range n {
		req := mlpRequestRaw(1)
		if i == 3 {
			req.ModelName = "nope" // a failed request answers in-band
		}
		if err := stream.Send(req); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("recv %d: %v", i, err)
		}
		if i == 3 {
			if resp.GetErrorMessage() == "" {
				t.Errorf("response %d: no error_message for an unknown model", i)
			}
			continue
		}
		if resp.GetErrorMessage() != "" || len(resp.GetInferResponse().GetRawOutputContents()) != 1 {
			t.Errorf("response %d = %v", i, resp)
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatalf("close send: %v", err)
	}
	if _, err := stream.Recv(); err == nil {
		t.Fatal("stream did not end after CloseSend")
	}
	checkServerTiming(t, stream.Trailer().Get(serverTimingKey)[0])
}

func TestGRPCStatistics(t *testing.T) {
	ts := start(t, Options{})
	ctx := context.Background()
	get := func() *inference.ModelStatistics {
		t.Helper()
		r, err := ts.client.ModelStatistics(ctx, &inference.ModelStatisticsRequest{Name: modelMLP})
		if err != nil || len(r.GetModelStats()) != 1 {
			t.Fatalf("ModelStatistics = %v, %v", r, err)
		}
		return r.GetModelStats()[0]
	}
	before := get()
	for range 3 {
		if _, err := ts.client.ModelInfer(ctx, mlpRequestRaw(4)); err != nil {
			t.Fatalf("ModelInfer: %v", err)
		}
	}
	bad := mlpRequestRaw(1)
	bad.Inputs[0].Shape = []int64{1, 2}
	if _, err := ts.client.ModelInfer(ctx, bad); err == nil {
		t.Fatal("bad request succeeded")
	}
	after := get()

	b, a := before.GetInferenceStats(), after.GetInferenceStats()
	deltas := []struct {
		name string
		got  uint64
		want uint64
	}{
		{"success.count", a.GetSuccess().GetCount() - b.GetSuccess().GetCount(), 3},
		{"fail.count", a.GetFail().GetCount() - b.GetFail().GetCount(), 1},
		{"queue.count", a.GetQueue().GetCount() - b.GetQueue().GetCount(), 3},
		{"compute_infer.count", a.GetComputeInfer().GetCount() - b.GetComputeInfer().GetCount(), 3},
		{"inference_count", after.GetInferenceCount() - before.GetInferenceCount(), 12},
		{"execution_count", after.GetExecutionCount() - before.GetExecutionCount(), 3},
	}
	for _, d := range deltas {
		if d.got != d.want {
			t.Errorf("%s grew by %d, want %d", d.name, d.got, d.want)
		}
	}
	for name, ns := range map[string][2]uint64{
		"success":        {b.GetSuccess().GetNs(), a.GetSuccess().GetNs()},
		"compute_input":  {b.GetComputeInput().GetNs(), a.GetComputeInput().GetNs()},
		"compute_infer":  {b.GetComputeInfer().GetNs(), a.GetComputeInfer().GetNs()},
		"compute_output": {b.GetComputeOutput().GetNs(), a.GetComputeOutput().GetNs()},
	} {
		if ns[1] <= ns[0] {
			t.Errorf("%s.ns did not grow: %d → %d", name, ns[0], ns[1])
		}
	}
	if a.GetComputeInfer().GetNs() > a.GetSuccess().GetNs() {
		t.Errorf("compute_infer %dns exceeds success %dns", a.GetComputeInfer().GetNs(), a.GetSuccess().GetNs())
	}
	if last := time.UnixMilli(int64(after.GetLastInference())); time.Since(last) > time.Minute {
		t.Errorf("last_inference %v is not recent", last)
	}

	all, err := ts.client.ModelStatistics(ctx, &inference.ModelStatisticsRequest{})
	if err != nil || len(all.GetModelStats()) != len(ts.s.models) {
		t.Errorf("all-model statistics = %v, %v", all, err)
	}
	if _, err := ts.client.ModelStatistics(ctx, &inference.ModelStatisticsRequest{Name: "nope"}); status.Code(err) != codes.NotFound {
		t.Errorf("unknown model statistics: %v, want NotFound", err)
	}
}
