package tracing

import (
	"time"

	"github.com/inferwatch/inferwatch/record"
)

// HostSource gives a finished call the GPU and kernel facts of its window
// (gpu/ and bpf/, joined by the sidecar). Those are sampled every 250 ms to
// 1 s, so when a call ends the samples covering its last stretch do not
// exist yet: joined at once, a 10 ms call would find none. The tracer holds
// each kept call until Settled says samples up to its end exist, or
// Config.HostWait passes, and only then joins and builds its spans.
type HostSource interface {
	// Settled reports whether the samples taken so far cover t.
	Settled(t time.Time) bool
	// ForCall returns the facts of c's window, nil when nothing observed it.
	ForCall(c *record.Call) *record.HostFacts
}

// DefaultHostWait bounds how long a kept trace waits for host samples.
const DefaultHostWait = 2 * time.Second

// settlePoll is how often a waiting trace asks whether its samples exist.
const settlePoll = 20 * time.Millisecond

// pending is a kept call waiting for its host samples.
type pending struct {
	c      *record.Call
	reason string
}

// settleLoop joins kept calls to their host facts in arrival order, each
// once its samples exist, and hands them on. Calls end in nearly the order
// they arrive, so waiting on the head holds nobody back for long.
func (t *Tracer) settleLoop() {
	defer close(t.settleDone)
	tick := time.NewTicker(settlePoll)
	defer tick.Stop()
	for p := range t.settle {
		end := p.c.Start.Add(p.c.End)
		deadline := end.Add(t.hostWait)
	wait:
		for !t.host.Settled(end) && time.Now().Before(deadline) {
			select {
			case <-tick.C:
			case <-t.closing: // closing: join what has been sampled
				break wait
			}
		}
		t.emit(p.c, p.reason, t.host.ForCall(p.c))
	}
}
