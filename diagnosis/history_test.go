package diagnosis

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestHistory(t *testing.T) {
	tests := []struct {
		name      string
		max       int
		adds      []int // window indexes added to "mlp", in this order
		wantFirst int
		wantLen   int
	}{
		{name: "in order", max: 5, adds: []int{0, 1, 2}, wantFirst: 0, wantLen: 3},
		{name: "bounded", max: 3, adds: []int{0, 1, 2, 3, 4}, wantFirst: 2, wantLen: 3},
		{name: "out of order and repeated", max: 5, adds: []int{2, 0, 1, 1, 2}, wantFirst: 0, wantLen: 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := NewHistory(tc.max, 1)
			for _, i := range tc.adds {
				h.Add("mlp", healthy(i))
			}
			h.Add("other", healthy(0)) // over MaxModels: dropped
			ws := h.Windows("mlp")
			if len(ws) != tc.wantLen || !ws[0].Start.Equal(healthy(tc.wantFirst).Start) {
				t.Fatalf("got %d windows from %v, want %d from %v", len(ws), ws[0].Start, tc.wantLen, healthy(tc.wantFirst).Start)
			}
			for i := 1; i < len(ws); i++ {
				if !ws[i].Start.After(ws[i-1].Start) {
					t.Fatalf("windows out of order at %d", i)
				}
			}
			if got := h.Models(); len(got) != 1 {
				t.Errorf("models = %v, want only mlp", got)
			}
			if got, want := h.Last("mlp", "1"), ws[len(ws)-1].Start; !got.Equal(want) {
				t.Errorf("last = %v, want %v", got, want)
			}
		})
	}
}

func TestHistorySurvivesRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.json")
	h := NewHistory(0, 0)
	if err := h.Load(path, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatalf("missing file: %v", err)
	}
	for i := range 40 {
		h.Add("mlp", healthy(i))
	}
	if err := h.Save(path); err != nil {
		t.Fatal(err)
	}
	h2 := NewHistory(0, 0)
	if err := h2.Load(path, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	ws := h2.Windows("mlp")
	if len(ws) != 40 || ws[39].Host == nil || ws[39].Host.Sched.RunqueueDelay != 0.02 || ws[39].Stages["compute"] != 0.015 {
		t.Fatalf("restored %d windows, last %+v", len(ws), ws[len(ws)-1])
	}
	if _, err := Diagnose(Request{Model: "mlp", From: t0.Add(30 * 10 * time.Second), Windows: ws}, Options{}); err != nil {
		t.Fatal(err)
	}
}

// TestHistoryFileDamagedOrUnwritable: a history file that cannot be read
// (cut short by a crash) is set aside and the history starts empty, rather
// than the sidecar not starting; a path whose folder is missing is an
// error at start-up, not a history lost at every restart.
func TestHistoryFileDamagedOrUnwritable(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "history.json")
	os.WriteFile(path, []byte(`{"mlp":[{"start":"2026-03-02T00:00:00Z","sec`), 0o600)
	h := NewHistory(0, 0)
	if err := h.Load(path, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatalf("a damaged file stops start-up: %v", err)
	}
	if len(h.Models()) != 0 {
		t.Fatalf("models %v from a damaged file", h.Models())
	}
	if _, err := os.Stat(path + ".corrupt"); err != nil {
		t.Fatalf("the damaged file was not set aside: %v", err)
	}
	h.Add("mlp", healthy(0))
	if err := h.Save(path); err != nil {
		t.Fatalf("saving after a damaged file: %v", err)
	}
	if err := NewHistory(0, 0).Load(filepath.Join(dir, "missing", "history.json"), slog.New(slog.DiscardHandler)); err == nil {
		t.Fatal("a path in a missing folder loads without an error")
	}
}
