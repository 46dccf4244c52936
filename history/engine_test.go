package history

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/alerting"
	"github.com/inferwatch/inferwatch/record"
)

// Two alert engines see the same calls: two compressed days of a daily
// load cycle in which latency follows load, then a traffic surge at a quiet
// hour. The engine with only the trailing median fires P99OverBaseline on
// the surge's load-proportional rise; the one with the seasonal baseline
// switched to it after two cycles and does not, yet fires on a real +80%.
func TestEngineSwitchesToSeasonalAndIgnoresLoadRise(t *testing.T) {
	const window = 10 * time.Second
	const speedup = 12 // a window is two minutes of history
	h, err := New(Options{Speedup: speedup})
	if err != nil {
		t.Fatal(err)
	}
	newEngine := func(withBaseline bool) *alerting.Engine {
		o := alerting.Options{}
		o.Stats.Window = window
		if withBaseline {
			o.Baseline = h.Baseline
		}
		e, err := alerting.NewEngine(o)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	trailing, seasonal := newEngine(false), newEngine(true)
	rng := rand.New(rand.NewPCG(3, 4))
	start := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	fired := map[*alerting.Engine]int{}
	step := func(k int, u, mult float64) {
		ws := start.Add(time.Duration(k) * window)
		n := int(40 * u * window.Seconds()) // up to 40 QPS
		for i := range n {
			end := ws.Add(time.Duration(i) * window / time.Duration(n))
			up := time.Duration(float64(20*time.Millisecond) * (1 + u*u) * mult * math.Exp(0.1*rng.NormFloat64()))
			c := &record.Call{Model: "m", Version: "1", Protocol: record.ProtocolGRPC, Code: "OK"}
			c.FirstByte = up
			c.ResponseEnd = up + time.Millisecond
			c.End = c.ResponseEnd + 10*time.Microsecond
			c.Start = end.Add(-c.End)
			trailing.Observe(c)
			seasonal.Observe(c)
		}
		for _, e := range []*alerting.Engine{trailing, seasonal} {
			e.Tick(context.Background(), ws.Add(window))
			for _, a := range e.Alerts() {
				if a.Labels["alertname"] == alerting.RuleP99OverBaseline && a.State == alerting.StateFiring {
					fired[e]++
				}
			}
		}
	}
	// The daily cycle in history time, with traffic that varies from one
	// half hour to the next (as traffic does), so that load and time of day
	// are not the same regressor.
	jitter := map[int]float64{}
	load := func(k int) float64 {
		hh := math.Mod(float64(k)*window.Seconds()*speedup/3600, 24)
		b := k / 15
		if _, ok := jitter[b]; !ok {
			jitter[b] = 0.75 + 0.5*rng.Float64()
		}
		return min(1, (0.3+0.7*math.Pow(0.5-0.5*math.Cos(2*math.Pi*(hh-3)/24), 1.4))*jitter[b])
	}
	day := int(24 * time.Hour / (window * speedup))
	k := 0
	for ; k < 2*day+day/8; k++ { // two days and three hours: past 03:00 on day 3
		step(k, load(k), 1)
	}
	if got := h.ModelKind("m", "1"); got != "daily" {
		t.Fatalf("model kind %q after two days of history, want daily", got)
	}
	before := map[*alerting.Engine]int{trailing: fired[trailing], seasonal: fired[seasonal]}
	// A surge: traffic from the night's low to the afternoon's peak at once,
	// for twenty windows; latency rises with it, as it does every afternoon.
	for range 20 {
		step(k, 1, 1)
		k++
	}
	for range 20 {
		step(k, load(k), 1)
		k++
	}
	t.Logf("firing windows on the surge: trailing %d, seasonal %d", fired[trailing]-before[trailing], fired[seasonal]-before[seasonal])
	if fired[trailing] == before[trailing] {
		t.Fatal("the trailing median did not fire on the surge: the test shows nothing")
	}
	if fired[seasonal] != before[seasonal] {
		t.Fatalf("the seasonal baseline fired %d windows on a load-proportional rise", fired[seasonal]-before[seasonal])
	}
	// A real regression (+80%) at the same load still fires.
	for range 10 {
		step(k, load(k), 1.8)
		k++
	}
	if fired[seasonal] == before[seasonal] {
		t.Fatal("the seasonal baseline did not fire on +80%")
	}
}
