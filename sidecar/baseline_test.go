package sidecar

import (
	"bytes"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/history"
	"github.com/inferwatch/inferwatch/metricset"
	"github.com/inferwatch/inferwatch/windowstats"
)

// The band the engine gets is exported as
// inferwatch_latency_baseline_seconds once the model has one.
func TestBaselineBandGauges(t *testing.T) {
	h, err := history.New(history.Options{Speedup: 60})
	if err != nil {
		t.Fatal(err)
	}
	s := &Sidecar{metrics: metricset.New(metricset.Options{}), history: h}
	t0 := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	var exp float64
	var ok bool
	for i := range 50 * 60 { // 50 hours of history, one minute a window
		q := 100 + 80*math.Sin(2*math.Pi*float64(i)/1440)
		w := windowstats.WindowView{Start: t0.Add(time.Duration(i) * time.Second), Seconds: 1, Count: 500, QPS: q, P99: 0.02 * (1 + q/200)}
		exp, _, ok = s.baselineBand("m", "1", &w)
	}
	if !ok {
		t.Fatal("no band after 50 hours of history")
	}
	var b bytes.Buffer
	s.metrics.Metrics().WritePrometheus(&b)
	for _, bound := range []string{"expected", "lower", "upper"} {
		want := `inferwatch_latency_baseline_seconds{model="m",version="1",bound="` + bound + `"}`
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %s in\n%s", want, b.String())
		}
	}
	for _, line := range strings.Split(b.String(), "\n") {
		if v, found := strings.CutPrefix(line, `inferwatch_latency_baseline_seconds{model="m",version="1",bound="expected"} `); found {
			got, err := strconv.ParseFloat(v, 64)
			if err != nil || math.Abs(got/exp-1) > 1e-6 {
				t.Errorf("expected gauge %q, the band's expected %v", v, exp)
			}
		}
	}
}

// TestBaselineBandGaugesGoWithTheBand: a model the history evicts (or whose
// refit falls back to no seasonal model) has no band; its gauges must go,
// not export a band of 0 s, under which every window is "over baseline".
func TestBaselineBandGaugesGoWithTheBand(t *testing.T) {
	h, err := history.New(history.Options{Speedup: 60, MaxModels: 1})
	if err != nil {
		t.Fatal(err)
	}
	s := &Sidecar{metrics: metricset.New(metricset.Options{}), history: h}
	t0 := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	window := func(i int) windowstats.WindowView {
		q := 100 + 80*math.Sin(2*math.Pi*float64(i)/1440)
		return windowstats.WindowView{Start: t0.Add(time.Duration(i) * time.Second), Seconds: 1, Count: 500, QPS: q, P99: 0.02 * (1 + q/200)}
	}
	var ok bool
	for i := range 50 * 60 {
		w := window(i)
		_, _, ok = s.baselineBand("m", "1", &w)
	}
	if !ok {
		t.Fatal("no band after 50 hours of history")
	}
	w := window(50 * 60)
	s.baselineBand("n", "1", &w) // evicts m
	var b bytes.Buffer
	s.metrics.Metrics().WritePrometheus(&b)
	if strings.Contains(b.String(), `inferwatch_latency_baseline_seconds{model="m"`) {
		t.Errorf("m's band gauges still exported after its eviction:\n%s", b.String())
	}
}
