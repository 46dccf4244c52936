package modelserver

import (
	"context"
	"encoding/binary"
	"io"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/proto/inference"
)

func llmStreamRequest(id, prompt string, maxTokens int64) *inference.ModelInferRequest {
	raw := binary.LittleEndian.AppendUint32(nil, uint32(len(prompt)))
	return &inference.ModelInferRequest{ModelName: modelLLM, Id: id,
		Parameters:       map[string]*inference.InferParameter{"max_tokens": {ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: maxTokens}}},
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "text_input", Datatype: "BYTES", Shape: []int64{1}}},
		RawInputContents: [][]byte{append(raw, prompt...)}}
}

// TestDecoupledLLM: requests multiplexed on one ModelStreamInfer stream
// each get one response per token, with their id, the last one final; a bad
// request gets an in-stream error with its id and the stream goes on.
func TestDecoupledLLM(t *testing.T) {
	ts := start(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := ts.client.ModelStreamInfer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"a": 5, "b": 3}
	for _, r := range []*inference.ModelInferRequest{
		llmStreamRequest("a", "tell me a story", 5),
		llmStreamRequest("b", "short one", 3),
		llmStreamRequest("bad", "too long", maxMaxTokens+1),
	} {
		if err := st.Send(r); err != nil {
			t.Fatal(err)
		}
	}
	st.CloseSend()
	got := map[string]int{}
	finals := map[string]int{}
	errs := map[string]string{}
	for {
		res, err := st.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		id := res.GetInferResponse().GetId()
		if res.GetErrorMessage() != "" {
			errs[id] = res.GetErrorMessage()
			continue
		}
		r := res.GetInferResponse()
		if raw := r.GetRawOutputContents(); len(raw) != 1 || len(raw[0]) < 5 || int(binary.LittleEndian.Uint32(raw[0])) != len(raw[0])-4 {
			t.Fatalf("request %s: output %q is not one raw BYTES element", id, raw)
		}
		got[id]++
		if r.GetParameters()["triton_final_response"].GetBoolParam() {
			finals[id]++
			if got[id] != want[id] {
				t.Errorf("request %s: final flag on response %d of %d", id, got[id], want[id])
			}
		}
	}
	for id, n := range want {
		if got[id] != n || finals[id] != 1 {
			t.Errorf("request %s: %d responses, %d final; want %d, 1", id, got[id], finals[id], n)
		}
	}
	if errs["bad"] == "" || len(errs) != 1 {
		t.Errorf("errors %v, want one for request bad", errs)
	}
}
