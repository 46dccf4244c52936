package alerting

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/record"
)

// spikeP99 runs the P99 spike of TestP99SpikeFiresAfterThreeConsecutiveWindows
// (windows 12–16) and returns the P99OverBaseline firing notification.
func spikeP99(t *testing.T, s *sim) Alert {
	t.Helper()
	const from = 12
	for k := range from + 6 {
		gen := steady
		if k >= from && k < from+5 {
			gen = tailSpike
		}
		s.window(1000, gen)
	}
	notes := s.rec.of(RuleP99OverBaseline)
	if len(notes) == 0 || notes[0].alert.State != StateFiring || notes[0].window != from+2 {
		t.Fatalf("P99OverBaseline notifications %+v, want firing at %d", notes, from+2)
	}
	a := notes[0].alert
	if a.Snapshot == nil || !a.Snapshot.Current.Start.Equal(t0.Add(from*window)) || !a.Snapshot.Previous.Start.Equal(t0.Add((from-1)*window)) {
		t.Fatalf("snapshot %+v, want window %d against %d", a.Snapshot, from, from-1)
	}
	return a
}

func f64(v float64) *float64 { return &v }
func u64p(v uint64) *uint64  { return &v }

// The snapshot carries the host facts of its own two windows' spans, taken
// when the alert went pending (window 12) and kept when it fired (14); a
// group the source did not observe stays absent, in the JSON and in the
// annotation, and is never shown as zero.
func TestSnapshotHostFacts(t *testing.T) {
	// Each window's facts are marked with its index k: k ms/s of run-queue
	// delay, so a mix-up of the windows shows.
	idx := func(from time.Time) int { return int(from.Sub(t0) / window) }
	tests := []struct {
		name string
		host func(k int, seconds float64) *HostBreakdown // nil: no source
		// What the snapshot must hold, per window (11 previous, 12 current).
		wantHost       bool
		wantGroups     []string // JSON keys of the current window's host
		wantAnnotation string   // "" for none
	}{
		{
			name:           "no source",
			wantAnnotation: "",
		},
		{
			name: "scheduler and cgroup only, GPU absent",
			host: func(k int, sec float64) *HostBreakdown {
				h := &HostBreakdown{Seconds: sec,
					Sched:  &HostSched{Coverage: 1, RunqueueDelay: float64(k) / 1000 * sec, OffCPU: 2 * sec},
					Cgroup: &HostCgroup{Coverage: 1},
				}
				if k >= 12 {
					h.Cgroup.Throttled = 0.08 * sec
				}
				return h
			},
			wantHost:       true,
			wantGroups:     []string{"seconds", "sched", "cgroup"},
			wantAnnotation: "runqueue 11ms/s→12ms/s, offcpu 2s/s→2s/s, throttled 0→80ms/s; absent: cuda, gpu, oom",
		},
		{
			name: "every group",
			host: func(k int, sec float64) *HostBreakdown {
				h := &HostBreakdown{Seconds: sec,
					Sched:  &HostSched{Coverage: 1, RunqueueDelay: float64(k) / 1000 * sec},
					Cgroup: &HostCgroup{Coverage: 1},
					CUDA:   &HostCUDA{Coverage: 1, Launches: 1000 * sec, CopyBytes: (1 << 20) * sec, SyncWait: 0.005 * sec},
					GPU:    &HostGPU{Coverage: 1, Devices: 1, Util: f64(0.4), NeighbourUtil: f64(0), MemoryUsed: u64p(3 << 30)},
					OOM:    &HostOOM{},
				}
				if k >= 12 {
					h.GPU.NeighbourUtil = f64(0.5)
					h.OOM = &HostOOM{Upstream: 1, Kills: []OOMKill{{At: t0.Add(125 * time.Second), PID: 42, Comm: "tritonserver", Upstream: true}}}
				}
				return h
			},
			wantHost:   true,
			wantGroups: []string{"seconds", "gpu", "cuda", "sched", "cgroup", "oom"},
			wantAnnotation: "runqueue 11ms/s→12ms/s, offcpu 0→0, throttled 0→0, launches 1k/s→1k/s, copies 1MiB/s→1MiB/s, sync 5ms/s→5ms/s, " +
				"gpu 40%→40%, neighbours 0%→50%, gpu mem 3GiB→3GiB, oom kills 0→1 (upstream 0→1)",
		},
		{
			name:           "source observed nothing",
			host:           func(k int, sec float64) *HostBreakdown { return &HostBreakdown{Seconds: sec} },
			wantHost:       true,
			wantGroups:     []string{"seconds"},
			wantAnnotation: "absent: sched, cgroup, cuda, gpu, oom",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var asked []int
			o := Options{}
			if tt.host != nil {
				o.Host = func(model, version string, from, to time.Time) *HostBreakdown {
					if model != "m" || version != "1" || to.Sub(from) != window || !from.Equal(from.Truncate(window)) {
						t.Errorf("asked for %s:%s over %v–%v, want one whole window of m:1", model, version, from, to)
					}
					asked = append(asked, idx(from))
					return tt.host(idx(from), to.Sub(from).Seconds())
				}
			}
			a := spikeP99(t, newSim(t, o))
			s := a.Snapshot
			if !tt.wantHost {
				if s.Current.Host != nil || s.Previous.Host != nil {
					t.Fatalf("host facts without a source: %+v, %+v", s.Current.Host, s.Previous.Host)
				}
				if _, ok := a.Annotations["host_facts"]; ok {
					t.Fatalf("host_facts annotation without a source: %q", a.Annotations["host_facts"])
				}
				b, _ := json.Marshal(s)
				if strings.Contains(string(b), `"host"`) {
					t.Fatalf("snapshot JSON has a host without a source: %s", b)
				}
				return
			}
			if s.Current.Host == nil || s.Previous.Host == nil {
				t.Fatalf("host facts missing: current %+v, previous %+v", s.Current.Host, s.Previous.Host)
			}
			// The firing alert kept the pending one's capture: windows 12
			// and 11, not the firing window 14.
			if !containsAll(asked, 11, 12) || containsAny(asked, 13, 14) {
				t.Errorf("host facts asked for windows %v, want 12 and 11 (other rules' captures aside), never 13 or 14", asked)
			}
			if want := tt.host(12, 10).Sched; want != nil {
				if d := s.Current.Host.Sched; d == nil || *d != *want {
					t.Errorf("current window's sched %+v, want window 12's %+v", d, want)
				}
				if d, want := s.Previous.Host.Sched, tt.host(11, 10).Sched; d == nil || *d != *want {
					t.Errorf("previous window's sched %+v, want window 11's %+v", d, want)
				}
			}
			var cur map[string]json.RawMessage
			b, err := json.Marshal(s.Current.Host)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &cur); err != nil {
				t.Fatal(err)
			}
			if len(cur) != len(tt.wantGroups) {
				t.Errorf("current host JSON %s, want exactly the keys %v", b, tt.wantGroups)
			}
			for _, g := range tt.wantGroups {
				if _, ok := cur[g]; !ok {
					t.Errorf("current host JSON %s lacks %q", b, g)
				}
			}
			if got := a.Annotations["host_facts"]; got != tt.wantAnnotation {
				t.Errorf("host_facts annotation\n got %q\nwant %q", got, tt.wantAnnotation)
			}
		})
	}
}

// A step that lands late in the first breaching window lifts its P99 with a
// few calls while every mean barely moves; the firing alert then carries the
// firing window's snapshot, against the same pre-streak reference, so the
// move it names is the step's whole size. A step that fills the first
// breaching window keeps that window's snapshot.
func TestSnapshotLateStep(t *testing.T) {
	const from, step = 12, 40 * time.Millisecond
	tests := []struct {
		name          string
		stepAt        int           // first stepped call of window `from` (of 1000)
		wantFrom      int           // the snapshot's current window
		wantAtOrAbove time.Duration // its upstream move, at least
	}{
		{name: "late in the window", stepAt: 960, wantFrom: from + 2, wantAtOrAbove: 3 * step / 4},
		{name: "whole window", stepAt: 0, wantFrom: from, wantAtOrAbove: 3 * step / 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Each window's facts carry its index, so a mix-up shows.
			o := Options{Host: func(_, _ string, f, _ time.Time) *HostBreakdown {
				return &HostBreakdown{Seconds: float64(f.Sub(t0) / window)}
			}}
			s := newSim(t, o)
			for k := range from + 4 {
				gen := steady
				if k >= from {
					gen = func(r *rand.Rand, i int) shape {
						sh := steady(r, i)
						if k > from || i >= tt.stepAt {
							sh.upstream += step
						}
						return sh
					}
				}
				s.window(1000, gen)
			}
			notes := s.rec.of(RuleP99OverBaseline)
			if len(notes) == 0 || notes[0].alert.State != StateFiring || notes[0].window != from+2 {
				t.Fatalf("P99OverBaseline notifications %+v, want firing at %d", notes, from+2)
			}
			snap := notes[0].alert.Snapshot
			if snap == nil || !snap.Current.Start.Equal(t0.Add(time.Duration(tt.wantFrom)*window)) || !snap.Previous.Start.Equal(t0.Add((from-1)*window)) {
				t.Fatalf("snapshot %+v, want window %d against %d", snap, tt.wantFrom, from-1)
			}
			if len(snap.Moved) == 0 || snap.Moved[0] != record.PhaseUpstream {
				t.Fatalf("moved %v, want upstream first", snap.Moved)
			}
			if d := snap.Current.Phases[record.PhaseUpstream] - snap.Previous.Phases[record.PhaseUpstream]; d < tt.wantAtOrAbove.Seconds() {
				t.Errorf("upstream mean moved %.2f ms, want at least %v", d*1e3, tt.wantAtOrAbove)
			}
			if h := snap.Current.Host; h == nil || h.Seconds != float64(tt.wantFrom) {
				t.Errorf("current host facts %+v, want window %d's", h, tt.wantFrom)
			}
			if h := snap.Previous.Host; h == nil || h.Seconds != from-1 {
				t.Errorf("previous host facts %+v, want window %d's", h, from-1)
			}
		})
	}
}

func containsAll(xs []int, want ...int) bool {
	for _, w := range want {
		if !containsAny(xs, w) {
			return false
		}
	}
	return true
}

func containsAny(xs []int, want ...int) bool {
	for _, x := range xs {
		for _, w := range want {
			if x == w {
				return true
			}
		}
	}
	return false
}

func TestHostText(t *testing.T) {
	sched := func(rq, off, cov float64) *HostBreakdown {
		return &HostBreakdown{Seconds: 10, Sched: &HostSched{Coverage: cov, RunqueueDelay: rq, OffCPU: off}}
	}
	tests := []struct {
		name       string
		prev, cur  *HostBreakdown
		want       string
		wantAbsent bool // no annotation at all
	}{
		{name: "no source", wantAbsent: true},
		{
			name: "rates over the covered part",
			prev: sched(0.12, 19, 1),
			cur:  sched(0.7, 10, 0.5), // 5 s covered
			want: "runqueue 12ms/s→140ms/s, offcpu 1.9s/s→2s/s; absent: cgroup, cuda, gpu, oom",
		},
		{
			name: "group absent in the previous window only",
			prev: &HostBreakdown{Seconds: 10},
			cur:  &HostBreakdown{Seconds: 10, Cgroup: &HostCgroup{Coverage: 1, Throttled: 0.8}},
			want: "throttled n/a→80ms/s; absent: sched, cuda, gpu, oom",
		},
		{
			name: "previous window without a span",
			cur:  &HostBreakdown{Seconds: 10, Cgroup: &HostCgroup{Coverage: 1}},
			want: "throttled n/a→0; absent: sched, cuda, gpu, oom",
		},
		{
			name: "nothing covered is unknown, not zero",
			prev: sched(0, 0, 0),
			cur:  sched(0.1, 0, 1),
			want: "runqueue n/a→10ms/s, offcpu n/a→0; absent: cgroup, cuda, gpu, oom",
		},
		{
			name: "GPU sampled, upstream on none of it",
			prev: &HostBreakdown{Seconds: 10, GPU: &HostGPU{Coverage: 1}},
			cur:  &HostBreakdown{Seconds: 10, GPU: &HostGPU{Coverage: 1}},
			want: "gpu: upstream on no device; absent: sched, cgroup, cuda, oom",
		},
		{
			name: "GPU without per-process utilisation",
			prev: &HostBreakdown{Seconds: 10, GPU: &HostGPU{Coverage: 1, Devices: 1, MemoryUsed: u64p(1536 << 20)}},
			cur:  &HostBreakdown{Seconds: 10, GPU: &HostGPU{Coverage: 1, Devices: 1, MemoryUsed: u64p(2 << 30)}},
			want: "gpu n/a→n/a, neighbours n/a→n/a, gpu mem 1.5GiB→2GiB; absent: sched, cgroup, cuda, oom",
		},
		{
			name: "CUDA",
			prev: &HostBreakdown{Seconds: 10, CUDA: &HostCUDA{Coverage: 1, Launches: 12000, CopyBytes: 10 << 20, SyncWait: 0.05}},
			cur:  &HostBreakdown{Seconds: 10, CUDA: &HostCUDA{Coverage: 1, Launches: 25, CopyBytes: 512, SyncWait: 0}},
			want: "launches 1.2k/s→2.5/s, copies 1MiB/s→51.2B/s, sync 5ms/s→0; absent: sched, cgroup, gpu, oom",
		},
		{
			name: "OOM kills",
			prev: &HostBreakdown{Seconds: 10, OOM: &HostOOM{Other: 1}},
			cur:  &HostBreakdown{Seconds: 10, OOM: &HostOOM{Upstream: 2, Other: 1}},
			want: "oom kills 1→3 (upstream 0→2); absent: sched, cgroup, cuda, gpu",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &Snapshot{Current: Breakdown{Host: tt.cur}, Previous: Breakdown{Host: tt.prev}}
			got := hostText(s)
			if tt.wantAbsent {
				if got != "" {
					t.Fatalf("hostText = %q, want none", got)
				}
				return
			}
			if got != tt.want {
				t.Fatalf("hostText\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

// The slowest calls name their trace when, and only when, the head sampler
// kept it; the tracer gives every call an id, kept or not.
func TestSnapshotSlowestTraceIDs(t *testing.T) {
	rec := &recorder{}
	e, err := NewEngine(Options{Notifiers: []Notifier{rec}, SlowCalls: 3, Config: Config{Defaults: Thresholds{SLA: time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		upMs    int
		sampled bool
		wantID  bool
	}{
		{"sampled, slowest", 90, true, true},
		{"not sampled", 80, false, false},
		{"sampled", 70, true, true},
	}
	id := func(i int) [16]byte { return [16]byte{0: 0x4b, 15: byte(i + 1)} }
	r := rand.New(rand.NewPCG(1, 1))
	for i := range 200 {
		c := steady(r, i).call("m", t0.Add(time.Duration(i)*40*time.Millisecond))
		c.TraceID, c.TraceKept = [16]byte{0: 0xee, 14: byte(i >> 8), 15: byte(i)}, i%2 == 0
		e.Observe(c)
	}
	for i, tt := range tests {
		c := shape{upstream: time.Duration(tt.upMs) * time.Millisecond}.call("m", t0.Add(9*time.Second))
		c.TraceID, c.TraceKept = id(i), tt.sampled
		e.Observe(c)
	}
	e.Tick(context.Background(), t0.Add(window))
	if len(rec.sent) != 1 || rec.sent[0].alert.Snapshot == nil {
		t.Fatalf("sent %+v, want LatencyMeanOverSLA firing with a snapshot", rec.sent)
	}
	slow := rec.sent[0].alert.Snapshot.Slowest
	if len(slow) != len(tests) {
		t.Fatalf("slowest %+v, want %d", slow, len(tests))
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := ""
			if tt.wantID {
				x := id(i)
				want = hex.EncodeToString(x[:])
			}
			if slow[i].TraceID != want {
				t.Errorf("slowest[%d] (%v s) trace id %q, want %q", i, slow[i].Duration, slow[i].TraceID, want)
			}
		})
	}
}
