// Package testenv holds what the project's tests need from the machine:
// real binaries (VictoriaMetrics, Prometheus, nginx, ...) and free loopback
// ports. A missing binary skips a test on a developer's machine but fails it
// in CI (CI=true), because a skipped suite is not a pass.
package testenv

import (
	"bytes"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
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

// ToolBinary returns the path of a program .ci/run builds into <repo>/bin
// from a tools module of its own (tools/README.md): $env when set, else
// <repoRoot>/bin/<name>, repoRoot being the repository's path from the
// test's directory. Missing, the test is skipped locally and fails under
// CI; build says how to build it.
func ToolBinary(t testing.TB, repoRoot, name, env, build string) string {
	t.Helper()
	p := os.Getenv(env)
	if p == "" {
		p, _ = filepath.Abs(filepath.Join(repoRoot, "bin", name))
	}
	if _, err := os.Stat(p); err != nil {
		Unavailable(t, "no %s at %s (%s; or set %s): %v", name, p, build, env, err)
	}
	return p
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

// Process is a service a test started.
type Process struct {
	Cmd  *exec.Cmd
	logs bytes.Buffer
	done chan struct{}
}

// Start runs bin with args and stops it when the test ends (interrupt, then
// kill after 10 s); its output is logged if the test failed.
func Start(t testing.TB, bin string, args ...string) *Process {
	t.Helper()
	p := &Process{Cmd: exec.Command(bin, args...), done: make(chan struct{})}
	p.Cmd.Stdout, p.Cmd.Stderr = &p.logs, &p.logs
	if err := p.Cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	go func() { p.Cmd.Wait(); close(p.done) }() // exit status after a signal is expected
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("%s output:\n%s", filepath.Base(bin), p.logs.String())
		}
	})
	return p
}

// Stop interrupts the process and waits for it, killing it after 10 s.
func (p *Process) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	p.Cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.Cmd.Process.Kill()
		<-p.done
	}
}

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// WaitHTTP polls url until it answers 200, failing the test after timeout
// or if p (when not nil) exits first.
func WaitHTTP(t testing.TB, p *Process, url string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if p != nil && p.Exited() {
			t.Fatalf("%s exited before %s answered:\n%s", p.Cmd.Path, url, p.logs.String())
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer 200 within %v", url, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
