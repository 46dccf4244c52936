package bpf

import (
	"testing"
	"time"
)

// TestSchedRunqueueDelayRises: four threads that mostly sleep, then four
// that spin on a two-core machine. The spinners wait for a CPU most of the
// time; the run-queue delay the probes see must rise accordingly.
func TestSchedRunqueueDelayRises(t *testing.T) {
	requireRoot(t)
	var up pidHolder
	p := startProbes(t, Options{PIDs: up.get})

	pr := startProg(t, "-", "sched", "1200", "1000")
	up.set(pr.PID())
	pr.Expect("idle", 5*time.Second)
	// Leave the first rescan and a sample boundary out of the idle window.
	idleFrom := time.Now().Add(300 * time.Millisecond)
	pr.Expect("busy", 5*time.Second)
	busyFrom := time.Now()
	pr.Expect("end", 5*time.Second)
	end := time.Now()
	waitFor(t, 3*time.Second, "a sample after the end", func() bool { return p.Settled(end) })

	idle := p.Window(idleFrom, busyFrom)
	busy := p.Window(busyFrom.Add(100*time.Millisecond), end)
	if idle.Sched == nil || busy.Sched == nil {
		t.Fatalf("no scheduler facts: idle %+v, busy %+v", idle, busy)
	}
	rate := func(f Facts, from, to time.Time) float64 {
		return f.Sched.RunqueueDelay.Seconds() / to.Sub(from).Seconds()
	}
	idleRate := rate(idle, idleFrom, busyFrom)
	busyRate := rate(busy, busyFrom.Add(100*time.Millisecond), end)
	t.Logf("idle: %+v (%.3f s/s waiting)", *idle.Sched, idleRate)
	t.Logf("busy: %+v (%.3f s/s waiting)", *busy.Sched, busyRate)
	// Four spinners on two cores: about two of them wait at any time,
	// whatever else the machine runs, which raises the idle baseline too.
	if busyRate < idleRate+0.5 || busyRate < 2*idleRate {
		t.Errorf("run-queue delay rose from %.3f to %.3f s/s only, want at least 0.5 s/s more and twice as much", idleRate, busyRate)
	}
	if idle.Sched.OffCPU < 500*time.Millisecond {
		t.Errorf("off-CPU time %v while four threads slept most of %v", idle.Sched.OffCPU, busyFrom.Sub(idleFrom))
	}
}
