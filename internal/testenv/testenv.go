// Package testenv holds what the project's tests need from the machine:
// real binaries (VictoriaMetrics, Prometheus, nginx, ...) and free loopback
// ports. A missing binary skips a test on a developer's machine but fails it
// in CI (CI=true), because a skipped suite is not a pass.
package testenv

import (
	"net"
	"os"
	"os/exec"
	"testing"
)

// RequireBinary returns the path of the named executable, or ends the test:
// skipped locally, failed under CI.
func RequireBinary(t testing.TB, names ...string) string {
	t.Helper()
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	Unavailable(t, "none of %v is installed (.ci/run installs it)", names)
	return ""
}

// Unavailable skips the test, or fails it when running under CI.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("required by CI: "+format, args...)
	}
	t.Skipf(format, args...)
}

// FreeAddr returns a loopback address with a port that was free a moment ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("reserve a port: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}
