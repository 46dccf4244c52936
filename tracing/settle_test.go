package tracing

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/record"
)

// fakeHost is a HostSource whose samples reach up to a time the test sets.
type fakeHost struct {
	mu      sync.Mutex
	until   time.Time
	joined  []time.Time // the sample horizon at each ForCall
	runqDel time.Duration
}

func (h *fakeHost) Settled(t time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.until.Before(t)
}

func (h *fakeHost) ForCall(c *record.Call) *record.HostFacts {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.joined = append(h.joined, h.until)
	end := c.Start.Add(c.End)
	cov := 1.0
	if h.until.Before(end) {
		cov = max(0, float64(h.until.Sub(c.Start))/float64(c.End))
	}
	return &record.HostFacts{Sched: true, RunqueueDelay: h.runqDel, Coverage: cov}
}

func (h *fakeHost) sampleUntil(t time.Time) {
	h.mu.Lock()
	h.until = t
	h.mu.Unlock()
}

// waitTraces polls the store until it holds n traces or d passes.
func waitTraces(tr *Tracer, n int, d time.Duration) []Trace {
	deadline := time.Now().Add(d)
	for {
		got := tr.Traces(0, "")
		if len(got) >= n || time.Now().After(deadline) {
			return got
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestHostFactsWaitForSamples checks that a kept call's spans are built
// once the host samples cover its end, with the facts then joined; that a
// call whose samples never come is built after HostWait with what there
// is; and that Close does not wait for samples.
func TestHostFactsWaitForSamples(t *testing.T) {
	newCall := func(end time.Time) *record.Call {
		c := seedCall()
		c.Start = end.Add(-c.End)
		return c
	}
	t.Run("settled", func(t *testing.T) {
		h := &fakeHost{runqDel: 3 * time.Millisecond}
		tr, err := newTracer(Config{Host: h, HostWait: time.Minute}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close(context.Background())
		end := time.Now()
		tr.Observe(newCall(end))
		if got := waitTraces(tr, 1, 100*time.Millisecond); len(got) != 0 {
			t.Fatalf("trace built before its samples exist: %+v", got)
		}
		h.sampleUntil(end.Add(time.Millisecond))
		got := waitTraces(tr, 1, 5*time.Second)
		if len(got) != 1 {
			t.Fatalf("trace not built once its samples exist")
		}
		a := got[0].Spans[0].Attributes
		if a["inference.sched.runqueue_delay_ms"] != 3.0 || a["inference.host.coverage"] != 1.0 {
			t.Errorf("call span's host attributes: %v", a)
		}
		if len(h.joined) != 1 || h.joined[0].Before(end) {
			t.Errorf("joined with samples up to %v, the call ended at %v", h.joined, end)
		}
	})
	t.Run("never settled", func(t *testing.T) {
		h := &fakeHost{}
		tr, err := newTracer(Config{Host: h, HostWait: 150 * time.Millisecond}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close(context.Background())
		tr.Observe(newCall(time.Now()))
		got := waitTraces(tr, 1, 5*time.Second)
		if len(got) != 1 {
			t.Fatal("trace not built after HostWait")
		}
		if cov := got[0].Spans[0].Attributes["inference.host.coverage"]; cov != 0.0 {
			t.Errorf("coverage %v, want 0: no samples covered the call", cov)
		}
	})
	t.Run("close does not wait", func(t *testing.T) {
		h := &fakeHost{}
		tr, err := newTracer(Config{Host: h, HostWait: time.Hour}, nil)
		if err != nil {
			t.Fatal(err)
		}
		tr.Observe(newCall(time.Now()))
		start := time.Now()
		if err := tr.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		// A Close that waited would take the hour; the bound is a loaded
		// machine's slack, not how fast Close is.
		if d := time.Since(start); d > 30*time.Second {
			t.Errorf("Close took %v", d)
		}
		if got := tr.Traces(0, ""); len(got) != 1 {
			t.Errorf("%d traces after Close, want the waiting one built", len(got))
		}
	})
}

// TestObserveMarksKept checks that the tracer marks exactly the calls whose
// traces it keeps, so that later sinks (the alert engine's slow calls) link
// only to traces that exist.
func TestObserveMarksKept(t *testing.T) {
	tr, _ := newTracer(Config{Sampler: &fakeSampler{tail: map[string]string{"resnet50": "slow"}}}, nil)
	defer tr.Close(context.Background())
	notKept := slowHTTPCall()
	notKept.Model = "other"
	untraced := seedCall()
	untraced.TraceID = [16]byte{}
	for _, tc := range []struct {
		name string
		c    *record.Call
		want bool
	}{
		{"head-sampled", seedCall(), true},
		{"kept by a tail rule", slowHTTPCall(), true},
		{"neither", notKept, false},
		{"no trace context", untraced, false},
	} {
		tr.Observe(tc.c)
		if tc.c.TraceKept != tc.want {
			t.Errorf("%s: TraceKept %v, want %v", tc.name, tc.c.TraceKept, tc.want)
		}
	}
}
