package alerting

import (
	"strings"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/windowstats"
)

func windowstatsOptions(w time.Duration) windowstats.Options {
	return windowstats.Options{Window: w, View: 3 * w}
}

func TestConfigOverridesAndValidation(t *testing.T) {
	c := Config{
		Defaults: Thresholds{P99Factor: 1.5, HoldDown: 3},
		Models: map[string]Thresholds{
			"bert large": {SLA: 80 * time.Millisecond, P99For: 5},
		},
	}
	def, models, err := c.resolved()
	if err != nil {
		t.Fatal(err)
	}
	if def.P99Factor != 1.5 || def.HoldDown != 3 || def.SLAFactor != 1.2 || def.SLA != 0 || def.P99For != 3 {
		t.Errorf("defaults %+v", def)
	}
	m, ok := models["bert_large"] // keyed as window statistics name it
	if !ok || m.SLA != 80*time.Millisecond || m.P99For != 5 || m.P99Factor != 1.5 || m.HoldDown != 3 || m.StdDevJump != 0.5 {
		t.Errorf("override %+v (found %v)", m, ok)
	}
	for _, tc := range []struct {
		c    Config
		want string
	}{
		{Config{Defaults: Thresholds{P99Factor: 0.9}}, "p99_factor"},
		{Config{Defaults: Thresholds{SLA: -time.Second}}, "sla"},
		{Config{Defaults: Thresholds{BaselineMin: 40}}, "baseline_min"},
		{Config{Defaults: Thresholds{Disabled: []string{"Nope"}}}, "disabled"},
		{Config{Models: map[string]Thresholds{"x": {HoldDown: -1}}}, `model "x": hold_down`},
		// Two keys that name one model once sanitised: one would win at random.
		{Config{Models: map[string]Thresholds{"bert large": {P99For: 5}, "bert+large": {P99For: 2}}}, `models "bert large" and "bert+large": both name the model "bert_large"`},
	} {
		_, _, err := tc.c.resolved()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one naming %q", tc.c, err, tc.want)
		}
	}
	if _, err := NewEngine(Options{Stats: windowstats.Options{Accuracy: 2}}); err == nil || !strings.Contains(err.Error(), "window statistics") {
		t.Errorf("bad stats options: %v", err)
	}
}

func TestMachine(t *testing.T) {
	const B, C, U = breach, clear, unknown
	for _, tc := range []struct {
		name     string
		forN     int
		hold     int
		verdicts []verdict
		want     []transition
	}{
		{"fires on the third", 3, 2, []verdict{B, B, B, B}, []transition{toPending, none, toFiring, none}},
		{"broken streak drops", 3, 2, []verdict{B, B, C, B}, []transition{toPending, none, dropped, toPending}},
		{"unknown holds a streak", 3, 2, []verdict{B, U, B, B}, []transition{toPending, none, none, toFiring}},
		{"for 1 fires at once", 1, 2, []verdict{B}, []transition{toFiring}},
		{"one clear window does not resolve", 1, 2, []verdict{B, C, B, C, C}, []transition{toFiring, none, none, none, toResolved}},
		{"unknown while firing holds (too few calls to judge)", 1, 2, []verdict{B, U, U, C, C}, []transition{toFiring, none, none, none, toResolved}},
		{"fires again after resolving", 1, 1, []verdict{B, C, B}, []transition{toFiring, toResolved, toFiring}},
	} {
		var m machine
		for i, v := range tc.verdicts {
			if got := m.step(v, tc.forN, tc.hold); got != tc.want[i] {
				t.Errorf("%s: step %d: %v, want %v", tc.name, i, got, tc.want[i])
			}
		}
	}
}

func TestReference(t *testing.T) {
	r := reference{n: 5, adapt: 3}
	for _, x := range []float64{1, 2, 3, 4, 5, 6} {
		r.push(x, false)
	}
	if m := r.median(); m != 4 { // of 2..6
		t.Fatalf("median %v", m)
	}
	// A streak is held out ...
	for range 3 {
		r.push(100, true)
	}
	if m := r.median(); m != 4 {
		t.Fatalf("median during a streak %v", m)
	}
	// ... until it outlasts adapt windows.
	for range 3 {
		r.push(100, true)
	}
	if m := r.median(); m != 100 {
		t.Fatalf("median after a lasting change %v", m)
	}
	r.push(7, false)
	if len(r.streak) != 0 {
		t.Fatal("streak kept after a clear window")
	}
}
