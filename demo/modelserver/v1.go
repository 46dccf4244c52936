package modelserver

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/inferwatch/inferwatch/demo/model"
)

// httpPredict serves KServe v1 POST /v1/models/{model}:predict for the MLP:
// {"instances": [[784 floats], ...]} → {"predictions": [[10 floats], ...]}.
// An instance may also be nested ([28][28]); it is flattened row-major.
func (s *Server) httpPredict(w http.ResponseWriter, r *http.Request) {
	name, verb, ok := strings.Cut(r.PathValue("target"), ":")
	if !ok || verb != "predict" {
		writeError(w, status.Errorf(codes.NotFound, "no v1 endpoint %q: want {model}:predict", r.PathValue("target")))
		return
	}
	m, err := s.find(name, "")
	if err != nil {
		writeError(w, err)
		return
	}
	if m.kind != kindMLP {
		writeError(w, status.Errorf(codes.InvalidArgument, "model %q does not serve KServe v1 predict", name))
		return
	}
	body, err := readBody(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	var req struct {
		Instances []json.RawMessage `json:"instances"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, status.Errorf(codes.InvalidArgument, "parse predict request: %v", err))
		return
	}

	inst := m.loaded.get()
	if inst == nil {
		writeError(w, status.Errorf(codes.Unavailable, "model %q is not loaded", name))
		return
	}
	var x, y []float32
	var resp []byte
	n := len(req.Instances)
	t, err := s.execute(r.Context(), m, job{
		preprocess: func() (int, error) {
			if n == 0 {
				return 0, status.Error(codes.InvalidArgument, "no instances")
			}
			x = make([]float32, 0, n*model.InputSize)
			for i, inst := range req.Instances {
				raw, count, err := jsonToRaw("FP32", inst)
				if err != nil {
					return 0, status.Errorf(codes.InvalidArgument, "instance %d: %v", i, err)
				}
				if count != model.InputSize {
					return 0, status.Errorf(codes.InvalidArgument, "instance %d has %d values, want %d", i, count, model.InputSize)
				}
				x = append(x, rawToFloat32(raw)...)
			}
			return n, nil
		},
		infer: func(context.Context, timing) (time.Duration, error) {
			y = inst.mlp.Infer(x, n)
			return 0, nil
		},
		postprocess: func() error {
			preds := make([][]float32, n)
			for i := range preds {
				preds[i] = y[i*model.OutputSize : (i+1)*model.OutputSize]
			}
			var err error
			resp, err = json.Marshal(map[string]any{"predictions": preds})
			return err
		},
	})
	setServerTiming(w, t)
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(resp)
}
