package main

import (
	"flag"
	"io"
	"maps"
	"os"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/internal/cmdline"
)

// TestDemoSLAFlag: the demo's --sla takes a duration (mnist-mlp's) or
// proxy's model=duration pairs, from the flag or INFERWATCH_SLA, which
// README sets in proxy's form: read as a plain duration, that variable
// stopped `inferwatch demo` from starting.
func TestDemoSLAFlag(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name, env string
		args      []string
		want      map[string]time.Duration
		bad       bool
	}{
		{name: "default", want: map[string]time.Duration{"mnist-mlp": 25 * ms}},
		{name: "a duration", args: []string{"--sla", "40ms"}, want: map[string]time.Duration{"mnist-mlp": 40 * ms}},
		{name: "pairs", args: []string{"--sla", "echo=5ms", "--sla", "mnist-mlp=50ms"}, want: map[string]time.Duration{"echo": 5 * ms, "mnist-mlp": 50 * ms}},
		{name: "README's variable", env: "mnist-mlp=50ms,bert=200ms", want: map[string]time.Duration{"mnist-mlp": 50 * ms, "bert": 200 * ms}},
		{name: "not a duration", args: []string{"--sla", "fast"}, bad: true},
		{name: "no model", args: []string{"--sla", "=5ms"}, bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("INFERWATCH_SLA", tc.env) // restored after
			if tc.env == "" {
				os.Unsetenv("INFERWATCH_SLA")
			}
			fs := flag.NewFlagSet("demo", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			sla := &demoSLA{m: map[string]time.Duration{"mnist-mlp": 25 * ms}}
			fs.Var(sla, "sla", "")
			err := cmdline.Parse(fs, tc.args)
			if (err != nil) != tc.bad {
				t.Fatalf("err %v, want an error %v", err, tc.bad)
			}
			if !tc.bad && !maps.Equal(sla.m, tc.want) {
				t.Errorf("SLAs %v, want %v", sla.m, tc.want)
			}
		})
	}
}
