package alerting

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/inferwatch/inferwatch/record"
)

func TestP99SpikeFiresAfterThreeConsecutiveWindows(t *testing.T) {
	for _, tc := range []struct {
		name      string
		spike     int // windows of spike
		wantFire  bool
		wantPends int // windows pending before firing or dropping
	}{
		{"five windows", 5, true, 2},
		{"two windows", 2, false, 2},
		{"one window", 1, false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSim(t, Options{})
			const from = 12 // after the baseline's minimum history
			for k := range from + tc.spike + 8 {
				gen := steady
				if k >= from && k < from+tc.spike {
					gen = tailSpike
				}
				s.window(1000, gen)
			}
			st := s.state[RuleP99OverBaseline]
			if p := s.firstState(RuleP99OverBaseline, StatePending, 0); p != from {
				t.Fatalf("pending first at window %d, want %d (states %v)", p, from, st)
			}
			fired := s.firstState(RuleP99OverBaseline, StateFiring, 0)
			notes := s.rec.of(RuleP99OverBaseline)
			if !tc.wantFire {
				if fired >= 0 || len(notes) > 0 {
					t.Fatalf("a %d-window spike fired at %d (%d notifications)", tc.spike, fired, len(notes))
				}
				for k := from + tc.wantPends; k < len(st); k++ {
					if st[k] != "" {
						t.Fatalf("window %d still %q after the spike", k, st[k])
					}
				}
				return
			}
			if fired != from+2 {
				t.Fatalf("fired at window %d, want %d, the third of the spike (states %v)", fired, from+2, st)
			}
			// Clear for the hold-down: resolved in the second window after it.
			wantResolved := from + tc.spike + 1
			if len(notes) != 2 || notes[0].alert.State != StateFiring || notes[0].window != fired ||
				notes[1].alert.State != StateResolved || notes[1].window != wantResolved {
				t.Fatalf("notifications %+v, want firing at %d and resolved at %d", notes, fired, wantResolved)
			}
			if st[wantResolved-1] != StateFiring || st[wantResolved] != "" {
				t.Fatalf("states around the resolve: %v", st[wantResolved-2:wantResolved+1])
			}
			a := notes[1].alert
			if a.Labels["model"] != "m" || a.Labels["version"] != "1" || !a.StartsAt.Equal(t0.Add(time.Duration(fired+1)*window)) ||
				!a.EndsAt.Equal(t0.Add(time.Duration(wantResolved+1)*window)) || a.Snapshot == nil {
				t.Fatalf("resolved alert %+v", a)
			}
			if b, err := parseFloat(a.Annotations["baseline"]); err != nil || b < 0.025 || b > 0.05 {
				t.Errorf("baseline annotation %q", a.Annotations["baseline"])
			}
		})
	}
}

func parseFloat(s string) (float64, error) {
	var f float64
	err := json.Unmarshal([]byte(s), &f)
	return f, err
}

func TestStdDevJumpSnapshotNamesThePhase(t *testing.T) {
	for _, tc := range []struct {
		name  string
		step  func(sh *shape, r *rand.Rand)
		moved string
	}{
		{"upstream", func(sh *shape, r *rand.Rand) {
			sh.upstream = lognormal(r, 60*time.Millisecond, 0.3)
			sh.stages = []record.Stage{{Name: "preprocess", Duration: time.Millisecond}, {Name: "infer", Duration: sh.upstream * 8 / 10}}
		}, record.PhaseUpstream},
		{"ingress", func(sh *shape, r *rand.Rand) { sh.ingress = lognormal(r, 40*time.Millisecond, 0.4) }, record.PhaseIngress},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSim(t, Options{InFlight: func(model, version string) int64 { return 7 }})
			base := func(r *rand.Rand, i int) shape {
				sh := steady(r, i)
				sh.stages = []record.Stage{{Name: "preprocess", Duration: time.Millisecond}, {Name: "infer", Duration: sh.upstream * 8 / 10}}
				return sh
			}
			const from = 10
			for k := range from + 4 {
				gen := base
				if k >= from {
					gen = func(r *rand.Rand, i int) shape {
						sh := base(r, i)
						tc.step(&sh, r)
						return sh
					}
				}
				s.window(500, gen)
			}
			fired := s.firstState(RuleLatencyStdDevJump, StateFiring, 0)
			if fired != from+1 {
				t.Fatalf("fired at %d, want %d (StdDevFor 2): %v", fired, from+1, s.state[RuleLatencyStdDevJump])
			}
			if p := s.firstState(RuleLatencyStdDevJump, StatePending, 0); p != from {
				t.Fatalf("pending at %d, want %d", p, from)
			}
			notes := s.rec.of(RuleLatencyStdDevJump)
			if len(notes) != 1 || notes[0].alert.Snapshot == nil {
				t.Fatalf("notifications %+v", notes)
			}
			snap := notes[0].alert.Snapshot
			if len(snap.Moved) == 0 || snap.Moved[0] != tc.moved {
				t.Fatalf("moved %v, want %q first", snap.Moved, tc.moved)
			}
			// Previous is the last window before the jump, not the jump's first.
			if !snap.Previous.Start.Equal(t0.Add((from - 1) * window)) {
				t.Errorf("previous window from %v", snap.Previous.Start)
			}
			if snap.InFlight != 7 || len(snap.Slowest) != 10 || snap.Slowest[0].Duration < snap.Slowest[9].Duration ||
				snap.Slowest[0].Code != "OK" || snap.Current.Count != 500 || snap.Current.Phases[tc.moved] <= snap.Previous.Phases[tc.moved] {
				t.Errorf("snapshot %+v", snap)
			}
			if tc.moved == record.PhaseUpstream {
				if i := indexOf(snap.Moved, "infer"); i != 1 || snap.Current.Stages["infer"] < 0.04 {
					t.Errorf("infer stage at %d of %v, mean %v", i, snap.Moved, snap.Current.Stages["infer"])
				}
			}
			if _, err := json.Marshal(s.e.Alerts()); err != nil {
				t.Fatalf("alerts do not marshal: %v", err)
			}
		})
	}
}

func indexOf(xs []string, x string) int {
	for i, v := range xs {
		if v == x {
			return i
		}
	}
	return -1
}

// A stationary stream with realistic noise — lognormal latencies, a mild
// dependence on load, throughput swinging by 4×, rare slow outliers — fires
// nothing over twenty simulated minutes, long enough for every rule to be
// armed.
func TestCleanStreamFiresNothing(t *testing.T) {
	s := newSim(t, Options{Config: Config{Defaults: Thresholds{SLA: 100 * time.Millisecond}}})
	for k := range 120 {
		qps := 100 + 60*math.Sin(2*math.Pi*float64(k)/17)
		n := int(qps*10) + s.r.IntN(40) - 20
		s.window(n, func(r *rand.Rand, i int) shape {
			sh := shape{
				ingress:  lognormal(r, 500*time.Microsecond, 0.5),
				upstream: lognormal(r, 18*time.Millisecond+time.Duration(qps*20)*time.Microsecond, 0.5),
				transfer: lognormal(r, time.Millisecond, 0.5),
				egress:   time.Duration(r.IntN(100)) * time.Microsecond,
			}
			if r.Float64() < 0.001 {
				sh.upstream *= 4
			}
			return sh
		})
	}
	if len(s.rec.sent) != 0 {
		t.Fatalf("clean stream notified %d times, first %+v", len(s.rec.sent), s.rec.sent[0].alert)
	}
	for _, r := range ruleNames {
		if k := s.firstState(r, StateFiring, 0); k >= 0 {
			t.Errorf("%s fired at window %d", r, k)
		}
	}
	v := s.e.Stats()[0].Previous
	if !v.Fit.OK || v.EMA < 0.015 || v.EMA > 0.05 {
		t.Errorf("last window %+v", v)
	}
}

func TestLatencyMeanOverSLA(t *testing.T) {
	s := newSim(t, Options{Config: Config{Models: map[string]Thresholds{"withsla": {SLA: 50 * time.Millisecond}}}})
	level := func(k int) time.Duration {
		switch {
		case k < 12:
			return 40 * time.Millisecond
		case k < 30:
			return 80 * time.Millisecond
		}
		return 30 * time.Millisecond
	}
	var emas []float64
	for k := range 50 {
		s.window(200, func(r *rand.Rand, i int) shape {
			return shape{upstream: lognormal(r, level(k), 0.1)}
		}, "withsla", "nosla")
		emas = append(emas, s.e.Stats()[0].Previous.EMA)
	}
	fired := s.firstState(RuleLatencyMeanOverSLA, StateFiring, 0)
	resolved := -1
	for k := fired; k >= 0 && k < len(emas); k++ {
		if s.state[RuleLatencyMeanOverSLA][k] == "" {
			resolved = k
			break
		}
	}
	// It fires on the first window whose EMA is over 1.2 × 50 ms and
	// resolves on the second window back under it.
	over := func(k int) bool { return emas[k] > 0.060 }
	if fired < 12 || !over(fired) || over(fired-1) {
		t.Fatalf("fired at %d, EMAs %v", fired, emas)
	}
	if resolved < 30 || over(resolved) || over(resolved-1) || !over(resolved-2) {
		t.Fatalf("resolved at %d, EMAs %v", resolved, emas)
	}
	for _, n := range s.rec.of(RuleLatencyMeanOverSLA) {
		if n.alert.Labels["model"] != "withsla" {
			t.Errorf("model without an SLA alerted: %+v", n.alert)
		}
		if n.alert.Annotations["sla"] != "0.05" {
			t.Errorf("sla annotation %q", n.alert.Annotations["sla"])
		}
	}
	// Firing, re-sent every minute (6 windows), resolved.
	notes := s.rec.of(RuleLatencyMeanOverSLA)
	for i, n := range notes {
		want, wantWindow := StateFiring, fired+6*i
		if i == len(notes)-1 {
			want, wantWindow = StateResolved, resolved
		}
		if n.alert.State != want || n.window != wantWindow {
			t.Errorf("notification %d: %s at %d, want %s at %d", i, n.alert.State, n.window, want, wantWindow)
		}
	}
	if len(notes) != 2+(resolved-fired-1)/6 {
		t.Errorf("%d notifications", len(notes))
	}
}

// Throughput swings all along; latency starts to rise with it at window 60.
func TestThroughputLatencySlopeChange(t *testing.T) {
	s := newSim(t, Options{})
	const change = 60
	for k := range change + 40 {
		qps := 100 + 60*math.Sin(2*math.Pi*float64(k)/9)
		s.window(int(qps*10), func(r *rand.Rand, i int) shape {
			med := 20 * time.Millisecond
			if k >= change {
				med += time.Duration((qps - 40) * float64(150*time.Microsecond))
			}
			return shape{upstream: lognormal(r, med, 0.3)}
		})
	}
	fired := s.firstState(RuleThroughputLatencySlopeChange, StateFiring, 0)
	// The fit spans 30 windows: the new slope shows once enough of them
	// carry it.
	if fired < change || fired > change+20 {
		t.Fatalf("slope change fired at %d, want within 20 windows of %d: %v", fired, change, s.state[RuleThroughputLatencySlopeChange])
	}
	if p := s.firstState(RuleThroughputLatencySlopeChange, StatePending, 0); p < change {
		t.Fatalf("pending at %d, before the change", p)
	}
	notes := s.rec.of(RuleThroughputLatencySlopeChange)
	if len(notes) == 0 || notes[0].alert.Snapshot == nil {
		t.Fatalf("notifications %+v", notes)
	}
	if v, _ := parseFloat(notes[0].alert.Annotations["value"]); v < 5e-5 {
		t.Errorf("slope at firing %v, want about 1.5e-4", v)
	}
}

// Sparse traffic keeps an SLA alert steady; silence resolves it.
func TestMeanOverSLAThroughIdleWindows(t *testing.T) {
	s := newSim(t, Options{Config: Config{Defaults: Thresholds{SLA: 10 * time.Millisecond}}})
	for k := range 60 {
		n := 0
		if k < 30 && k%3 == 0 {
			n = 1 // one call every 30 s
		}
		s.window(n, steady)
	}
	st := s.state[RuleLatencyMeanOverSLA]
	for k := 0; k < 30; k++ {
		if st[k] != StateFiring {
			t.Fatalf("window %d: %q during sparse traffic: %v", k, st[k], st)
		}
	}
	// Silent from window 30 (the last call was in 27): judged until 27+30.
	if r := s.firstState(RuleLatencyMeanOverSLA, "", 0); r != 27+30+1 {
		t.Fatalf("resolved at %d: %v", r, st)
	}
	if n := s.rec.of(RuleLatencyMeanOverSLA); n[0].alert.State != StateFiring || n[len(n)-1].alert.State != StateResolved {
		t.Fatalf("notifications %+v", n)
	}
}

func TestGaugesAndFiringFlag(t *testing.T) {
	set := metrics.NewSet()
	s := newSim(t, Options{Metrics: set, Config: Config{Defaults: Thresholds{SLA: 10 * time.Millisecond}}})
	for range 4 {
		s.window(200, steady, "m")
	}
	var b bytes.Buffer
	set.WritePrometheus(&b)
	out := b.String()
	for _, want := range []string{
		`inferwatch_latency_ema_seconds{model="m",version="1"} 0.02`,
		`inferwatch_latency_quantile_seconds{model="m",version="1",quantile="0.99"} 0.0`,
		`inferwatch_latency_stddev_seconds{model="m",version="1"} 0.00`,
		`inferwatch_throughput_latency_slope{model="m",version="1"}`,
		`inferwatch_alert_firing{alertname="LatencyMeanOverSLA",model="m",version="1"} 1`,
		`inferwatch_alert_firing{alertname="P99OverBaseline",model="m",version="1"} 0`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("exposition lacks %q:\n%s", want, out)
		}
	}
}

// The SLAs the engine holds models to go out as series for the fleet
// rules: a configured model's from the start, a model under the defaults'
// SLA from its first window, none where no SLA applies.
func TestSLASeries(t *testing.T) {
	expose := func(set *metrics.Set) string {
		var b bytes.Buffer
		set.WritePrometheus(&b)
		return b.String()
	}
	for _, tc := range []struct {
		name          string
		defaults      Thresholds
		before, after []string // present before any call, after windows of m
		never         []string
	}{
		{
			name:     "default SLA",
			defaults: Thresholds{SLA: 250 * time.Millisecond},
			before:   []string{`inferwatch_model_sla_seconds{model="bert"} 0.08`, `inferwatch_model_ttft_slo_seconds{model="bert"} 1`},
			after:    []string{`inferwatch_model_sla_seconds{model="m"} 0.25`},
			never:    []string{`inferwatch_model_ttft_slo_seconds{model="m"}`},
		},
		{
			name:   "no default SLA",
			before: []string{`inferwatch_model_sla_seconds{model="bert"} 0.08`},
			never:  []string{`inferwatch_model_sla_seconds{model="m"}`, `inferwatch_model_ttft_slo_seconds{model="m"}`},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set := metrics.NewSet()
			s := newSim(t, Options{Metrics: set, Config: Config{
				Defaults: tc.defaults,
				Models:   map[string]Thresholds{"bert": {SLA: 80 * time.Millisecond, TTFTSLO: time.Second}},
			}})
			out := expose(set)
			for _, want := range tc.before {
				if !strings.Contains(out, want) {
					t.Errorf("before any call, exposition lacks %q:\n%s", want, out)
				}
			}
			for _, want := range tc.after {
				if strings.Contains(out, want) {
					t.Errorf("before any call of m, exposition has %q", want)
				}
			}
			for range 2 {
				s.window(50, steady, "m")
			}
			out = expose(set)
			for _, want := range append(tc.before, tc.after...) {
				if !strings.Contains(out, want) {
					t.Errorf("after m's windows, exposition lacks %q:\n%s", want, out)
				}
			}
			for _, no := range tc.never {
				if strings.Contains(out, no) {
					t.Errorf("exposition has %q, which no SLA backs", no)
				}
			}
		})
	}
}

func TestResendAndKeepResolved(t *testing.T) {
	s := newSim(t, Options{Resend: 30 * time.Second, KeepResolved: time.Minute,
		Config: Config{Defaults: Thresholds{SLA: 10 * time.Millisecond}}})
	for range 8 {
		s.window(100, steady)
	}
	notes := s.rec.of(RuleLatencyMeanOverSLA)
	// Firing at window 0, re-sent every 30 s: windows 3 and 6.
	if len(notes) != 3 || notes[0].window != 0 || notes[1].window != 3 || notes[2].window != 6 {
		t.Fatalf("notifications %+v", notes)
	}
	for _, n := range notes {
		if n.alert.State != StateFiring || n.alert.Fingerprint() != notes[0].alert.Fingerprint() || !n.alert.StartsAt.Equal(notes[0].alert.StartsAt) {
			t.Fatalf("re-send differs: %+v", n.alert)
		}
	}
	// Resolve, then the resolved alert is listed for KeepResolved.
	for range 2 {
		s.window(100, func(r *rand.Rand, i int) shape { return shape{upstream: time.Millisecond} })
	}
	// The EMA takes a while to fall under 12 ms.
	for k := 0; k < 30 && s.state[RuleLatencyMeanOverSLA][s.k-1] != ""; k++ {
		s.window(100, func(r *rand.Rand, i int) shape { return shape{upstream: time.Millisecond} })
	}
	as := s.e.Alerts()
	if len(as) != 1 || as[0].State != StateResolved || as[0].EndsAt.IsZero() {
		t.Fatalf("alerts after the resolve: %+v", as)
	}
	for range 7 {
		s.window(100, func(r *rand.Rand, i int) shape { return shape{upstream: time.Millisecond} })
	}
	if as := s.e.Alerts(); len(as) != 0 {
		t.Fatalf("resolved alert kept past KeepResolved: %+v", as)
	}
}

func TestExtraLabelsAndDisabled(t *testing.T) {
	s := newSim(t, Options{
		Labels:       map[string]string{"pod": "p-1"},
		GeneratorURL: "http://p-1:9090/api/v1/alerts",
		Config: Config{
			Defaults: Thresholds{SLA: 10 * time.Millisecond},
			Models:   map[string]Thresholds{"quiet": {Disabled: []string{RuleLatencyMeanOverSLA}}},
		},
	})
	s.window(100, steady, "loud", "quiet")
	as := s.e.Alerts()
	if len(as) != 1 || as[0].Labels["model"] != "loud" || as[0].Labels["pod"] != "p-1" ||
		as[0].GeneratorURL != "http://p-1:9090/api/v1/alerts" || len(as[0].Labels) != 4 {
		t.Fatalf("alerts %+v", as)
	}
}

// Tick evaluates each closed window once, whether it closed by Roll or
// lazily by a later call's Observe, and repeated Ticks add nothing.
func TestTickEvaluatesEachWindowOnce(t *testing.T) {
	rec := &recorder{}
	e, err := NewEngine(Options{Notifiers: []Notifier{rec}, Config: Config{Defaults: Thresholds{SLA: time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 1))
	// Three windows observed without a Tick: the first two close lazily.
	for k := range 3 {
		for i := range 50 {
			e.Observe(steady(r, i).call("m", t0.Add(time.Duration(k)*window+time.Duration(i)*100*time.Millisecond)))
		}
	}
	e.Tick(context.Background(), t0.Add(3*window))
	e.Tick(context.Background(), t0.Add(3*window))
	if len(rec.sent) != 1 || !rec.sent[0].alert.StartsAt.Equal(t0.Add(window)) {
		t.Fatalf("sent %+v", rec.sent)
	}
}

func TestRunTicksOnTheClock(t *testing.T) {
	e, err := NewEngine(Options{Stats: windowstatsOptions(20 * time.Millisecond), Grace: 2 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.Run(ctx); close(done) }()
	e.Observe(shape{upstream: time.Millisecond}.call("m", time.Now()))
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if v := e.Stats(); len(v) == 1 && len(v[0].Closed) >= 2 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	if v := e.Stats(); len(v) != 1 || len(v[0].Closed) < 2 {
		t.Fatalf("Run did not roll windows: %+v", v)
	}
}
