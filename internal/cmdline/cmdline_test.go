package cmdline

import (
	"flag"
	"fmt"
	"io"
	"testing"
)

// A name=value flag is repeatable: its INFERWATCH_* variable holds the
// pairs comma-separated, as README's INFERWATCH_SLA=mnist-mlp=50ms,bert=200ms.
func TestLabelsFromVariable(t *testing.T) {
	t.Setenv("INFERWATCH_SLA", "mnist-mlp=50ms, bert=200ms")
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	slas := Labels{}
	fs.Var(slas, "sla", "model=duration")
	if err := Parse(fs, nil); err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(map[string]string(slas)), "map[bert:200ms mnist-mlp:50ms]"; got != want {
		t.Fatalf("--sla from INFERWATCH_SLA = %s, want %s", got, want)
	}
}
