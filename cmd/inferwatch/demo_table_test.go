package main

import (
	"strings"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/alerting"
	"github.com/inferwatch/inferwatch/windowstats"
)

// One model served under two versions, or by two APIs of which one has no
// version (the demo's toy-llm over SSE and over ModelStreamInfer), has a
// window and alerts of its own per version; the demo's rows must tell them
// apart.
func TestDemoRowsNameTheVersion(t *testing.T) {
	start := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	win := func(p99 float64) windowstats.WindowView {
		return windowstats.WindowView{Start: start, Count: 20, QPS: 2, P99: p99}
	}
	rows := windowLines([]windowstats.ModelView{
		{Model: "toy-llm", Previous: win(0.0631)},
		{Model: "toy-llm", Version: "1", Previous: win(0.0644)},
		{Model: "idle", Version: "3"}, // no closed window: no row
	})
	want := [][]string{
		{"MODEL", "VERSION", "WINDOW"},
		{"toy-llm", "-", "12:00:00", "2", "63.10"},
		{"toy-llm", "1", "12:00:00", "2", "64.40"},
	}
	if len(rows) != len(want) {
		t.Fatalf("window rows:\n%s\nwant %d rows", strings.Join(rows, "\n"), len(want))
	}
	for i, w := range want {
		f := strings.Fields(rows[i])
		for j, s := range w {
			if j >= len(f) || (j < 4 && f[j] != s) || (j == 4 && f[6] != s) {
				t.Errorf("row %d = %q, want fields starting %q (P99 %s)", i, rows[i], w[:min(len(w), 4)], w[len(w)-1])
				break
			}
		}
	}

	for _, tc := range []struct {
		labels map[string]string
		want   string
	}{
		{map[string]string{"alertname": "P99OverBaseline", "model": "toy-llm", "version": "1"}, "toy-llm:1"},
		{map[string]string{"alertname": "P99OverBaseline", "model": "toy-llm"}, "toy-llm"},
		{map[string]string{"alertname": "P99OverBaseline", "model": "toy-llm", "version": ""}, "toy-llm"},
	} {
		lines := alertLines([]alerting.Alert{{Labels: tc.labels, State: alerting.StateFiring, StartsAt: start}})
		if f := strings.Fields(lines[0]); len(f) < 3 || f[2] != tc.want {
			t.Errorf("alert line %q: model field %q, want %q", lines[0], f[2], tc.want)
		}
	}
}
