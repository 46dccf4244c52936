package bpf

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/internal/testenv"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(runHelper(os.Getenv(helperEnv)))
	}
	code := m.Run()
	if fixture.dir != "" {
		os.RemoveAll(fixture.dir)
	}
	os.Exit(code)
}

// requireRoot ends a test that loads eBPF when not root: skipped locally,
// failed under CI, which runs as root.
func requireRoot(t testing.TB) {
	t.Helper()
	if runtime.GOARCH != "amd64" {
		testenv.Unavailable(t, "the BPF objects are built for x86-64 only")
	}
	if os.Geteuid() != 0 {
		testenv.Unavailable(t, "loading eBPF needs root")
	}
}

// fixture is the fake CUDA libraries and the test program, built once.
var fixture struct {
	once sync.Once
	dir  string
	err  error
}

func buildFixture(t testing.TB) string {
	t.Helper()
	gcc := testenv.RequireBinary(t, "gcc")
	fixture.once.Do(func() {
		dir, err := os.MkdirTemp("", "bpf-fixture-")
		if err != nil {
			fixture.err = err
			return
		}
		fixture.dir = dir
		// -fno-ipa-icf: identical functions folded into one address would
		// fire each other's probes; -fno-optimize-sibling-calls: the fake
		// runtime calls the driver as the real one does, not as a jump.
		flags := []string{"-O1", "-fno-ipa-icf", "-fno-optimize-sibling-calls", "-Wall", "-Werror"}
		for _, b := range [][]string{
			{"-shared", "-fPIC", "-o", filepath.Join(dir, "libcuda.so.1"), "-Wl,-soname,libcuda.so.1", "testdata/fakecuda.c"},
			{"-shared", "-fPIC", "-o", filepath.Join(dir, "libcudart.so.12"), "-Wl,-soname,libcudart.so.12", "testdata/fakecudart.c", "-ldl"},
			{"-o", filepath.Join(dir, "cudaprog"), "testdata/cudaprog.c", "-ldl", "-lpthread"},
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

// libCopy returns a fresh directory with copies of the fake libraries, so
// that a test may delete them or give them new inodes.
func libCopy(t testing.TB) string {
	t.Helper()
	src := buildFixture(t)
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

// prog is a running cudaprog.
type prog struct {
	t        testing.TB
	cmd      *exec.Cmd
	in       io.WriteCloser
	lines    chan string
	exit     chan error
	stopOnce sync.Once
}

func startProg(t testing.TB, libdir string, args ...string) *prog {
	t.Helper()
	bin := filepath.Join(buildFixture(t), "cudaprog")
	cmd := exec.Command(bin, append([]string{libdir}, args...)...)
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+libdir)
	cmd.Stderr = testWriter{t, "cudaprog: "}
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
	p := &prog{t: t, cmd: cmd, in: in, lines: make(chan string, 16), exit: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
		p.exit <- cmd.Wait()
	}()
	t.Cleanup(p.stop)
	return p
}

func (p *prog) pid() int { return p.cmd.Process.Pid }

// expect waits for the next line and checks its prefix.
func (p *prog) expect(prefix string, timeout time.Duration) string {
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

func (p *prog) send(line string) {
	p.t.Helper()
	if _, err := io.WriteString(p.in, line+"\n"); err != nil {
		p.t.Fatalf("tell cudaprog %q: %v", line, err)
	}
}

// stop closes stdin (the program exits) and waits; a program that does
// not is killed.
func (p *prog) stop() {
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

type testWriter struct {
	t      testing.TB
	prefix string
}

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(w.prefix + strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// pidHolder is the upstream "resolver" of the tests: the PID the test
// says is the upstream now.
type pidHolder struct{ v atomic.Int64 }

func (h *pidHolder) set(pid int) { h.v.Store(int64(pid)) }

func (h *pidHolder) get() ([]int, error) {
	if v := h.v.Load(); v > 0 {
		return []int{int(v)}, nil
	}
	return nil, nil
}

// startProbes starts Probes for a test with fast sampling and rescans.
func startProbes(t testing.TB, o Options) *Probes {
	t.Helper()
	if o.Sample == 0 {
		o.Sample = 100 * time.Millisecond
	}
	if o.Rescan == 0 {
		o.Rescan = 100 * time.Millisecond
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(testWriter{t, ""}, nil))
	}
	p, err := Start(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	if !p.Enabled() {
		t.Fatalf("probes disabled as root: %v", p.Reasons())
	}
	return p
}

func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// settledWindow waits until the samples cover t and returns the window
// from `from` to now. Called with `from` a time before which a sample
// ended and nothing happened, it catches every sample of the activity
// whole, so counters come out exact.
func settledWindow(t testing.TB, p *Probes, from, to time.Time) Facts {
	t.Helper()
	waitFor(t, 3*time.Second, "a sample after the activity", func() bool { return p.Settled(to) })
	return p.Window(from, time.Now())
}

// quiet returns a time after which a sample has ended: activity that
// starts afterwards falls in samples that begin after it.
func quiet(t testing.TB, p *Probes) time.Time {
	t.Helper()
	from := time.Now()
	waitFor(t, 3*time.Second, "a sample boundary", func() bool { return p.Settled(from) })
	return from
}

// target returns the status of pid, if followed.
func targetStatus(p *Probes, pid int) (TargetStatus, bool) {
	for _, s := range p.Targets() {
		if s.PID == pid {
			return s, true
		}
	}
	return TargetStatus{}, false
}

// probedLibs counts pid's libraries with probes on.
func probedLibs(p *Probes, pid int) int {
	s, ok := targetStatus(p, pid)
	if !ok {
		return 0
	}
	n := 0
	for _, l := range s.Libraries {
		if l.Functions > 0 && l.Error == "" {
			n++
		}
	}
	return n
}

// quietLogger drops the probes' log lines (benchmarks).
func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
