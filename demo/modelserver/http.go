package modelserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// HTTPHandler serves KServe v2 REST (with the binary tensor data,
// statistics and model repository extensions), KServe v1 predict and the OpenAI-compatible toy
// LLM. Inference responses carry a Server-Timing header with the stages.
func (s *Server) HTTPHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v2", s.httpServerMetadata)
	mux.HandleFunc("GET /v2/health/live", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]bool{"live": true})
	})
	mux.HandleFunc("GET /v2/health/ready", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]bool{"ready": true})
	})
	mux.HandleFunc("GET /v2/models/stats", s.httpStats)
	for _, p := range []string{"/v2/models/{model}", "/v2/models/{model}/versions/{version}"} {
		mux.HandleFunc("GET "+p, s.httpModelMetadata)
		mux.HandleFunc("GET "+p+"/ready", s.httpModelReady)
		mux.HandleFunc("GET "+p+"/stats", s.httpStats)
		mux.HandleFunc("POST "+p+"/infer", s.httpInfer)
	}
	mux.HandleFunc("POST /v2/repository/index", s.httpRepositoryIndex)
	mux.HandleFunc("POST /v2/repository/models/{model}/load", s.httpRepositoryLoad)
	mux.HandleFunc("POST /v2/repository/models/{model}/unload", s.httpRepositoryUnload)
	// "{model}:predict" is one path segment, so the verb is split off by hand.
	mux.HandleFunc("POST /v1/models/{target}", s.httpPredict)
	mux.HandleFunc("POST /v1/chat/completions", s.httpChatCompletions)
	mux.HandleFunc("POST /v1/completions", s.httpCompletions)
	return mux
}

func (s *Server) httpServerMetadata(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"name": serverName, "version": serverVersion, "extensions": serverExtensions,
	})
}

func (s *Server) httpModelMetadata(w http.ResponseWriter, r *http.Request) {
	m, err := s.find(r.PathValue("model"), r.PathValue("version"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"name": m.name, "versions": []string{m.version}, "platform": m.platform,
		"inputs": nonNil(m.inputs), "outputs": nonNil(m.outputs),
	})
}

func nonNil(ts []tensorMeta) []tensorMeta {
	if ts == nil {
		return []tensorMeta{}
	}
	return ts
}

// httpModelReady answers 200 for a loaded model and 400 for one that is
// not (KServe v2: the status is the answer).
func (s *Server) httpModelReady(w http.ResponseWriter, r *http.Request) {
	m, err := s.findAny(r.PathValue("model"), r.PathValue("version"))
	if err != nil {
		writeError(w, err)
		return
	}
	if m.loaded.get() == nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"name": m.name, "ready": false})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"name": m.name, "ready": true})
}

func (s *Server) httpStats(w http.ResponseWriter, r *http.Request) {
	ms, err := s.statsFor(r.PathValue("model"), r.PathValue("version"))
	if err != nil {
		writeError(w, err)
		return
	}
	out := struct {
		ModelStats []modelStatsJSON `json:"model_stats"`
	}{ModelStats: []modelStatsJSON{}}
	for _, m := range ms {
		out.ModelStats = append(out.ModelStats, m.statsJSON())
	}
	writeJSON(w, http.StatusOK, out)
}

// readBody reads a request body up to MaxMessageBytes, sized up front from
// Content-Length so large tensors are not copied while the buffer grows.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	body := http.MaxBytesReader(w, r.Body, MaxMessageBytes)
	if n := r.ContentLength; n > 0 && n <= MaxMessageBytes {
		buf := make([]byte, n)
		if _, err := io.ReadFull(body, buf); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "read request body: %v", err)
		}
		return buf, nil
	}
	buf, err := io.ReadAll(body)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, status.Errorf(codes.ResourceExhausted, "request body over %d bytes", MaxMessageBytes)
		}
		return nil, status.Errorf(codes.InvalidArgument, "read request body: %v", err)
	}
	return buf, nil
}

// readOptionalJSON decodes a small JSON request body into v; an empty body
// leaves v as it is.
func readOptionalJSON(w http.ResponseWriter, r *http.Request, v any) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "read request body: %v", err)
	}
	if len(body) == 0 {
		return nil
	}
	if err := json.Unmarshal(body, v); err != nil {
		return status.Errorf(codes.InvalidArgument, "parse request body: %v", err)
	}
	return nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, fmt.Sprintf("encode response: %v", err), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

// writeError answers a gRPC status error as KServe's {"error": "..."}.
func writeError(w http.ResponseWriter, err error) {
	st := status.Convert(err)
	writeJSON(w, httpStatus(st.Code()), map[string]string{"error": st.Message()})
}

// httpStatus maps the gRPC code an execution failed with to HTTP.
func httpStatus(c codes.Code) int {
	switch c {
	case codes.OK:
		return http.StatusOK
	case codes.NotFound:
		return http.StatusNotFound
	case codes.InvalidArgument:
		return http.StatusBadRequest
	case codes.ResourceExhausted:
		return http.StatusRequestEntityTooLarge
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	case codes.Unavailable, codes.Canceled:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// setServerTiming adds the stages that ran to the response headers.
func setServerTiming(w http.ResponseWriter, t timing) {
	if v := t.serverTiming(); v != "" {
		w.Header().Set("Server-Timing", v)
	}
}
