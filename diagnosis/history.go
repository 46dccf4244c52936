package diagnosis

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/inferwatch/inferwatch/internal/statefile"
)

// History keeps the closed windows the diagnosis reads, per model, bounded:
// at most Max windows per model (default 720: two hours of 10 s windows,
// enough to see a 30-minute period recur) and MaxModels models (default
// 100; beyond, new models are not kept). Safe for concurrent use.
type History struct {
	Max       int
	MaxModels int

	mu     sync.Mutex
	models map[string][]Window
}

// NewHistory returns an empty history with the given bounds (0: defaults).
func NewHistory(max, maxModels int) *History {
	if max <= 0 {
		max = 720
	}
	if maxModels <= 0 {
		maxModels = 100
	}
	return &History{Max: max, MaxModels: maxModels, models: map[string][]Window{}}
}

// Add keeps window w of model; a window already kept (same start and
// version) is replaced. Windows are kept in start order.
func (h *History) Add(model string, w Window) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ws, ok := h.models[model]
	if !ok && len(h.models) >= h.MaxModels {
		return
	}
	i := sort.Search(len(ws), func(i int) bool { return !ws[i].Start.Before(w.Start) })
	for j := i; j < len(ws) && ws[j].Start.Equal(w.Start); j++ {
		if ws[j].Version == w.Version {
			ws[j] = w
			h.models[model] = ws
			return
		}
	}
	ws = slices.Insert(ws, i, w)
	if len(ws) > h.Max {
		ws = slices.Delete(ws, 0, len(ws)-h.Max)
	}
	h.models[model] = ws
}

// Last is the start of the newest window kept of model and version; zero
// when none.
func (h *History) Last(model, version string) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	ws := h.models[model]
	for i := len(ws) - 1; i >= 0; i-- {
		if ws[i].Version == version {
			return ws[i].Start
		}
	}
	return time.Time{}
}

// Windows returns a copy of model's windows, oldest first.
func (h *History) Windows(model string) []Window {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.models[model])
}

// Models lists the models kept, sorted.
func (h *History) Models() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for m := range h.models {
		out = append(out, m)
	}
	slices.Sort(out)
	return out
}

// Save writes the history to path as JSON, whole or not at all
// (statefile.Write).
func (h *History) Save(path string) error {
	h.mu.Lock()
	b, err := json.Marshal(h.models)
	h.mu.Unlock()
	if err != nil {
		return fmt.Errorf("diagnosis: history: encode: %w", err)
	}
	if err := statefile.Write(path, b); err != nil {
		return fmt.Errorf("diagnosis: history: save %s: %w", path, err)
	}
	return nil
}

// Load adds the windows saved at path, within the bounds. A missing file
// is no error: a first start has no history. Nor is one that cannot be
// read as a history (cut short by a crash, edited): the history is a
// cache, and the sidecar in front of the model must start: the file is set
// aside (statefile.SetAside) with a warning to logger. A path that cannot
// be saved to is an error.
func (h *History) Load(path string, logger *slog.Logger) error {
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("diagnosis: history: load: %w", err)
	}
	if err := statefile.Writable(path); err != nil {
		return fmt.Errorf("diagnosis: history: %s: %w", path, err)
	}
	if os.IsNotExist(err) {
		return nil
	}
	var m map[string][]Window
	if err := json.Unmarshal(b, &m); err != nil {
		aside, rerr := statefile.SetAside(path)
		if rerr != nil {
			return fmt.Errorf("diagnosis: history: load %s: %w; setting it aside: %w", path, err, rerr)
		}
		logger.Warn("diagnosis history unreadable: set aside, starting empty", "path", path, "moved_to", aside, "err", err)
		return nil
	}
	for _, model := range slices.Sorted(func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}) {
		for _, w := range m[model] {
			h.Add(model, w)
		}
	}
	return nil
}
