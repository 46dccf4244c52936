package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// TestDetectUsage: detect's usage says what it reads and writes (the
// SERIES.csv argument, --dir), on -h and on a missing argument; the
// shared flag parsing replaced it with the bare flag list.
func TestDetectUsage(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {}} {
		var stderr bytes.Buffer
		if err := runDetect(args, io.Discard, &stderr); err == nil {
			t.Errorf("detect %v: no error", args)
		}
		for _, want := range []string{"usage: inferwatch detect [flags] SERIES.csv", "--dir DIR --out-dir OUT", "-min-excess", "INFERWATCH_"} {
			if !strings.Contains(stderr.String(), want) {
				t.Errorf("detect %v: usage lacks %q:\n%s", args, want, stderr.String())
			}
		}
	}
}
