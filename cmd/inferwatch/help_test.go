package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestHelpExitsZero: `inferwatch COMMAND -h` (README: "go run
// ./cmd/inferwatch demo -h lists them all") prints the flags and exits 0,
// without an error line: asking for help is not a failure.
func TestHelpExitsZero(t *testing.T) {
	for _, c := range []string{"proxy", "demo", "modelserver", "load", "traces", "diagnose", "detect", "baseline", "extproc", "inject"} {
		t.Run(c, func(t *testing.T) {
			out, err := exec.Command(binPath, c, "-h").CombinedOutput()
			if err != nil {
				t.Errorf("inferwatch %s -h: %v", c, err)
			}
			if strings.Contains(string(out), "help requested") || !strings.Contains(string(out), "-") {
				t.Errorf("inferwatch %s -h printed:\n%s", c, out)
			}
		})
	}
}
