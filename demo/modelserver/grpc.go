package modelserver

import (
	"context"
	"errors"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/inferwatch/inferwatch/proto/inference"
)

// Server metadata reported by both protocols.
const (
	serverName    = "inferwatch-demo"
	serverVersion = "1"
)

var serverExtensions = []string{"binary_tensor_data", "statistics", "model_repository"}

// serverTimingKey is the gRPC metadata key carrying the stages.
const serverTimingKey = "server-timing"

// grpcService is the KServe v2 GRPCInferenceService over a Server.
type grpcService struct {
	inference.UnimplementedGRPCInferenceServiceServer
	s *Server
}

func registerGRPC(g *grpc.Server, s *Server) {
	inference.RegisterGRPCInferenceServiceServer(g, &grpcService{s: s})
}

func (g *grpcService) ServerLive(context.Context, *inference.ServerLiveRequest) (*inference.ServerLiveResponse, error) {
	return &inference.ServerLiveResponse{Live: true}, nil
}

func (g *grpcService) ServerReady(context.Context, *inference.ServerReadyRequest) (*inference.ServerReadyResponse, error) {
	return &inference.ServerReadyResponse{Ready: true}, nil
}

func (g *grpcService) ModelReady(_ context.Context, r *inference.ModelReadyRequest) (*inference.ModelReadyResponse, error) {
	m, err := g.s.findAny(r.GetName(), r.GetVersion())
	if err != nil {
		return nil, err
	}
	return &inference.ModelReadyResponse{Ready: m.loaded.get() != nil}, nil
}

func (g *grpcService) ServerMetadata(context.Context, *inference.ServerMetadataRequest) (*inference.ServerMetadataResponse, error) {
	return &inference.ServerMetadataResponse{Name: serverName, Version: serverVersion, Extensions: serverExtensions}, nil
}

func (g *grpcService) ModelMetadata(_ context.Context, r *inference.ModelMetadataRequest) (*inference.ModelMetadataResponse, error) {
	m, err := g.s.find(r.GetName(), r.GetVersion())
	if err != nil {
		return nil, err
	}
	meta := func(ts []tensorMeta) []*inference.ModelMetadataResponse_TensorMetadata {
		out := make([]*inference.ModelMetadataResponse_TensorMetadata, len(ts))
		for i, t := range ts {
			out[i] = &inference.ModelMetadataResponse_TensorMetadata{Name: t.Name, Datatype: t.Datatype, Shape: t.Shape}
		}
		return out
	}
	return &inference.ModelMetadataResponse{
		Name: m.name, Versions: []string{m.version}, Platform: m.platform,
		Inputs: meta(m.inputs), Outputs: meta(m.outputs),
	}, nil
}

func (g *grpcService) ModelInfer(ctx context.Context, r *inference.ModelInferRequest) (*inference.ModelInferResponse, error) {
	resp, t, err := g.s.inferGRPC(ctx, r)
	if v := t.serverTiming(); v != "" {
		// The trailer is sent with the status, so it reports failed calls too.
		_ = grpc.SetTrailer(ctx, metadata.Pairs(serverTimingKey, v))
	}
	return resp, err
}

// ModelStreamInfer answers each request with one response; a failed request
// yields a response with error_message and the stream goes on, as in Triton.
// The trailer carries the stages summed over the stream.
//
// The toy LLM is decoupled instead (decoupled.go): a response per token.
func (g *grpcService) ModelStreamInfer(stream grpc.BidiStreamingServer[inference.ModelInferRequest, inference.ModelStreamInferResponse]) error {
	var total timing
	llm := &decoupledStream{stream: stream}
	defer llm.wg.Wait()
	defer func() {
		if v := total.serverTiming(); v != "" {
			stream.SetTrailer(metadata.Pairs(serverTimingKey, v))
		}
	}()
	for {
		r, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if r.GetModelName() == modelLLM {
			llm.start(g.s, r)
			continue
		}
		resp, t, err := g.s.inferGRPC(stream.Context(), r)
		total.add(t)
		out := &inference.ModelStreamInferResponse{InferResponse: resp}
		if err != nil {
			out = &inference.ModelStreamInferResponse{ErrorMessage: status.Convert(err).Message()}
		}
		if err := llm.send(out); err != nil {
			return err
		}
	}
}

func (g *grpcService) ModelStatistics(_ context.Context, r *inference.ModelStatisticsRequest) (*inference.ModelStatisticsResponse, error) {
	ms, err := g.s.statsFor(r.GetName(), r.GetVersion())
	if err != nil {
		return nil, err
	}
	resp := &inference.ModelStatisticsResponse{}
	for _, m := range ms {
		resp.ModelStats = append(resp.ModelStats, m.statsProto())
	}
	return resp, nil
}

// inferGRPC runs one ModelInferRequest. Inputs come as raw_input_contents
// (all of them) or typed contents; outputs go back raw, except that echo
// returns typed inputs typed.
func (s *Server) inferGRPC(ctx context.Context, r *inference.ModelInferRequest) (*inference.ModelInferResponse, timing, error) {
	m, err := s.find(r.GetModelName(), r.GetModelVersion())
	if err != nil {
		return nil, timing{}, err
	}
	raw := r.GetRawInputContents()
	if len(raw) > 0 && len(raw) != len(r.GetInputs()) {
		return nil, timing{}, status.Errorf(codes.InvalidArgument, "%d raw_input_contents for %d inputs", len(raw), len(r.GetInputs()))
	}
	in := make([]tensor, len(r.GetInputs()))
	for i, t := range r.GetInputs() {
		in[i] = tensor{name: t.GetName(), datatype: t.GetDatatype(), shape: t.GetShape()}
		switch {
		case len(raw) > 0:
			in[i].raw = raw[i]
			if in[i].raw == nil {
				in[i].raw = []byte{}
			}
		case t.GetContents() != nil:
			in[i].typed = t.GetContents()
		default:
			return nil, timing{}, status.Errorf(codes.InvalidArgument, "input %q has no contents", t.GetName())
		}
	}
	var w outputWant
	for _, o := range r.GetOutputs() {
		w.names = append(w.names, o.GetName())
	}

	var ex execution
	var outs []tensor
	t, err := s.execute(ctx, m, job{
		preprocess: func() (int, error) {
			var err error
			if ex, err = s.preprocess(m, in, w); err != nil {
				return 0, err
			}
			return ex.batch(), nil
		},
		infer: func(context.Context, timing) (time.Duration, error) { ex.infer(); return 0, nil },
		postprocess: func() error {
			var err error
			outs, err = ex.postprocess()
			return err
		},
	})
	if err != nil {
		return nil, t, err
	}
	resp := &inference.ModelInferResponse{ModelName: m.name, ModelVersion: m.version, Id: r.GetId()}
	for _, o := range outs {
		resp.Outputs = append(resp.Outputs, &inference.ModelInferResponse_InferOutputTensor{
			Name: o.name, Datatype: o.datatype, Shape: o.shape, Contents: o.typed,
		})
		if o.typed == nil {
			resp.RawOutputContents = append(resp.RawOutputContents, o.raw)
		}
	}
	return resp, t, nil
}
