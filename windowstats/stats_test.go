package windowstats

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/record"
)

// t0 is on a minute boundary, so windows start at t0 + k·10 s.
var t0 = time.Unix(1_700_000_040, 0)

// endingAt is a call of the given total latency that ended at end.
func endingAt(model string, end time.Time, total time.Duration) *record.Call {
	return &record.Call{
		Start:    end.Add(-total),
		End:      total,
		Model:    model,
		Version:  "1",
		Protocol: record.ProtocolHTTP,
		Code:     "200",
	}
}

func mustNew(t testing.TB, o Options) *Stats {
	t.Helper()
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func only(t *testing.T, s *Stats) ModelView {
	t.Helper()
	v := s.Snapshot()
	if len(v) != 1 {
		t.Fatalf("%d models, want 1", len(v))
	}
	return v[0]
}

func TestWindowsCloseOnRecordTime(t *testing.T) {
	s := mustNew(t, Options{})
	for i := range 50 {
		s.Observe(endingAt("m", t0.Add(time.Duration(i)*100*time.Millisecond), 10*time.Millisecond))
	}
	v := only(t, s)
	if len(v.Closed) != 0 || v.Current.Count != 50 || !v.Current.Start.Equal(t0) {
		t.Fatalf("before the end: %d closed, current %d calls from %v", len(v.Closed), v.Current.Count, v.Current.Start)
	}
	// A call ending in the next window closes the first one.
	s.Observe(endingAt("m", t0.Add(10500*time.Millisecond), 30*time.Millisecond))
	v = only(t, s)
	if len(v.Closed) != 1 || v.Previous.Count != 50 || v.Previous.QPS != 5 || !v.Previous.Partial {
		t.Fatalf("after the end: %d closed, previous %+v", len(v.Closed), v.Previous)
	}
	if math.Abs(v.Previous.Mean-0.010) > 1e-12 || v.Previous.StdDev != 0 || v.Current.Count != 1 {
		t.Fatalf("previous mean %v stddev %v, current count %d", v.Previous.Mean, v.Previous.StdDev, v.Current.Count)
	}
	// Roll is idempotent and ignores times inside the open window.
	s.Roll(t0.Add(19 * time.Second))
	if n := len(only(t, s).Closed); n != 1 {
		t.Fatalf("Roll inside the window closed it: %d", n)
	}
	s.Roll(t0.Add(20 * time.Second))
	s.Roll(t0.Add(20 * time.Second))
	v = only(t, s)
	if len(v.Closed) != 2 || v.Previous.Count != 1 || v.Previous.Partial || !v.Previous.Start.Equal(t0.Add(10*time.Second)) {
		t.Fatalf("after Roll: %d closed, previous %+v", len(v.Closed), v.Previous)
	}
	// Empty windows close too, and hold the EMA.
	ema := v.Previous.EMA
	s.Roll(t0.Add(time.Minute))
	v = only(t, s)
	if len(v.Closed) != 6 || v.Previous.Count != 0 || relErr(v.Previous.EMA, ema) > 1e-12 || v.Previous.QPS != 0 {
		t.Fatalf("after empty windows: %d closed, previous %+v (EMA was %v)", len(v.Closed), v.Previous, ema)
	}
	// A record that arrives after its window closed lands in the open one.
	s.Observe(endingAt("m", t0.Add(5*time.Second), 10*time.Millisecond))
	if v := only(t, s); v.Current.Count != 1 || len(v.Closed) != 6 {
		t.Fatalf("late record: current %d, %d closed", v.Current.Count, len(v.Closed))
	}
	if _, err := json.Marshal(s.Snapshot()); err != nil {
		t.Fatalf("snapshot does not marshal: %v", err)
	}
}

func TestRollAfterLongIdle(t *testing.T) {
	s := mustNew(t, Options{History: 30})
	s.Observe(endingAt("m", t0.Add(time.Second), 20*time.Millisecond))
	start := time.Now()
	now := t0.Add(24 * time.Hour).Add(3 * time.Second)
	s.Roll(now)
	if d := time.Since(start); d > time.Second {
		t.Errorf("rolling a day of empty windows took %v", d)
	}
	v := only(t, s)
	if len(v.Closed) != 30 || v.Previous.Count != 0 || !v.Current.Start.Equal(now.Truncate(10*time.Second)) {
		t.Fatalf("%d closed, previous count %d, current from %v", len(v.Closed), v.Previous.Count, v.Current.Start)
	}
	if math.Abs(v.Previous.EMA-0.020) > 1e-12 {
		t.Errorf("EMA after a day idle %v, want the last level 0.020", v.Previous.EMA)
	}
	// The first busy window after the gap sets the EMA almost alone.
	for i := range 100 {
		s.Observe(endingAt("m", now.Add(time.Duration(i)*10*time.Millisecond), 50*time.Millisecond))
	}
	s.Roll(now.Add(10 * time.Second))
	if ema := only(t, s).Previous.EMA; math.Abs(ema-0.050) > 1e-9 {
		t.Errorf("EMA after the gap %v, want 0.050", ema)
	}
}

// sortedByEnd returns the recorded stream as calls, in order of their end.
func recordedCalls(t *testing.T) []*record.Call {
	starts, xs := recordedStream(t)
	calls := make([]*record.Call, len(xs))
	for i := range xs {
		start := t0.Add(time.Duration(starts[i] * float64(time.Second)))
		total := time.Duration(xs[i] * float64(time.Second))
		calls[i] = &record.Call{Start: start, End: total, Model: "rec", Version: "1", Code: "OK"}
	}
	sort.SliceStable(calls, func(i, j int) bool {
		return calls[i].Start.Add(calls[i].End).Before(calls[j].Start.Add(calls[j].End))
	})
	return calls
}

// The 1-minute view is the merge of its windows and equals statistics taken
// over all of its calls at once.
func TestMinuteViewEqualsWhole(t *testing.T) {
	s := mustNew(t, Options{})
	calls := recordedCalls(t)
	from, to := t0.Add(30*time.Second), t0.Add(90*time.Second)
	whole, _ := NewSketch(0.01, 2048)
	var w Welford
	var xs []float64
	for _, c := range calls {
		end := c.Start.Add(c.End)
		if !end.Before(to) {
			break
		}
		s.Observe(c)
		if !end.Before(from) {
			x := c.End.Seconds()
			whole.Add(x)
			w.Add(x)
			xs = append(xs, x)
		}
	}
	s.Roll(to)
	v := only(t, s)
	m := v.Minute
	if !m.Start.Equal(from) || m.Seconds != 60 || m.Partial {
		t.Fatalf("minute view from %v over %vs (partial %v)", m.Start, m.Seconds, m.Partial)
	}
	if m.Count != int64(len(xs)) || m.QPS != float64(len(xs))/60 {
		t.Fatalf("minute count %d qps %v, want %d", m.Count, m.QPS, len(xs))
	}
	var q [4]float64
	whole.Quantiles(Quantiles[:], q[:])
	if m.P50 != q[0] || m.P90 != q[1] || m.P99 != q[2] || m.P999 != q[3] {
		t.Errorf("minute quantiles %v %v %v %v, one sketch over all %v", m.P50, m.P90, m.P99, m.P999, q)
	}
	mean, variance := twoPass(xs)
	if relErr(m.Mean, mean) > 1e-9 || relErr(m.StdDev, math.Sqrt(variance)) > 1e-9 {
		t.Errorf("minute mean %v stddev %v, two-pass %v %v", m.Mean, m.StdDev, mean, math.Sqrt(variance))
	}
	// The six closed windows merged by hand give the same moments.
	var merged Welford
	for _, c := range v.Closed[len(v.Closed)-6:] {
		merged.Merge(c.Welford)
	}
	if merged.N != w.N || relErr(merged.Mean, w.Mean) > 1e-9 || relErr(merged.Variance(), w.Variance()) > 1e-9 {
		t.Errorf("windows merged %+v, whole %+v", merged, w)
	}
	// And the quantiles of the view keep the bound against exact ones.
	sorted := sortedCopy(xs)
	for i, qq := range Quantiles {
		want := exactQuantile(sorted, qq)
		if e := relErr([]float64{m.P50, m.P90, m.P99, m.P999}[i], want); e > 0.01*(1+1e-9) {
			t.Errorf("minute q=%v relative error %v", qq, e)
		}
	}
}

func TestEMAFollowsTheFormula(t *testing.T) {
	const tau = time.Minute
	// Two series see the same levels, one at 100 calls/s and one at 7:
	// a time-constant EMA must not care.
	s := mustNew(t, Options{EMATau: tau})
	level := func(k int) time.Duration {
		if k < 12 {
			return 10 * time.Millisecond
		}
		return 30 * time.Millisecond
	}
	for k := range 24 {
		ws := t0.Add(time.Duration(k) * 10 * time.Second)
		for i := range 1000 {
			s.Observe(endingAt("fast", ws.Add(time.Duration(i)*10*time.Millisecond), level(k)))
		}
		for i := range 70 {
			s.Observe(endingAt("slow", ws.Add(time.Duration(i)*140*time.Millisecond), level(k)))
		}
	}
	s.Roll(t0.Add(240 * time.Second))
	views := s.Snapshot()
	fast, slow := views[0].Closed, views[1].Closed
	// By hand: S = d·S + n·m, W = d·W + n.
	d := math.Exp(-10.0 / 60.0)
	var S, W float64
	for k := range 24 {
		S = d*S + 1000*level(k).Seconds()
		W = d*W + 1000
		want := S / W
		kk := k - (24 - len(fast))
		if kk < 0 {
			continue
		}
		if e := relErr(fast[kk].EMA, want); e > 1e-9 {
			t.Errorf("window %d: EMA %v want %v", k, fast[kk].EMA, want)
		}
		if e := relErr(slow[kk].EMA, fast[kk].EMA); e > 1e-9 {
			t.Errorf("window %d: EMA at 7/s %v, at 100/s %v", k, slow[kk].EMA, fast[kk].EMA)
		}
	}
	// One time constant after the step the EMA has covered 1−1/e of it.
	if got, want := fast[len(fast)-7].EMA, 0.010+0.020*(1-math.Exp(-1)); math.Abs(got-want) > 0.001 {
		t.Errorf("one τ after the step: EMA %v, want about %v", got, want)
	}
}

func TestFitOverClosedWindows(t *testing.T) {
	s := mustNew(t, Options{History: 30})
	const a, b = 0.012, 4e-5 // seconds, seconds per call/s
	r := rand.New(rand.NewPCG(1, 3))
	var xs, ys []float64
	for k := range 45 {
		ws := t0.Add(time.Duration(k) * 10 * time.Second)
		qps := 20 + r.IntN(200)
		n := qps * 10
		lat := time.Duration((a + b*float64(qps) + 0.001*r.NormFloat64()) * float64(time.Second))
		for i := range n {
			s.Observe(endingAt("m", ws.Add(time.Duration(i)*10*time.Second/time.Duration(n)), lat))
		}
		if k > 0 { // the first window is partial
			xs = append(xs, float64(qps))
			ys = append(ys, lat.Seconds())
		}
	}
	s.Roll(t0.Add(450 * time.Second))
	v := only(t, s)
	f := v.Previous.Fit
	xs, ys = xs[len(xs)-30:], ys[len(ys)-30:]
	wb, wa, wse := exactFit(xs, ys)
	if !f.OK || f.N != 30 {
		t.Fatalf("fit %+v", f)
	}
	if relErr(f.Slope, wb) > 1e-9 || relErr(f.Intercept, wa) > 1e-9 || relErr(f.SlopeStdErr, wse) > 1e-9 {
		t.Errorf("fit %v + %v·x (SE %v), exact %v + %v·x (SE %v)", f.Intercept, f.Slope, f.SlopeStdErr, wa, wb, wse)
	}
	if v.Current.Fit != f || v.Minute.Fit != f {
		t.Errorf("current/minute views carry another fit")
	}
}

func TestPhasesStagesAndCaps(t *testing.T) {
	s := mustNew(t, Options{MaxModels: 2, MaxStages: 2})
	c := &record.Call{
		Start:        t0,
		RequestEnd:   1 * time.Millisecond,
		UpstreamSent: 2 * time.Millisecond,
		FirstByte:    12 * time.Millisecond,
		ResponseEnd:  13 * time.Millisecond,
		End:          14 * time.Millisecond,
		Model:        "resnet 50", // sanitised to resnet_50
		Version:      "",          // unknown
		Stages: []record.Stage{
			{Name: "pre", Duration: time.Millisecond},
			{Name: "infer", Duration: 8 * time.Millisecond},
			{Name: "post", Duration: time.Millisecond},
			{Name: "extra", Duration: time.Millisecond},
		},
	}
	s.Observe(c)
	s.Observe(endingAt("b", t0.Add(time.Millisecond), time.Millisecond))
	s.Observe(endingAt("c", t0.Add(time.Millisecond), time.Millisecond))
	s.Observe(endingAt("d", t0.Add(time.Millisecond), time.Millisecond))
	views := s.Snapshot()
	if len(views) != 3 || views[0].Model != "resnet_50" || views[0].Version != "unknown" ||
		views[1].Model != "b" || views[2].Model != "other" || views[2].Version != "other" || views[2].Current.Count != 2 {
		t.Fatalf("models: %+v", views)
	}
	cur := views[0].Current
	want := map[string]float64{"ingress": 0.001, "upstream": 0.010, "transfer": 0.001, "egress": 0}
	if len(cur.Phases) != len(want) {
		t.Errorf("phases %+v", cur.Phases)
	}
	for _, p := range cur.Phases {
		if w, ok := want[p.Name]; !ok || math.Abs(p.Mean-w) > 1e-12 || p.Count != 1 {
			t.Errorf("phase %+v, want mean %v", p, w)
		}
	}
	if len(cur.Stages) != 3 || cur.Stages[0].Name != "pre" || cur.Stages[1].Name != "infer" ||
		cur.Stages[2].Name != "other" || cur.Stages[2].Count != 2 || math.Abs(cur.Stages[1].P99-0.008) > 0.008*0.01 {
		t.Errorf("stages %+v", cur.Stages)
	}
}

func TestSlowestCalls(t *testing.T) {
	s := mustNew(t, Options{SlowCalls: 3})
	for _, ms := range []int{5, 50, 7, 40, 3, 60, 45, 1} {
		s.Observe(endingAt("m", t0.Add(time.Second), time.Duration(ms)*time.Millisecond))
	}
	got := only(t, s).Current.Slowest
	if len(got) != 3 || got[0].Seconds != 0.060 || got[1].Seconds != 0.050 || got[2].Seconds != 0.045 || got[0].Code != "200" {
		t.Errorf("slowest %+v", got)
	}
}

// A slow call carries its trace id only when the head sampler kept the
// trace: the tracer fills TraceID for every call it sees, sampled or not.
func TestSlowestCallsTraceIDs(t *testing.T) {
	id := func(b byte) [16]byte { return [16]byte{0: 0xab, 15: b} }
	tests := []struct {
		name string
		ms   int
		kept bool
		id   [16]byte
		want string // hex, "" for none
	}{
		{"kept", 60, true, id(1), "ab000000000000000000000000000001"},
		{"not kept, id known", 50, false, id(2), ""},
		{"tracing off", 40, false, [16]byte{}, ""},
		{"kept, slowest", 70, true, id(3), "ab000000000000000000000000000003"},
	}
	s := mustNew(t, Options{SlowCalls: len(tests)})
	for _, tt := range tests {
		c := endingAt("m", t0.Add(time.Second), time.Duration(tt.ms)*time.Millisecond)
		c.TraceID, c.TraceKept = tt.id, tt.kept
		s.Observe(c)
	}
	got := only(t, s).Current.Slowest
	b, err := json.Marshal(got)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	var back []SlowCall
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("unmarshal %s: %v", b, err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for i, sc := range got {
				if sc.Seconds != float64(tt.ms)/1000 {
					continue
				}
				if s := hexOrEmpty(sc.TraceID); s != tt.want {
					t.Errorf("trace id %q, want %q", s, tt.want)
				}
				if back[i].TraceID != sc.TraceID {
					t.Errorf("JSON round trip gave %v, want %v (%s)", back[i].TraceID, sc.TraceID, b)
				}
				return
			}
			t.Fatalf("call of %d ms not among the slowest %+v", tt.ms, got)
		})
	}
	if n := strings.Count(string(b), `"traceId"`); n != 2 {
		t.Errorf("%d traceId fields in %s, want 2: absent ones are omitted", n, b)
	}
}

func hexOrEmpty(id TraceID) string {
	if id.IsZero() {
		return ""
	}
	return id.String()
}

func TestObserveDoesNotAllocate(t *testing.T) {
	s := mustNew(t, Options{})
	c := benchCall(t0, 20*time.Millisecond)
	// With tracing on, as most sidecars run: slow calls keep the id.
	c.TraceID, c.TraceKept = [16]byte{1, 2, 3}, true
	// Warm up past the first rolled-up view so windows are recycled.
	for i := range 10_000 {
		c.Start = t0.Add(time.Duration(i) * 10 * time.Millisecond)
		c.End = time.Duration(5+i%90) * time.Millisecond
		s.Observe(c)
	}
	i := 0
	n := testing.AllocsPerRun(2000, func() {
		c.Start = t0.Add(100*time.Second + time.Duration(i)*time.Millisecond)
		c.End = time.Duration(5+i%90) * time.Millisecond
		s.Observe(c)
		i++
	})
	if n != 0 {
		t.Errorf("Observe allocates %v times per call in steady state", n)
	}
}

func TestOptionsValidation(t *testing.T) {
	if _, err := New(Options{Window: time.Minute, View: 10 * time.Second}); err == nil {
		t.Error("view shorter than the window accepted")
	}
	if _, err := New(Options{Accuracy: 1.5}); err == nil {
		t.Error("accuracy 1.5 accepted")
	}
	s := mustNew(t, Options{Window: 15 * time.Second, View: 50 * time.Second})
	if s.k != 3 || s.Window() != 15*time.Second {
		t.Errorf("view of %d windows of %v", s.k, s.Window())
	}
}

// TestLongWindowDefaultView: a window longer than the default 1-minute view
// (alerting.window: 2m, for a slow model) is a valid setting, and the view
// nobody set covers one window rather than refusing to start.
func TestLongWindowDefaultView(t *testing.T) {
	for _, w := range []time.Duration{time.Minute, 90 * time.Second, 2 * time.Minute, 5 * time.Minute} {
		s, err := New(Options{Window: w})
		if err != nil {
			t.Errorf("window %v, default view: %v", w, err)
			continue
		}
		if s.k != 1 {
			t.Errorf("window %v: default view of %d windows, want 1", w, s.k)
		}
	}
}

// TestControlCallsAreNotLatency: a model load through the repository API
// names the model but is not one of its calls.
func TestControlCallsAreNotLatency(t *testing.T) {
	s := mustNew(t, Options{})
	s.Observe(endingAt("m", t0.Add(time.Second), 10*time.Millisecond))
	for _, method := range []string{record.MethodRepositoryLoad, record.MethodRepositoryUnload, record.MethodRepositoryIndex} {
		c := endingAt("m", t0.Add(2*time.Second), 5*time.Second)
		c.Method = method
		s.Observe(c)
	}
	if v := only(t, s); v.Current.Count != 1 {
		t.Fatalf("window holds %d calls, want the one inference", v.Current.Count)
	}
}

// A ticker that rolls every window through a long idle night decays the
// EMA's sums one window at a time until they underflow; the level they
// stand for must still be the last one.
func TestEMAHeldThroughLongIdleTicks(t *testing.T) {
	s := mustNew(t, Options{})
	for i := range 100 {
		s.Observe(endingAt("m", t0.Add(time.Duration(i)*10*time.Millisecond), 20*time.Millisecond))
	}
	for now := t0.Add(10 * time.Second); now.Before(t0.Add(14 * time.Hour)); now = now.Add(10 * time.Second) {
		s.Roll(now)
		if ema := only(t, s).Previous.EMA; math.Abs(ema-0.020) > 1e-12 {
			t.Fatalf("EMA %v after %v idle, want the last level 0.020", ema, now.Sub(t0))
		}
	}
}
