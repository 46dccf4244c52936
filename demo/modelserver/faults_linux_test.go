package modelserver

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// rss is the process's resident set size from /proc/self/statm.
func rss(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	f := strings.Fields(string(b))
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		t.Fatalf("parse statm %q: %v", b, err)
	}
	return pages * int64(os.Getpagesize())
}

// leakChildEnv marks the process TestLeakGrowsRSS starts to measure in.
const leakChildEnv = "MODELSERVER_LEAK_CHILD"

// TestLeakGrowsRSS measures in a fresh process: in this one, memory other
// tests freed would be reused by the leak and hide it from RSS.
func TestLeakGrowsRSS(t *testing.T) {
	if os.Getenv(leakChildEnv) != "" {
		measureLeak(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestLeakGrowsRSS$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), leakChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("leak measurement failed: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

func measureLeak(t *testing.T) {
	const rate = 100 << 20
	before, from := rss(t), time.Now()
	s := New(Options{Faults: Faults{LeakBytesPerSec: rate}})
	defer s.Close()
	// A quarter second's worth, whenever a loaded machine gets there (the
	// leak catches up with the rate on each tick); never more than the
	// rate allows since it started.
	for s.LeakedBytes() < rate/4 {
		if time.Since(from) > 10*time.Second {
			t.Fatalf("leaked %d bytes in 10 s at %d/s", s.LeakedBytes(), rate)
		}
		time.Sleep(10 * time.Millisecond)
	}
	leaked := s.LeakedBytes()
	if most := int64(rate * time.Since(from).Seconds()); leaked > most {
		t.Errorf("leaked %d bytes in %v, more than %d/s allows", leaked, time.Since(from), rate)
	}
	grown := rss(t) - before
	if grown < leaked*3/4 {
		t.Errorf("RSS grew %d bytes for %d leaked", grown, leaked)
	}
	t.Logf("leaked %d bytes, RSS grew %d", leaked, grown)
	s.Close()
	if s.LeakedBytes() != 0 {
		t.Errorf("Close kept %d leaked bytes", s.LeakedBytes())
	}
}

func cpuTime(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func TestNeighbourBurnsCPU(t *testing.T) {
	const cpus, window = 0.5, 600 * time.Millisecond
	// Measured from after New: loading the models (weights, warm-up) is
	// CPU of its own.
	s := New(Options{Faults: Faults{NeighbourCPUs: cpus}})
	before, from := cpuTime(t), time.Now()
	time.Sleep(window)
	s.Close()
	// On a shared machine the neighbour may get far less than its target,
	// so the lower bound only proves it burns; the upper one, its duty
	// cycle over the time it really ran (a loaded machine oversleeps).
	target := time.Duration(cpus * float64(window))
	ran := time.Duration(cpus * float64(time.Since(from)))
	if used := cpuTime(t) - before; used < target/10 || used > ran*3/2 {
		t.Errorf("neighbour used %v of CPU in %v, want about %v", used, window, target)
	}
}

func TestNeighbourAfterWaits(t *testing.T) {
	tests := []struct {
		name       string
		after      time.Duration
		wantBurnt  bool
		observeFor time.Duration
	}{
		{"delayed past the observation", 5 * time.Second, false, 400 * time.Millisecond},
		{"started within it", 100 * time.Millisecond, true, 700 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// From after New, as in TestNeighbourBurnsCPU: loading the
			// models is CPU of its own (about 200 ms under -race).
			s := New(Options{Faults: Faults{NeighbourCPUs: 0.5, NeighbourAfter: tc.after}})
			before := cpuTime(t)
			time.Sleep(tc.observeFor)
			s.Close()
			used := cpuTime(t) - before
			// 0.5 cores over the burning part is ~250ms or more; idle, the
			// server costs a few ms.
			if burnt := used > 60*time.Millisecond; burnt != tc.wantBurnt {
				t.Errorf("used %v of CPU in %v, burnt %v, want %v", used, tc.observeFor, burnt, tc.wantBurnt)
			}
		})
	}
}

// neighbourChildEnv makes the test binary a neighbour process (BurnCPU until
// stdin closes), as `inferwatch neighbour` is.
const neighbourChildEnv = "MODELSERVER_NEIGHBOUR_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(neighbourChildEnv) != "" {
		BurnCPU(0.5, StopOnEOF(os.Stdin))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestNeighbourProcess: with NeighbourCommand the CPU is burnt by a child
// process (its time shows in RUSAGE_CHILDREN once reaped, not in ours), and
// Close ends and reaps it.
func TestNeighbourProcess(t *testing.T) {
	childCPU := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
			t.Fatalf("getrusage: %v", err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	t.Setenv(neighbourChildEnv, "1")
	before := childCPU()
	s := New(Options{Faults: Faults{NeighbourCPUs: 0.5, NeighbourCommand: []string{os.Args[0]}}})
	// From after New, as in TestNeighbourBurnsCPU: loading the models is
	// CPU of this process's own (about 200 ms under -race), as much as a
	// loaded machine may leave the neighbour.
	beforeSelf := cpuTime(t)
	time.Sleep(800 * time.Millisecond)
	s.Close()
	child, self := childCPU()-before, cpuTime(t)-beforeSelf
	// 0.5 cores for 0.8 s is 400 ms; a shared machine may give it less.
	if child < 60*time.Millisecond {
		t.Errorf("the neighbour process used %v of CPU (reaped at Close), want about 400ms", child)
	}
	if self > child {
		t.Errorf("this process used %v, the neighbour %v: the burning is not in the child", self, child)
	}
}
