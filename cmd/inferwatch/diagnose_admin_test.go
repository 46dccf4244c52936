package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// TestDiagnoseFlagsFromVariables: as every command's -h says, diagnose's
// flags can be given as INFERWATCH_* variables (INFERWATCH_ADMIN as for
// `inferwatch traces`); they were ignored.
func TestDiagnoseFlagsFromVariables(t *testing.T) {
	admin := fakeAdmin(t)
	t.Setenv("INFERWATCH_ADMIN", admin.URL)
	t.Setenv("INFERWATCH_FROM", "5m")
	var out bytes.Buffer
	if err := runDiagnose([]string{"--timeout", "5s"}, &out, io.Discard); err != nil {
		t.Fatalf("diagnose with INFERWATCH_ADMIN=%s INFERWATCH_FROM=5m: %v", admin.URL, err)
	}
	if !strings.Contains(out.String(), "1. cpu_throttling") {
		t.Errorf("output:\n%s", out.String())
	}
}
