package main

import (
	"strings"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/demo/modelserver"
	"github.com/inferwatch/inferwatch/windowstats"
)

// TestDemoFaultLine: the demo's header names every fault it injects, as
// it is. --inject-step-at was never named ("faults: none" above a table
// whose latency had stepped up), --neighbour-after was named as running
// from the start, and a leak under 1 KiB/s read "leak 0 KiB/s".
func TestDemoFaultLine(t *testing.T) {
	start := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name            string
		f               modelserver.Faults
		base, at, extra time.Duration
		want            []string
	}{
		{name: "none", want: []string{"faults: none"}},
		{name: "step", at: 2 * time.Minute, extra: 10 * time.Millisecond, want: []string{"degradation +10ms (mean) from 12:02:00"}},
		{name: "base latency", base: 20 * time.Millisecond, want: []string{"base latency +20ms"}},
		{name: "leak", f: modelserver.Faults{LeakBytesPerSec: 512}, want: []string{"leak 512 B/s"}},
		{name: "leak MiB", f: modelserver.Faults{LeakBytesPerSec: 1 << 20}, want: []string{"leak 1 MiB/s"}},
		{name: "late neighbour", f: modelserver.Faults{NeighbourCPUs: 1, NeighbourAfter: time.Minute}, want: []string{"CPU neighbour 1.0 cores from 12:01:00"}},
		{name: "neighbour", f: modelserver.Faults{NeighbourCPUs: 1.5}, want: []string{"CPU neighbour 1.5 cores;"}},
		{name: "spike", f: modelserver.Faults{SpikeEvery: 3 * time.Minute, SpikeFor: 45 * time.Second, SpikeExtra: 50 * time.Millisecond},
			want: []string{"spike +50ms for 45s every 3m0s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := describeFaults(tc.f, tc.base, tc.at, tc.extra, start)
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("fault line %q lacks %q", got, w)
				}
			}
			if tc.name != "none" && strings.Contains(got, "none") {
				t.Errorf("fault line %q says none", got)
			}
		})
	}
}

// TestDemoLoadLine: the header states the rates asked for: --qps 0.5 read
// "load 0 QPS", and --llm-qps 0 still announced "+ 0 LLM generations/s
// (SSE + ModelStreamInfer)" though none were sent.
func TestDemoLoadLine(t *testing.T) {
	for _, tc := range []struct {
		qps, llm float64
		want     []string
		not      []string
	}{
		{qps: 200, llm: 4, want: []string{"load 200 QPS open-loop", "+ 4 LLM generations/s"}},
		{qps: 0.5, llm: 0.25, want: []string{"load 0.5 QPS", "+ 0.25 LLM generations/s"}},
		{qps: 50, llm: 0, want: []string{"load 50 QPS"}, not: []string{"LLM"}},
	} {
		got := loadLine(tc.qps, tc.llm, 0)
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("load line %q lacks %q", got, w)
			}
		}
		for _, n := range tc.not {
			if strings.Contains(got, n) {
				t.Errorf("load line %q holds %q", got, n)
			}
		}
	}
}

// TestDemoWindowQPS: a model called under 1/s (toy-llm at --llm-qps 1 is
// 0.5/s per API) showed QPS 0 in the window rows, as if it had no calls.
func TestDemoWindowQPS(t *testing.T) {
	start := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	rows := windowLines([]windowstats.ModelView{
		{Model: "toy-llm", Version: "1", Previous: windowstats.WindowView{Start: start, Count: 5, QPS: 0.5, P99: 0.06}},
		{Model: "mnist-mlp", Version: "1", Previous: windowstats.WindowView{Start: start, Count: 1500, QPS: 150, P99: 0.003}},
	})
	for i, want := range []string{"0.5", "150"} {
		if f := strings.Fields(rows[i+1]); len(f) < 4 || f[3] != want {
			t.Errorf("row %q: QPS field %q, want %q", rows[i+1], f[3], want)
		}
	}
	if len(rows[1]) != len(rows[2]) || len(rows[0]) != len(rows[1]) {
		t.Errorf("rows not aligned:\n%s", strings.Join(rows, "\n"))
	}
}

// TestDemoLoadLineSkipped: calls the load generator skipped (due while its
// in-flight bound was reached, as a slow server makes happen) are named in
// the header; the table's QPS fell below the header's "load 200 QPS" with
// nothing saying why.
func TestDemoLoadLineSkipped(t *testing.T) {
	if got := loadLine(200, 4, 0); strings.Contains(got, "skipped") {
		t.Errorf("load line %q names skipped calls, none were", got)
	}
	if got := loadLine(200, 4, 1234); !strings.Contains(got, "1234 calls skipped") {
		t.Errorf("load line %q does not name the 1234 skipped calls", got)
	}
}

// TestDemoWindowRowsAligned: the window rows stay under their headings
// whatever the model's name; a name over 10 characters (a caller's own
// model through the demo's sidecar, or a repository model) pushed its row's
// figures right of the headings.
func TestDemoWindowRowsAligned(t *testing.T) {
	start := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	w := windowstats.WindowView{Start: start, Count: 50, QPS: 5, P99: 0.06}
	rows := windowLines([]windowstats.ModelView{
		{Model: "mnist-mlp", Version: "1", Previous: w},
		{Model: "resnet50-imagenet-int8", Version: "12", Previous: w},
	})
	for _, r := range rows[1:] {
		if len(r) != len(rows[0]) {
			t.Fatalf("rows not aligned:\n%s", strings.Join(rows, "\n"))
		}
	}
	if p := strings.Index(rows[0], "P99 "); p < 0 || !strings.HasSuffix(strings.TrimRight(rows[2][:p+3], " "), "60.00") {
		t.Errorf("P99 of the long-named row not under its heading:\n%s", strings.Join(rows, "\n"))
	}
}
