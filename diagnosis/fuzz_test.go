package diagnosis

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// FuzzLoad holds the window history's loader (diagnose.history_file) to any
// bytes: either an error, or a history within its bounds and in start order
// that a diagnosis over every model's windows reads without panicking.
func FuzzLoad(f *testing.F) {
	f.Add([]byte(`{"m":[{"start":"2026-03-02T00:00:00Z","seconds":10,"version":"1","count":100,"qps":10,"mean":0.05,"p99":0.1,"phases":{"upstream":0.04},"stages":{"compute":0.03},"rss":1e8}]}`))
	f.Add([]byte(`{"m":[{"start":"2026-03-02T00:00:10Z","seconds":-10,"count":-5,"qps":-1,"mean":-0.05,"p99":1e308,"rss":-1},{"start":"2026-03-02T00:00:00Z","seconds":0,"count":0,"p99":0}],"n":null,"":[]}`))
	f.Add([]byte(`{"m":[{"start":"0001-01-01T00:00:00Z","host":{},"slowest":[{}]},{"start":"9999-12-31T23:59:59Z","seconds":1e300}]}`))
	f.Add([]byte(`{"m":[`))
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(t.TempDir(), "history.json")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		h := NewHistory(16, 4)
		if err := h.Load(path, slog.New(slog.DiscardHandler)); err != nil {
			return
		}
		models := h.Models()
		if len(models) > 4 {
			t.Fatalf("%d models, at most 4", len(models))
		}
		for _, m := range models {
			ws := h.Windows(m)
			if len(ws) > 16 {
				t.Fatalf("%q: %d windows, at most 16", m, len(ws))
			}
			for i := 1; i < len(ws); i++ {
				if ws[i].Start.Before(ws[i-1].Start) {
					t.Fatalf("%q: window %d starts before window %d", m, i, i-1)
				}
			}
			if len(ws) == 0 {
				continue
			}
			for _, from := range []time.Time{ws[0].Start, ws[len(ws)/2].Start, ws[len(ws)-1].Start} {
				Diagnose(Request{Model: m, From: from, Windows: ws, MemoryLimit: 1 << 30}, Options{})
			}
		}
	})
}
