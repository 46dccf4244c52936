package modelserver

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/inferwatch/inferwatch/proto/inference"
)

// The toy LLM over gRPC, as a Triton decoupled model serves it (the
// TensorRT-LLM and vLLM backends): on ModelStreamInfer each request gets
// one response per generated token, each carrying the request's id and the
// token as a one-element BYTES tensor "text_output", the last flagged with
// the triton_final_response parameter. Requests on one stream generate
// concurrently, so their responses interleave. Input: "text_input" (BYTES,
// the prompt); request parameter "max_tokens" (int64, default 16).

// streamGenerate serves one toy-llm request of a stream, sending through
// send (which serialises the stream's writers).
func (s *Server) streamGenerate(ctx context.Context, r *inference.ModelInferRequest, send func(*inference.ModelStreamInferResponse) error) error {
	m, err := s.find(modelLLM, r.GetModelVersion())
	if err != nil {
		return err
	}
	g := &generation{s: s, max: defaultMaxTokens}
	if p := r.GetParameters()["max_tokens"]; p != nil {
		g.max = int(p.GetInt64Param())
	}
	if g.max < 1 || g.max > maxMaxTokens {
		return status.Errorf(codes.InvalidArgument, "max_tokens %d is outside [1,%d]", g.max, maxMaxTokens)
	}
	prompt, err := promptOf(r)
	if err != nil {
		return err
	}
	respond := func(i int, word string) error {
		out := make([]byte, 4, 4+len(word))
		binary.LittleEndian.PutUint32(out, uint32(len(word))) // Triton's raw BYTES: a length before each element
		out = append(out, word...)
		return send(&inference.ModelStreamInferResponse{InferResponse: &inference.ModelInferResponse{
			ModelName: modelLLM, ModelVersion: m.version, Id: r.GetId(),
			Parameters: map[string]*inference.InferParameter{
				"triton_final_response": {ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: i == g.max-1}},
			},
			Outputs:           []*inference.ModelInferResponse_InferOutputTensor{{Name: "text_output", Datatype: "BYTES", Shape: []int64{1}}},
			RawOutputContents: [][]byte{out},
		}})
	}
	_, err = s.execute(ctx, m, job{
		preprocess: func() (int, error) {
			g.prompt = len(strings.Fields(prompt))
			h := fnv.New64a()
			h.Write([]byte(prompt))
			g.seed = h.Sum64()
			return 1, nil
		},
		infer: func(ctx context.Context, _ timing) (time.Duration, error) {
			var emitted time.Duration
			err := g.generate(ctx, func(i int, word string) error {
				start := time.Now()
				defer func() { emitted += time.Since(start) }()
				return respond(i, word)
			})
			return emitted, err
		},
		postprocess: func() error { return nil },
	})
	return err
}

// promptOf reads the "text_input" BYTES tensor: raw (length-prefixed) or
// typed contents.
func promptOf(r *inference.ModelInferRequest) (string, error) {
	for i, in := range r.GetInputs() {
		if in.GetName() != "text_input" {
			continue
		}
		if raw := r.GetRawInputContents(); i < len(raw) {
			b := raw[i]
			if len(b) < 4 || int(binary.LittleEndian.Uint32(b)) > len(b)-4 {
				return "", status.Errorf(codes.InvalidArgument, "text_input: raw BYTES without a valid length prefix")
			}
			return string(b[4 : 4+binary.LittleEndian.Uint32(b)]), nil
		}
		if bs := in.GetContents().GetBytesContents(); len(bs) > 0 {
			return string(bs[0]), nil
		}
		return "", status.Errorf(codes.InvalidArgument, "text_input has no contents")
	}
	return "", status.Errorf(codes.InvalidArgument, "%s wants a BYTES input named text_input", modelLLM)
}

// decoupledStream runs the toy LLM's requests of one stream concurrently,
// sending their responses as they come; errors become in-stream
// error_message responses carrying the request's id.
type decoupledStream struct {
	stream grpc.BidiStreamingServer[inference.ModelInferRequest, inference.ModelStreamInferResponse]
	mu     sync.Mutex
	wg     sync.WaitGroup
	failed error // a send that failed: the stream is gone
}

func (d *decoupledStream) send(res *inference.ModelStreamInferResponse) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.failed != nil {
		return d.failed
	}
	if err := d.stream.Send(res); err != nil {
		d.failed = fmt.Errorf("send: %w", err)
	}
	return d.failed
}

func (d *decoupledStream) start(s *Server, r *inference.ModelInferRequest) {
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		if err := s.streamGenerate(d.stream.Context(), r, d.send); err != nil && d.stream.Context().Err() == nil {
			d.send(&inference.ModelStreamInferResponse{ErrorMessage: status.Convert(err).Message(),
				InferResponse: &inference.ModelInferResponse{ModelName: r.GetModelName(), Id: r.GetId()}})
		}
	}()
}
