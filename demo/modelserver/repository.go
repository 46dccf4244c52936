package modelserver

import (
	"context"
	"net/http"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/inferwatch/inferwatch/demo/model"
	"github.com/inferwatch/inferwatch/proto/inference"
)

// DefaultWarmupRows is how many rows a load runs through a freshly built
// MLP when Options.WarmupRows is 0, as Triton's model_warmup does.
const DefaultWarmupRows = 256

// instance is a loaded model: what a load builds and an unload drops. The
// echo and toy LLM models have no weights; their instance only says loaded.
type instance struct {
	mlp *model.MLP
}

// loadedState holds a model's instance; nil means unloaded.
type loadedState struct{ p atomic.Pointer[instance] }

func (l *loadedState) get() *instance { return l.p.Load() }

// build makes a new instance of m: for the MLP, weights drawn from the
// server's seed and a warm-up pass over WarmupRows rows, the real work a
// load of a model costs (allocation, initialisation, a first execution).
func (s *Server) build(m *servedModel) *instance {
	if m.kind != kindMLP {
		return &instance{}
	}
	mlp := model.NewMLP(s.seed)
	if s.warmupRows > 0 {
		x := make([]float32, s.warmupRows*model.InputSize)
		for i := range x {
			x[i] = float32(i%255) / 255
		}
		mlp.Infer(x, s.warmupRows)
	}
	return &instance{mlp: mlp}
}

// named returns the model of that name (any version) in the repository.
func (s *Server) named(name string) (*servedModel, error) {
	if m := s.lookup(name, ""); m != nil {
		return m, nil
	}
	return nil, status.Errorf(codes.NotFound, "failed to load %q: no model of that name in the repository", name)
}

// Load loads the named model, or reloads it when it is loaded: a new
// instance is built while the old one keeps serving, then swapped in.
// Loads and unloads run one at a time, as Triton's model control does.
func (s *Server) Load(name string) error {
	m, err := s.named(name)
	if err != nil {
		return err
	}
	s.repo.Lock()
	defer s.repo.Unlock()
	m.loaded.p.Store(s.build(m))
	return nil
}

// Unload unloads the named model: calls that name it fail UNAVAILABLE and
// its readiness turns false until it is loaded again.
func (s *Server) Unload(name string) error {
	m := s.lookup(name, "")
	if m == nil {
		return status.Errorf(codes.NotFound, "failed to unload %q: no model of that name in the repository", name)
	}
	s.repo.Lock()
	defer s.repo.Unlock()
	m.loaded.p.Store(nil)
	return nil
}

// repositoryEntry is one model of the repository index.
type repositoryEntry struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	State   string `json:"state"`
	Reason  string `json:"reason,omitempty"`
}

func (s *Server) index(readyOnly bool) []repositoryEntry {
	out := []repositoryEntry{}
	for _, m := range s.models {
		state := "READY"
		if m.loaded.get() == nil {
			if readyOnly {
				continue
			}
			state = "UNAVAILABLE"
		}
		out = append(out, repositoryEntry{Name: m.name, Version: m.version, State: state})
	}
	return out
}

func (g *grpcService) RepositoryIndex(_ context.Context, r *inference.RepositoryIndexRequest) (*inference.RepositoryIndexResponse, error) {
	resp := &inference.RepositoryIndexResponse{}
	for _, e := range g.s.index(r.GetReady()) {
		resp.Models = append(resp.Models, &inference.RepositoryIndexResponse_ModelIndex{Name: e.Name, Version: e.Version, State: e.State, Reason: e.Reason})
	}
	return resp, nil
}

func (g *grpcService) RepositoryModelLoad(_ context.Context, r *inference.RepositoryModelLoadRequest) (*inference.RepositoryModelLoadResponse, error) {
	if err := g.s.Load(r.GetModelName()); err != nil {
		return nil, err
	}
	return &inference.RepositoryModelLoadResponse{}, nil
}

func (g *grpcService) RepositoryModelUnload(_ context.Context, r *inference.RepositoryModelUnloadRequest) (*inference.RepositoryModelUnloadResponse, error) {
	if err := g.s.Unload(r.GetModelName()); err != nil {
		return nil, err
	}
	return &inference.RepositoryModelUnloadResponse{}, nil
}

// httpRepositoryIndex serves POST /v2/repository/index; the body may ask
// {"ready": true}.
func (s *Server) httpRepositoryIndex(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Ready bool `json:"ready"`
	}
	if err := readOptionalJSON(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, s.index(req.Ready))
}

// httpRepositoryLoad serves POST /v2/repository/models/{model}/load. The
// optional body's parameters are accepted and not used.
func (s *Server) httpRepositoryLoad(w http.ResponseWriter, r *http.Request) {
	s.httpRepository(w, r, s.Load)
}

// httpRepositoryUnload serves POST /v2/repository/models/{model}/unload.
func (s *Server) httpRepositoryUnload(w http.ResponseWriter, r *http.Request) {
	s.httpRepository(w, r, s.Unload)
}

func (s *Server) httpRepository(w http.ResponseWriter, r *http.Request, op func(string) error) {
	var req struct {
		Parameters map[string]any `json:"parameters"`
	}
	if err := readOptionalJSON(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	if err := op(r.PathValue("model")); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}
