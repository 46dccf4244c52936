// Package bpftest builds and runs the programs the eBPF probes are tested
// against: fake CUDA libraries (libcuda.so.1, libcudart.so.12) and
// cudaprog, which loads them and makes known CUDA calls on command
// (bpf/testdata). Package bpf's tests use it, and so do packages that test
// through running probes (the sidecar's device-memory leak watch). It is
// for tests only: it needs gcc, and fails a test that cannot build.
package bpftest

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/internal/testenv"
)

// fixture is the fake CUDA libraries and the test program, built once a
// process.
var fixture struct {
	once sync.Once
	dir  string
	err  error
}

// testdata is bpf/testdata, found from this file's place in the source.
func testdata() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "testdata")
}

// Fixture builds the fake libraries and cudaprog (once) and returns their
// directory.
func Fixture(t testing.TB) string {
	t.Helper()
	gcc := testenv.RequireBinary(t, "gcc")
	fixture.once.Do(func() {
		dir, err := os.MkdirTemp("", "bpf-fixture-")
		if err != nil {
			fixture.err = err
			return
		}
		fixture.dir = dir
		src := testdata()
		// -fno-ipa-icf: identical functions folded into one address would
		// fire each other's probes; -fno-optimize-sibling-calls: the fake
		// runtime calls the driver as the real one does, not as a jump.
		flags := []string{"-O1", "-fno-ipa-icf", "-fno-optimize-sibling-calls", "-Wall", "-Werror"}
		for _, b := range [][]string{
			{"-shared", "-fPIC", "-o", filepath.Join(dir, "libcuda.so.1"), "-Wl,-soname,libcuda.so.1", filepath.Join(src, "fakecuda.c")},
			{"-shared", "-fPIC", "-o", filepath.Join(dir, "libcudart.so.12"), "-Wl,-soname,libcudart.so.12", filepath.Join(src, "fakecudart.c"), "-ldl"},
			{"-o", filepath.Join(dir, "cudaprog"), filepath.Join(src, "cudaprog.c"), "-ldl", "-lpthread"},
		} {
			out, err := exec.Command(gcc, append(flags, b...)...).CombinedOutput()
			if err != nil {
				fixture.err = fmt.Errorf("gcc %v: %v\n%s", b, err, out)
				return
			}
		}
	})
	if fixture.err != nil {
		t.Fatal(fixture.err)
	}
	return fixture.dir
}

// RemoveFixture deletes what Fixture built; a TestMain calls it last.
func RemoveFixture() {
	if fixture.dir != "" {
		os.RemoveAll(fixture.dir)
	}
}

// LibCopy returns a fresh directory with copies of the fake libraries, so
// that a test may delete them or give them new inodes.
func LibCopy(t testing.TB) string {
	t.Helper()
	src := Fixture(t)
	dir := t.TempDir()
	for _, n := range []string{"libcuda.so.1", "libcudart.so.12"} {
		b, err := os.ReadFile(filepath.Join(src, n))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, n), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// Prog is a running cudaprog. Its modes and commands are in the head of
// bpf/testdata/cudaprog.c.
type Prog struct {
	t        testing.TB
	cmd      *exec.Cmd
	in       io.WriteCloser
	lines    chan string
	exit     chan error
	stopOnce sync.Once
}

// Start runs cudaprog with the libraries of libdir; the test's cleanup
// stops it.
func Start(t testing.TB, libdir string, args ...string) *Prog {
	t.Helper()
	bin := filepath.Join(Fixture(t), "cudaprog")
	cmd := exec.Command(bin, append([]string{libdir}, args...)...)
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+libdir)
	cmd.Stderr = Writer(t, "cudaprog: ")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &Prog{t: t, cmd: cmd, in: in, lines: make(chan string, 16), exit: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
		p.exit <- cmd.Wait()
	}()
	t.Cleanup(p.Stop)
	return p
}

// PID is the program's process ID.
func (p *Prog) PID() int { return p.cmd.Process.Pid }

// Expect waits for the next line and checks its prefix.
func (p *Prog) Expect(prefix string, timeout time.Duration) string {
	p.t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			p.t.Fatalf("cudaprog exited while the test waited for %q", prefix)
		}
		if !strings.HasPrefix(l, prefix) {
			p.t.Fatalf("cudaprog said %q, want %q", l, prefix)
		}
		return l
	case <-time.After(timeout):
		p.t.Fatalf("cudaprog did not say %q within %v", prefix, timeout)
	}
	return ""
}

// Send writes one command line.
func (p *Prog) Send(line string) {
	p.t.Helper()
	if _, err := io.WriteString(p.in, line+"\n"); err != nil {
		p.t.Fatalf("tell cudaprog %q: %v", line, err)
	}
}

// Wait waits up to timeout for the program to end by itself (killed, say)
// and says how it ended.
func (p *Prog) Wait(timeout time.Duration) (exited bool, err error) {
	select {
	case err := <-p.exit:
		p.exit <- err // for Stop
		return true, err
	case <-time.After(timeout):
		return false, nil
	}
}

// Stop closes stdin (the program exits) and waits; a program that does
// not is killed.
func (p *Prog) Stop() {
	p.stopOnce.Do(func() {
		p.in.Close()
		select {
		case <-p.exit:
		case <-time.After(5 * time.Second):
			p.cmd.Process.Kill()
			<-p.exit
		}
	})
}

// Writer logs each write to t, a line at a time, after prefix.
func Writer(t testing.TB, prefix string) io.Writer { return testWriter{t, prefix} }

type testWriter struct {
	t      testing.TB
	prefix string
}

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(w.prefix + strings.TrimRight(string(b), "\n"))
	return len(b), nil
}
