package bpf

import (
	"context"
	"log/slog"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/bpf/bpftest"
	"github.com/inferwatch/inferwatch/internal/testenv"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(runHelper(os.Getenv(helperEnv)))
	}
	code := m.Run()
	bpftest.RemoveFixture()
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

// The fake CUDA libraries and cudaprog come from bpftest, shared with the
// packages that test through running probes.
type prog = bpftest.Prog

func libCopy(t testing.TB) string { return bpftest.LibCopy(t) }

func startProg(t testing.TB, libdir string, args ...string) *prog {
	t.Helper()
	return bpftest.Start(t, libdir, args...)
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
		o.Logger = slog.New(slog.NewTextHandler(bpftest.Writer(t, ""), nil))
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
