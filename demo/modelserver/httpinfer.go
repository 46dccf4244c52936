package modelserver

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// headerLength is the binary tensor data extension's header: the length of
// the JSON that precedes the raw tensor bytes in a body.
const headerLength = "Inference-Header-Content-Length"

type v2Request struct {
	ID         string                     `json:"id,omitempty"`
	Parameters map[string]json.RawMessage `json:"parameters,omitempty"`
	Inputs     []v2Input                  `json:"inputs"`
	Outputs    []v2RequestedOutput        `json:"outputs,omitempty"`
}

type v2Input struct {
	Name       string                     `json:"name"`
	Shape      []int64                    `json:"shape"`
	Datatype   string                     `json:"datatype"`
	Parameters map[string]json.RawMessage `json:"parameters,omitempty"`
	Data       json.RawMessage            `json:"data,omitempty"`
}

type v2RequestedOutput struct {
	Name       string                     `json:"name"`
	Parameters map[string]json.RawMessage `json:"parameters,omitempty"`
}

type v2Response struct {
	ModelName    string     `json:"model_name"`
	ModelVersion string     `json:"model_version"`
	ID           string     `json:"id,omitempty"`
	Outputs      []v2Output `json:"outputs"`
}

type v2Output struct {
	Name       string          `json:"name"`
	Datatype   string          `json:"datatype"`
	Shape      []int64         `json:"shape"`
	Parameters map[string]any  `json:"parameters,omitempty"`
	Data       json.RawMessage `json:"data,omitempty"`
}

// httpInfer serves POST /v2/models/{model}[/versions/{version}]/infer.
func (s *Server) httpInfer(w http.ResponseWriter, r *http.Request) {
	m, err := s.find(r.PathValue("model"), r.PathValue("version"))
	if err != nil {
		writeError(w, err)
		return
	}
	body, err := readBody(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	req, in, want, err := parseV2(r.Header.Get(headerLength), body)
	if err != nil {
		writeError(w, err)
		return
	}

	var ex execution
	var outs []tensor
	t, err := s.execute(r.Context(), m, job{
		preprocess: func() (int, error) {
			var err error
			if ex, err = s.preprocess(m, in, want); err != nil {
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
	setServerTiming(w, t)
	if err != nil {
		writeError(w, err)
		return
	}
	writeV2(w, v2Response{ModelName: m.name, ModelVersion: m.version, ID: req.ID}, outs)
}

// parseV2 splits a body into its JSON header and binary tensor data (when
// hdrLen is set) and turns the inputs into tensors.
func parseV2(hdrLen string, body []byte) (v2Request, []tensor, outputWant, error) {
	var req v2Request
	head, bin := body, []byte(nil)
	if hdrLen != "" {
		n, err := strconv.Atoi(hdrLen)
		if err != nil || n < 0 || n > len(body) {
			return req, nil, outputWant{}, status.Errorf(codes.InvalidArgument, "%s %q does not fit a %d-byte body", headerLength, hdrLen, len(body))
		}
		head, bin = body[:n], body[n:]
	}
	if err := json.Unmarshal(head, &req); err != nil {
		return req, nil, outputWant{}, status.Errorf(codes.InvalidArgument, "parse inference request: %v", err)
	}
	in := make([]tensor, len(req.Inputs))
	for i, t := range req.Inputs {
		in[i] = tensor{name: t.Name, datatype: t.Datatype, shape: t.Shape}
		size, ok, err := paramInt(t.Parameters, "binary_data_size")
		switch {
		case err != nil:
			return req, nil, outputWant{}, status.Errorf(codes.InvalidArgument, "input %q: %v", t.Name, err)
		case ok:
			if size < 0 || size > int64(len(bin)) {
				return req, nil, outputWant{}, status.Errorf(codes.InvalidArgument, "input %q: binary_data_size %d exceeds the %d binary bytes left", t.Name, size, len(bin))
			}
			in[i].raw, bin = bin[:size:size], bin[size:]
		case len(t.Data) > 0:
			in[i].json = t.Data
		default:
			return req, nil, outputWant{}, status.Errorf(codes.InvalidArgument, "input %q has neither data nor binary_data_size", t.Name)
		}
	}
	if len(bin) > 0 {
		return req, nil, outputWant{}, status.Errorf(codes.InvalidArgument, "%d binary bytes belong to no input", len(bin))
	}
	want := outputWant{http: true, binary: map[string]bool{}}
	want.binaryAll = paramBool(req.Parameters, "binary_data_output")
	for _, o := range req.Outputs {
		want.names = append(want.names, o.Name)
		want.binary[o.Name] = paramBool(o.Parameters, "binary_data")
	}
	return req, in, want, nil
}

func paramInt(p map[string]json.RawMessage, key string) (int64, bool, error) {
	v, ok := p[key]
	if !ok {
		return 0, false, nil
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("parameter %s=%s is not an integer", key, v)
	}
	return n, true, nil
}

func paramBool(p map[string]json.RawMessage, key string) bool {
	return string(p[key]) == "true"
}

// writeV2 answers with JSON, or with a JSON header followed by the raw
// bytes of the binary outputs when there are any.
func writeV2(w http.ResponseWriter, resp v2Response, outs []tensor) {
	var blobs [][]byte
	var n int
	for _, o := range outs {
		out := v2Output{Name: o.name, Datatype: o.datatype, Shape: o.shape, Data: o.json}
		if o.json == nil {
			out.Parameters = map[string]any{"binary_data_size": len(o.raw)}
			blobs = append(blobs, o.raw)
			n += len(o.raw)
		}
		resp.Outputs = append(resp.Outputs, out)
	}
	if len(blobs) == 0 {
		writeJSON(w, http.StatusOK, resp)
		return
	}
	head, err := json.Marshal(resp)
	if err != nil {
		writeError(w, status.Errorf(codes.Internal, "encode response: %v", err))
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set(headerLength, strconv.Itoa(len(head)))
	h.Set("Content-Length", strconv.Itoa(len(head)+n))
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write(head); err != nil {
		return
	}
	for _, b := range blobs {
		if _, err := w.Write(b); err != nil {
			return
		}
	}
}
