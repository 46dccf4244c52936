package diagnosis

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/alerting"
)

var t0 = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

const win = 10 * time.Second

func f(v float64) *float64 { return &v }

// healthy is one ordinary window i: 20 ms mean, 100 calls/s, the upstream
// 18 ms of it in queue 2 ms + compute 15 ms, small host figures.
func healthy(i int) Window {
	return Window{
		Start: t0.Add(time.Duration(i) * win), Seconds: 10, Version: "1",
		Count: 1000, QPS: 100, Mean: 0.020, P99: 0.040,
		Phases: map[string]float64{"ingress": 0.0005, "decode": 0.0002, "upstream": 0.018, "transfer": 0.001, "egress": 0.0003},
		Stages: map[string]float64{"queue": 0.002, "compute": 0.015},
		Host: &alerting.HostBreakdown{Seconds: 10,
			Sched:  &alerting.HostSched{Coverage: 1, RunqueueDelay: 0.02, OffCPU: 5},
			Cgroup: &alerting.HostCgroup{Coverage: 1, Throttled: 0},
			GPU:    &alerting.HostGPU{Coverage: 1, Devices: 1, Util: f(0.4), NeighbourUtil: f(0)},
			OOM:    &alerting.HostOOM{},
		},
		RSS: 500 << 20,
		Slowest: []alerting.SlowCall{{At: t0.Add(time.Duration(i) * win), Duration: 0.05, Code: "OK",
			TraceID: fmt.Sprintf("%032x", i+1)}},
	}
}

// slower adds d seconds to window w's mean, p99 and the named phase and
// stage (either may be "").
func slower(w *Window, d float64, phase, stage string) {
	w.Mean += d
	w.P99 += 2 * d
	if phase != "" {
		w.Phases[phase] += d
	}
	if stage != "" {
		w.Stages[stage] += d
	}
	w.Slowest = []alerting.SlowCall{{At: w.Start, Duration: w.P99 * 2, Code: "OK", TraceID: "feedfacefeedfacefeedfacefeedface"}}
}

func TestDiagnoseRanksInjectedCauseFirst(t *testing.T) {
	const nBase, nBreach = 30, 3
	tests := []struct {
		name      string
		mutate    func(i int, w *Window) // i ≥ nBase are breach windows
		windows   int                    // total; default nBase+nBreach
		from      int                    // first breach window; default nBase
		limit     float64
		want      string // top cause; "" for no anomaly
		wantPhase string
		anomaly   bool
		also      string // another cause that must be listed
	}{
		{name: "clean", mutate: func(int, *Window) {}, want: "", anomaly: false},
		{name: "cgroup throttling", anomaly: true, want: CauseThrottling, wantPhase: "compute", mutate: func(i int, w *Window) {
			if i >= nBase {
				slower(w, 0.030, "upstream", "compute")
				w.Host.Cgroup.Throttled = 2.5
				w.Host.Sched.RunqueueDelay = 3 // throttled threads also wait
			}
		}},
		{name: "cpu neighbour", anomaly: true, want: CauseRunqueue, wantPhase: "compute", mutate: func(i int, w *Window) {
			if i >= nBase {
				slower(w, 0.015, "upstream", "compute")
				w.Host.Sched.RunqueueDelay = 4
			}
		}},
		{name: "gpu neighbour", anomaly: true, want: CauseGPUNeighbour, wantPhase: "compute", mutate: func(i int, w *Window) {
			if i >= nBase {
				slower(w, 0.020, "upstream", "compute")
				w.Host.GPU.NeighbourUtil = f(0.6)
			}
		}},
		{name: "oom kill", anomaly: true, want: CauseOOMKill, mutate: func(i int, w *Window) {
			if i == nBase+1 || i == nBase+2 { // one kill at the windows' shared edge
				w.Host.OOM = &alerting.HostOOM{Upstream: 1, Kills: []alerting.OOMKill{{At: t0.Add((nBase + 2) * win), PID: 42, Upstream: true}}}
			}
			if i >= nBase {
				slower(w, 0.010, "upstream", "queue")
			}
		}},
		{name: "memory leak", anomaly: true, want: CauseMemoryLeak, limit: 2 << 30, mutate: func(i int, w *Window) {
			w.RSS = float64(500<<20) + float64(i)*float64(20<<20) // 2 MiB/s
		}},
		// Windows recorded late carry no reading (0, sidecar.recordWindowsAt):
		// missing samples, not a fall to zero that would hide the trend.
		{name: "memory leak, most windows without a reading", anomaly: true, want: CauseMemoryLeak, limit: 2 << 30, mutate: func(i int, w *Window) {
			w.RSS = 0
			if i%3 == 0 {
				w.RSS = float64(500<<20) + float64(i)*float64(20<<20)
			}
		}},
		{name: "cpu neighbour while memory grows", anomaly: true, want: CauseRunqueue, limit: 2 << 30, also: CauseMemoryLeak, mutate: func(i int, w *Window) {
			w.RSS = float64(500<<20) + float64(i)*float64(20<<20)
			if i >= nBase {
				slower(w, 0.015, "upstream", "compute")
				w.Host.Sched.RunqueueDelay = 4
			}
		}},
		{name: "small process warming up", want: "", mutate: func(i int, w *Window) {
			w.RSS = float64(20<<20) + float64(i)*float64(300<<10) // +45% but under 10 MiB
		}},
		{name: "version change", anomaly: true, want: CauseVersionChange, wantPhase: "compute", mutate: func(i int, w *Window) {
			if i >= nBase {
				w.Version = "2"
				slower(w, 0.010, "upstream", "compute")
			}
		}},
		{name: "slow network to upstream", anomaly: true, want: CauseNetwork, wantPhase: "upstream network", mutate: func(i int, w *Window) {
			if i >= nBase {
				slower(w, 0.050, "upstream", "")
			}
		}},
		{name: "slow client network", anomaly: true, want: CauseNetwork, wantPhase: "ingress", mutate: func(i int, w *Window) {
			if i >= nBase {
				slower(w, 0.040, "ingress", "")
			}
		}},
		{name: "server stage alone", anomaly: true, want: CauseServerStage, wantPhase: "queue", mutate: func(i int, w *Window) {
			if i >= nBase {
				slower(w, 0.030, "upstream", "queue")
			}
		}},
		{name: "load explained by slope", anomaly: false, want: CauseLoadExpected, mutate: func(i int, w *Window) {
			// baseline: QPS 80..120, mean 20ms + 0.1ms per call/s over 100
			q := 80 + float64(i%5)*10
			if i >= nBase {
				q = 200
			}
			d := 0.0001 * (q - 100)
			w.QPS, w.Count = q, int64(q*10)
			w.Mean += d
			w.Stages["queue"] += d
			w.Phases["upstream"] += d
		}},
		{name: "load not explained", anomaly: true, want: CauseServerStage, mutate: func(i int, w *Window) {
			q := 80 + float64(i%5)*10
			if i >= nBase {
				q = 200
			}
			d := 0.0001 * (q - 100)
			if i >= nBase {
				d = 0.060
				w.Slowest = []alerting.SlowCall{{At: w.Start, Duration: 0.2, Code: "OK", TraceID: "feedfacefeedfacefeedfacefeedface"}}
			}
			w.QPS, w.Count = q, int64(q*10)
			w.Mean += d
			w.Stages["queue"] += d
			w.Phases["upstream"] += d
		}, wantPhase: "queue", also: CauseLoadUnexpected},
		{name: "one spike with a dip is not periodic", anomaly: true, want: CauseServerStage, wantPhase: "compute", windows: nBase + 6, mutate: func(i int, w *Window) {
			// windows 30..35 spike, but 31 and 33 dip below the hot line:
			// read as three episodes two windows apart, it was "every 20s"
			if i >= nBase && i != nBase+1 && i != nBase+3 {
				slower(w, 0.040, "upstream", "compute")
			}
		}},
		{name: "periodic spike", anomaly: true, want: CausePeriodic, wantPhase: "compute", windows: 4*18 + 2, from: 4 * 18, mutate: func(i int, w *Window) {
			// a 20 s spike every 3 min (18 windows), the last one the breach
			if i >= 18 && i%18 < 2 {
				slower(w, 0.040, "upstream", "compute")
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := tc.windows
			if n == 0 {
				n = nBase + nBreach
			}
			from := tc.from
			if from == 0 {
				from = nBase
			}
			var ws []Window
			for i := range n {
				w := healthy(i)
				tc.mutate(i, &w)
				ws = append(ws, w)
			}
			r, err := Diagnose(Request{Model: "mlp", From: ws[from].Start, Windows: ws, MemoryLimit: tc.limit}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if r.Anomaly != tc.anomaly {
				t.Errorf("anomaly = %v, want %v; %s", r.Anomaly, tc.anomaly, r.Summary)
			}
			if got := r.Top().Name; got != tc.want {
				t.Fatalf("top cause = %q, want %q; causes %+v", got, tc.want, r.Causes)
			}
			if tc.want == "" {
				if r.Summary != "no anomaly" {
					t.Errorf("summary = %q, want no anomaly", r.Summary)
				}
				return
			}
			if tc.wantPhase != "" && r.Top().Phase != tc.wantPhase {
				t.Errorf("phase = %q, want %q; moved %+v", r.Top().Phase, tc.wantPhase, r.Moved)
			}
			if tc.also != "" && !slices.ContainsFunc(r.Causes, func(c Cause) bool { return c.Name == tc.also }) {
				t.Errorf("causes lack %q: %+v", tc.also, r.Causes)
			}
			if tc.want == CauseOOMKill && r.Top().Evidence["upstream_kills"] != 1 {
				t.Errorf("oom kills %v, want the one kill counted once", r.Top().Evidence)
			}
			if tc.want == CausePeriodic && r.Top().Period != 3*time.Minute {
				t.Errorf("period = %v, want 3m", r.Top().Period)
			}
			if tc.want == CauseMemoryLeak && (r.Top().Exhaustion.IsZero() || r.Top().Evidence["slope_bytes_per_s"] < 1.9*(1<<20)) {
				t.Errorf("leak without exhaustion or slope: %+v", r.Top())
			}
			if len(r.Top().Evidence) == 0 {
				t.Errorf("top cause has no evidence")
			}
			if tc.wantPhase != "" && (len(r.Traces) == 0 || r.Traces[0] != "feedfacefeedfacefeedfacefeedface") {
				t.Errorf("traces = %v, want the breach's slow call first", r.Traces)
			}
			var b strings.Builder
			if err := r.WriteText(&b); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(b.String(), tc.want) {
				t.Errorf("text report lacks %q:\n%s", tc.want, b.String())
			}
		})
	}
}

func TestDiagnoseEvidence(t *testing.T) {
	var ws []Window
	for i := range 33 {
		w := healthy(i)
		if i >= 30 {
			slower(&w, 0.030, "upstream", "compute")
		}
		ws = append(ws, w)
	}
	r, err := Diagnose(Request{Model: "mlp", From: ws[30].Start, Windows: ws}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if d := r.Added - 0.030; d > 1e-9 || d < -1e-9 {
		t.Errorf("added = %v, want 0.030", r.Added)
	}
	if r.Moved[0].Name != "compute" || r.Moved[0].Share < 0.99 || r.Moved[0].Share > 1.01 {
		t.Errorf("moved[0] = %+v, want compute with all the added latency", r.Moved[0])
	}
	for _, p := range r.Moved {
		if p.Name == "upstream network" {
			t.Errorf("network moved with the stage: %+v", p)
		}
	}
	if r.Baseline.Windows != 30 || r.Breach.Windows != 3 {
		t.Errorf("windows %d/%d, want 30/3", r.Baseline.Windows, r.Breach.Windows)
	}
}

func TestDiagnoseErrors(t *testing.T) {
	_, err := Diagnose(Request{Model: "mlp", From: t0}, Options{})
	if !errors.Is(err, ErrNoWindows) {
		t.Fatalf("err = %v, want ErrNoWindows", err)
	}
}

// TestPeriodicHistoryStartsMidSpike: once the history's ring is full its
// oldest window is as likely inside a spike as not; that episode's start is
// not in the history, and reading the oldest window as its start made the
// first interval short and the spikes "not periodic".
func TestPeriodicHistoryStartsMidSpike(t *testing.T) {
	var ws []Window
	// a 40 s spike every 3 min (18 windows); the history starts 20 s into
	// one, and the breach is the fourth whole spike
	for i := 20; i < 4*18+4; i++ {
		w := healthy(i)
		if i%18 < 4 {
			slower(&w, 0.040, "upstream", "compute")
		}
		ws = append(ws, w)
	}
	from := t0.Add(4 * 18 * win)
	r, err := Diagnose(Request{Model: "mlp", From: from, Windows: ws}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if top := r.Top(); top.Name != CausePeriodic || top.Period != 3*time.Minute {
		t.Fatalf("top = %s period %v, want periodic every 3m; causes %+v", top.Name, top.Period, r.Causes)
	}
}

// TestLeakPastItsLimit: a leak whose projected RSS is already at or over the
// limit (host.upstream_memory_limit set below what the server holds, or the
// fitted line a little past a cgroup's limit) is the most urgent there is;
// it scored 0.7 and its summary left the limit out, below a leak an hour
// from it.
func TestLeakPastItsLimit(t *testing.T) {
	var ws []Window
	for i := range 33 {
		w := healthy(i)
		w.RSS = float64(500<<20) + float64(i)*float64(20<<20) // 2 MiB/s, 1.1 GiB at the end
		ws = append(ws, w)
	}
	r, err := Diagnose(Request{Model: "mlp", From: ws[30].Start, Windows: ws, MemoryLimit: 1 << 30}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	top := r.Top()
	if top.Name != CauseMemoryLeak || top.Score != 0.9 || top.Exhaustion.IsZero() || !strings.Contains(top.Summary, "limit") {
		t.Fatalf("top = %+v, want memory_leak 0.9 with the limit reached", top)
	}
}

// TestLoadDoesNotHideLeak: load that explains the added latency is not an
// anomaly, but a memory leak is one on its own, as it is at steady load; it
// read "no anomaly: load ..." because the leak scored under the load.
func TestLoadDoesNotHideLeak(t *testing.T) {
	var ws []Window
	for i := range 33 {
		w := healthy(i)
		w.RSS = float64(500<<20) + float64(i)*float64(20<<20) // 2 MiB/s, no limit known
		q := 80 + float64(i%5)*10
		if i >= 30 {
			q = 200
		}
		d := 0.0001 * (q - 100) // on the baseline's slope
		w.QPS, w.Count = q, int64(q*10)
		w.Mean += d
		w.Stages["queue"] += d
		w.Phases["upstream"] += d
		ws = append(ws, w)
	}
	r, err := Diagnose(Request{Model: "mlp", From: ws[30].Start, Windows: ws}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Anomaly || !strings.Contains(r.Summary, "memory grows") {
		t.Fatalf("anomaly %v, summary %q; want the leak; causes %+v", r.Anomaly, r.Summary, r.Causes)
	}
}

// TestWriteTextControlCharacters: the report's strings come from the admin
// API and, for the prose, an LLM; an escape sequence or a line break in one
// must not reach the terminal as such: single-line fields are quoted, the
// prose keeps its line breaks and loses every other control character.
func TestWriteTextControlCharacters(t *testing.T) {
	r := Report{Model: "m\x1b[2J", Alert: "A\nB", Summary: "verdict\rforged",
		Causes: []Cause{{Name: CauseServerStage, Score: 0.9, Summary: "stage \"infer\"\x07"}},
		Prose:  "first line\nsecond\x1b]0;pwned\x07 line"}
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, bad := range []string{"\x1b", "\x07", "\r", "A\nB"} {
		if strings.Contains(out, bad) {
			t.Errorf("report holds %q:\n%q", bad, out)
		}
	}
	for _, want := range []string{`"m\x1b[2J"`, `"A\nB"`, `"verdict\rforged"`, "first line\nsecond]0;pwned line"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}
