package modelserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/inferwatch/inferwatch/demo/model"
	"github.com/inferwatch/inferwatch/proto/inference"
)

// Served model names and the MLP's tensor names.
const (
	modelMLP       = "mnist-mlp"
	modelEcho      = "echo"
	modelLLM       = "toy-llm"
	modelMLPInput  = "input"
	modelMLPOutput = "probabilities"
)

type modelKind int

const (
	kindMLP  modelKind = iota // KServe v2/v1: the seeded MLP
	kindEcho                  // KServe v2: returns its inputs
	kindLLM                   // OpenAI API only: the toy LLM
)

// servedModel is one model/version the server answers for, with its
// cumulative statistics.
type servedModel struct {
	name, version, platform string
	kind                    modelKind
	inputs, outputs         []tensorMeta
	stats                   stats
	loaded                  loadedState
}

type tensorMeta struct {
	Name     string  `json:"name"`
	Datatype string  `json:"datatype"`
	Shape    []int64 `json:"shape"`
}

// tensor is one input or output in protocol-neutral form: exactly one of
// raw, typed and json holds its data.
type tensor struct {
	name     string
	datatype string
	shape    []int64
	raw      []byte                         // little-endian bytes (gRPC raw contents, HTTP binary extension)
	typed    *inference.InferTensorContents // gRPC typed contents
	json     json.RawMessage                // HTTP JSON data
}

// outputWant is how the calling protocol wants outputs encoded.
type outputWant struct {
	http      bool            // HTTP answers JSON data unless binary is asked for
	binaryAll bool            // HTTP request parameter binary_data_output
	binary    map[string]bool // HTTP per-output parameter binary_data
	names     []string        // requested outputs; empty means all
}

func (w outputWant) binaryFor(name string) bool { return w.binaryAll || w.binary[name] }

func (w outputWant) wants(name string) bool {
	return len(w.names) == 0 || slices.Contains(w.names, name)
}

// execution is one request's model work, split into the stages the server
// times: preprocess built it, then infer and postprocess run in turn.
type execution interface {
	batch() int
	infer()
	postprocess() ([]tensor, error)
}

// find returns the named model when it is loaded, an UNAVAILABLE status
// when it is not, or a NOT_FOUND status.
func (s *Server) find(name, version string) (*servedModel, error) {
	m, err := s.findAny(name, version)
	if err == nil && m.loaded.get() == nil {
		return nil, status.Errorf(codes.Unavailable, "model %q is not loaded", name)
	}
	return m, err
}

// findAny returns the named model, loaded or not, or a NOT_FOUND status.
func (s *Server) findAny(name, version string) (*servedModel, error) {
	if m := s.lookup(name, version); m != nil {
		return m, nil
	}
	if version != "" && s.lookup(name, "") != nil {
		return nil, status.Errorf(codes.NotFound, "model %q has no version %q", name, version)
	}
	return nil, status.Errorf(codes.NotFound, "unknown model %q", name)
}

// preprocess validates and decodes a v2 request's inputs for m: the
// "preprocess" stage (Triton's compute_input).
func (s *Server) preprocess(m *servedModel, in []tensor, w outputWant) (execution, error) {
	switch m.kind {
	case kindMLP:
		return preprocessMLP(m, in, w)
	case kindEcho:
		return preprocessEcho(in, w)
	}
	return nil, status.Errorf(codes.InvalidArgument, "model %q is served by the OpenAI API (/v1/chat/completions, /v1/completions) only", m.name)
}

func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

type mlpExecution struct {
	mlp  *model.MLP
	http bool
	raw  bool // answer raw bytes
	x, y []float32
	n    int
}

func preprocessMLP(m *servedModel, in []tensor, w outputWant) (execution, error) {
	inst := m.loaded.get()
	if inst == nil {
		return nil, status.Errorf(codes.Unavailable, "model %q is not loaded", m.name)
	}
	for _, name := range w.names {
		if name != modelMLPOutput {
			return nil, invalid("model %q has no output %q", modelMLP, name)
		}
	}
	if len(in) != 1 || in[0].name != modelMLPInput {
		return nil, invalid("model %q takes one input %q", modelMLP, modelMLPInput)
	}
	t := in[0]
	if t.datatype != "FP32" {
		return nil, invalid("input %q is %s, want FP32", t.name, t.datatype)
	}
	if len(t.shape) != 2 || t.shape[0] < 1 || t.shape[1] != model.InputSize {
		return nil, invalid("input %q has shape %v, want [N,%d]", t.name, t.shape, model.InputSize)
	}
	n := int(t.shape[0])
	want := n * model.InputSize
	var x []float32
	switch {
	case t.raw != nil:
		if len(t.raw) != want*4 {
			return nil, invalid("input %q has %d bytes, want %d for shape %v", t.name, len(t.raw), want*4, t.shape)
		}
		x = rawToFloat32(t.raw)
	case t.typed != nil:
		x = t.typed.GetFp32Contents()
	case t.json != nil:
		raw, _, err := jsonToRaw("FP32", t.json)
		if err != nil {
			return nil, invalid("input %q: %v", t.name, err)
		}
		x = rawToFloat32(raw)
	}
	if len(x) != want {
		return nil, invalid("input %q has %d values, want %d for shape %v", t.name, len(x), want, t.shape)
	}
	return &mlpExecution{
		mlp: inst.mlp, http: w.http, raw: !w.http || w.binaryFor(modelMLPOutput), x: x, n: n,
	}, nil
}

func (e *mlpExecution) batch() int { return e.n }
func (e *mlpExecution) infer()     { e.y = e.mlp.Infer(e.x, e.n) }

func (e *mlpExecution) postprocess() ([]tensor, error) {
	out := tensor{name: modelMLPOutput, datatype: "FP32", shape: []int64{int64(e.n), model.OutputSize}}
	if e.raw {
		out.raw = float32ToRaw(e.y)
	} else {
		data, err := json.Marshal(e.y)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "encode %q: %v", out.name, err)
		}
		out.json = data
	}
	return []tensor{out}, nil
}

// echoExecution copies each input to an output of the same name: raw in,
// raw out; typed in, typed out. The copy is the model's real work, so large
// tensors cost what moving them costs.
type echoExecution struct {
	in, out []tensor
	w       outputWant
}

func preprocessEcho(in []tensor, w outputWant) (execution, error) {
	if len(in) == 0 {
		return nil, invalid("model %q needs at least one input", modelEcho)
	}
	for _, name := range w.names {
		if !slices.ContainsFunc(in, func(t tensor) bool { return t.name == name }) {
			return nil, invalid("model %q has no output %q: outputs mirror the inputs", modelEcho, name)
		}
	}
	for _, t := range in {
		if _, err := elementCount(t.shape); err != nil {
			return nil, invalid("input %q: %v", t.name, err)
		}
		var err error
		switch {
		case t.raw != nil:
			err = checkRaw(t.datatype, t.shape, len(t.raw))
		case t.typed != nil:
			err = checkTyped(t)
		default:
			// JSON data is held to its datatype and shape as raw and typed
			// data are, and as KServe v2 servers hold it.
			var n, elems int64
			if _, n, err = jsonToRaw(t.datatype, t.json); err == nil {
				if elems, _ = elementCount(t.shape); n != elems {
					err = fmt.Errorf("%d values of %s data for shape %v, want %d", n, t.datatype, t.shape, elems)
				}
			}
		}
		if err != nil {
			return nil, invalid("input %q: %v", t.name, err)
		}
	}
	return &echoExecution{in: in, w: w}, nil
}

func (e *echoExecution) batch() int {
	if s := e.in[0].shape; len(s) > 0 {
		return int(s[0])
	}
	return 1
}

func (e *echoExecution) infer() {
	e.out = make([]tensor, 0, len(e.in))
	for _, t := range e.in {
		if !e.w.wants(t.name) {
			continue
		}
		o := tensor{name: t.name, datatype: t.datatype, shape: slices.Clone(t.shape)}
		switch {
		case t.raw != nil:
			o.raw = bytes.Clone(t.raw)
		case t.typed != nil:
			o.typed = proto.Clone(t.typed).(*inference.InferTensorContents)
		default:
			o.json = bytes.Clone(t.json)
		}
		e.out = append(e.out, o)
	}
}

// postprocess converts JSON data to raw bytes where HTTP asked for binary.
func (e *echoExecution) postprocess() ([]tensor, error) {
	for i, o := range e.out {
		if o.json == nil || !e.w.binaryFor(o.name) {
			continue
		}
		raw, _, err := jsonToRaw(o.datatype, o.json)
		if err != nil {
			return nil, invalid("output %q as binary: %v", o.name, err)
		}
		if err := checkRaw(o.datatype, o.shape, len(raw)); err != nil {
			return nil, invalid("output %q: %v", o.name, err)
		}
		e.out[i].raw, e.out[i].json = raw, nil
	}
	return e.out, nil
}

// typedCount is how many values typed gRPC contents hold, whatever field.
func typedCount(c *inference.InferTensorContents) int {
	return len(c.GetBoolContents()) + len(c.GetIntContents()) + len(c.GetInt64Contents()) +
		len(c.GetUintContents()) + len(c.GetUint64Contents()) + len(c.GetFp32Contents()) +
		len(c.GetFp64Contents()) + len(c.GetBytesContents())
}

// checkTyped validates typed contents against the shape.
func checkTyped(t tensor) error {
	elems, err := elementCount(t.shape)
	if err != nil {
		return err
	}
	if n := typedCount(t.typed); int64(n) != elems {
		return fmt.Errorf("%d typed values for shape %v, want %d", n, t.shape, elems)
	}
	return nil
}
