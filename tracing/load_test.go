package tracing

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/inferwatch/inferwatch/proto/inference"
	"github.com/inferwatch/inferwatch/sampling"
)

// The tests in this file drive real calls through in-process sidecars
// (client → proxy with the tracer hook → upstream, all on 127.0.0.1) and
// check issue 3's Done-when on what the tracer kept: the kept-traces rate
// under load steps, tail keeps of slow and failing calls, the tail budget
// under a storm, and consistent decisions along a chain of two sidecars.
//
// Statistics. A head decision is a Bernoulli draw on the trace id's
// randomness, so the head-kept count over a window of n calls at
// probability p is binomial: its relative standard deviation is
// sqrt((1-p)/(n·p)). The Done-when's ±15% is only a test, not a coin flip,
// when the window holds a few hundred kept traces: 500 kept at p = 0.1 give
// σ ≈ 4.2%, so ±15% is 3.5σ. That is why the adaptation test keeps the
// default target of 100/s (and with it the Done-when's "1k QPS → ~10%"
// literally) and scales the load steps instead of the target: a target
// scaled down to what small steps allow (say 20/s) would need windows of
// 25 s per step for the same confidence.

const (
	loadRoute    = "r"
	loadModel    = "mnist"
	loadInterval = 500 * time.Millisecond // sampler Interval: shorter than the default 1 s, so steps settle sooner
	// loadWorkers bounds the calls in flight, and the client's connections
	// to the proxy; a call due beyond it is late, not sent. It matches the
	// proxy's pool of 64 idle upstream connections: an open-loop client
	// that opened ever more connections when the machine stalls would turn a
	// hiccup into a collapse (connection churn on client, proxy and
	// upstream). The storm needs about 25 (300 slow calls/s × 80 ms).
	loadWorkers = 64
)

var loadKey = sampling.Key{Route: loadRoute, Model: loadModel}

// Headers between the load client and the test upstream. The upstream
// echoes what it received, so the client learns each call's trace id and
// sampled flag as the upstream saw them.
const (
	hdrRequestID  = "X-Load-Request-Id"  // set by the client, echoed
	hdrBehave     = "X-Load-Behave"      // "slow" or "fail": what the upstream does with the call
	hdrSeenParent = "X-Load-Traceparent" // the traceparent the upstream received
	hdrSeenState  = "X-Load-Tracestate"  // the tracestate the upstream received
)

// loadUpstream is a KServe v2 HTTP model for load: it answers at once,
// sleeps slowBy before answering a call marked slow, answers 500 to a call
// marked fail, and echoes the request id and the received trace context.
func loadUpstream(t testing.TB, slowBy time.Duration) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v2/models/{m}/infer", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		h := w.Header()
		h.Set(hdrRequestID, r.Header.Get(hdrRequestID))
		h.Set(hdrSeenParent, r.Header.Get("Traceparent"))
		h.Set(hdrSeenState, r.Header.Get("Tracestate"))
		h.Set("Content-Type", "application/json")
		switch r.Header.Get(hdrBehave) {
		case "slow":
			time.Sleep(slowBy)
		case "fail":
			w.WriteHeader(http.StatusInternalServerError)
			io.WriteString(w, `{"error":"injected failure"}`)
			return
		}
		io.WriteString(w, `{"model_name":"`+r.PathValue("m")+`","outputs":[{"name":"out","datatype":"FP32","shape":[1,2],"data":[0.5,0.5]}]}`)
	})
	return serveHTTP(t, mux)
}

// loadCall is one call the load client made.
type loadCall struct {
	id      int
	due     time.Time // when it was scheduled
	sent    time.Time // when it was sent; zero when it was late
	behave  string    // "", "slow" or "fail"
	status  int       // HTTP status; 0 when the call got no response
	err     error
	traceID string // from the traceparent the upstream received
	sampled bool   // its sampled flag
	state   string // the tracestate the upstream received
}

// loadResult is what pace returns: every call made, in id order, and how
// many calls were not sent because loadWorkers calls were in flight.
type loadResult struct {
	calls []loadCall
	late  int
	start time.Time
	end   time.Time
}

// achieved is the rate of calls sent in [from, to).
func (r loadResult) achieved(from, to time.Time) float64 {
	n := 0
	for i := range r.calls {
		if d := r.calls[i].sent; !d.Before(from) && d.Before(to) {
			n++
		}
	}
	return float64(n) / to.Sub(from).Seconds()
}

func newLoadClient(t testing.TB) *http.Client {
	tr := &http.Transport{MaxIdleConnsPerHost: loadWorkers, MaxConnsPerHost: loadWorkers, DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// pace sends HTTP infer calls to addr open loop: call i is due at
// start + i/qps whatever the earlier calls are doing (a late scheduler
// catches up from the start time, so the rate does not drift). behave says
// what the upstream should do with call i (called on the scheduling
// goroutine only). It returns once every call sent has finished.
func pace(hc *http.Client, addr string, qps float64, dur time.Duration, firstID int, behave func(i int) string) loadResult {
	n := int(qps * dur.Seconds())
	res := loadResult{calls: make([]loadCall, n)}
	slots := make(chan struct{}, loadWorkers)
	var wg sync.WaitGroup
	url := "http://" + addr + "/v2/models/" + loadModel + "/infer"
	res.start = time.Now()
	for i := range n {
		due := res.start.Add(time.Duration(float64(i) * float64(time.Second) / qps))
		if wait := time.Until(due); wait > 0 {
			time.Sleep(wait)
		}
		c := &res.calls[i]
		c.id, c.due = firstID+i, due
		if behave != nil {
			c.behave = behave(i)
		}
		select {
		case slots <- struct{}{}:
			c.sent = time.Now()
		default:
			res.late++
			c.err = fmt.Errorf("late: %d calls in flight", loadWorkers)
			continue
		}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			c.do(hc, url)
		}()
	}
	// The step lasts dur: the next one must not start inside this one's
	// window.
	res.end = res.start.Add(dur)
	time.Sleep(time.Until(res.end))
	wg.Wait()
	return res
}

func (c *loadCall) do(hc *http.Client, url string) {
	req, err := http.NewRequest("POST", url, strings.NewReader(inferBody))
	if err != nil {
		c.err = err
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(hdrRequestID, strconv.Itoa(c.id))
	if c.behave != "" {
		req.Header.Set(hdrBehave, c.behave)
	}
	res, err := hc.Do(req)
	if err != nil {
		c.err = err
		return
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	c.status = res.StatusCode
	if got := res.Header.Get(hdrRequestID); got != strconv.Itoa(c.id) {
		c.err = fmt.Errorf("response echoes request id %q, want %d", got, c.id)
		return
	}
	tp := res.Header.Get(hdrSeenParent)
	c.traceID, c.sampled, c.err = parseTP(tp)
	c.state = res.Header.Get(hdrSeenState)
}

// parseTP reads a version-00 traceparent: trace id and sampled flag.
func parseTP(tp string) (traceID string, sampled bool, err error) {
	f := strings.Split(tp, "-")
	if len(f) != 4 || f[0] != "00" || len(f[1]) != 32 || len(f[2]) != 16 || len(f[3]) != 2 {
		return "", false, fmt.Errorf("upstream got traceparent %q", tp)
	}
	flags, err := strconv.ParseUint(f[3], 16, 8)
	if err != nil {
		return "", false, fmt.Errorf("traceparent %q: flags: %v", tp, err)
	}
	return f[1], flags&1 == 1, nil
}

// thOf returns the `th` sub-key of tracestate's `ot` entry, "" if none.
func thOf(tracestate string) string {
	for _, m := range strings.Split(tracestate, ",") {
		v, ok := strings.CutPrefix(strings.TrimSpace(m), "ot=")
		if !ok {
			continue
		}
		for _, sub := range strings.Split(v, ";") {
			if th, ok := strings.CutPrefix(sub, "th:"); ok {
				return th
			}
		}
	}
	return ""
}

// thProbability is the sampling probability a `th` value encodes, read
// independently of package sampling: th is the rejection threshold T as up
// to 14 hex digits with trailing zeros dropped, and p = (2^56 − T) / 2^56.
func thProbability(th string) (float64, error) {
	if th == "" || len(th) > 14 {
		return 0, fmt.Errorf("th %q: want 1 to 14 hex digits", th)
	}
	t, err := strconv.ParseUint(th+strings.Repeat("0", 14-len(th)), 16, 64)
	if err != nil {
		return 0, fmt.Errorf("th %q: %v", th, err)
	}
	return float64(uint64(1)<<56-t) / float64(uint64(1)<<56), nil
}

// loadTracing is a tracer with the real sampler, its Run loop going,
// holding every kept trace in memory and exporting them to an in-process
// exporter that records what it received.
type loadTracing struct {
	tr         *Tracer
	smp        *sampling.Sampler
	smpMetrics *metrics.Set // the sampler's inferwatch_traces_* series
	trMetrics  *metrics.Set // the tracer's: exported, dropped

	mu       sync.Mutex
	exported map[string]string // trace id -> its spans' sampling.tail attribute ("" for none)
	spans    int
}

func newLoadTracing(t testing.TB, cfg sampling.Config) *loadTracing {
	t.Helper()
	lt := &loadTracing{smpMetrics: metrics.NewSet(), trMetrics: metrics.NewSet(), exported: map[string]string{}}
	cfg.Metrics = lt.smpMetrics
	var err error
	if lt.smp, err = sampling.New(cfg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go lt.smp.Run(ctx)
	exp := exporterFunc(func(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
		lt.mu.Lock()
		defer lt.mu.Unlock()
		for _, sp := range spans {
			lt.spans++
			id := sp.SpanContext().TraceID().String()
			tail := lt.exported[id]
			for _, a := range sp.Attributes() {
				if a.Key == sampling.TailAttribute {
					tail = a.Value.AsString()
				}
			}
			lt.exported[id] = tail
		}
		return nil
	})
	lt.tr, err = newTracer(Config{Sampler: lt.smp, Keep: 1 << 17, Logger: discardLogger, Metrics: lt.trMetrics,
		QueueSize: 1 << 14, BatchTimeout: 50 * time.Millisecond}, exp)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lt.tr.Close(context.Background()) })
	return lt
}

// flush waits until everything kept has been exported (call after the
// sidecars stopped) and checks that nothing was dropped.
func (lt *loadTracing) flush(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := lt.tr.Close(ctx); err != nil {
		t.Fatalf("close the tracer: %v", err)
	}
	for _, r := range []string{dropQueueFull, dropExportFailed, dropShutdown} {
		if n := metricValue(t, lt.trMetrics, `inferwatch_traces_dropped_total{reason="`+r+`"}`); n != 0 {
			t.Errorf("%v traces dropped (%s)", n, r)
		}
	}
}

// checkExported checks that the exporter received exactly the kept traces,
// tail-kept ones marked with their reason (sampling.tail) and head-sampled
// ones unmarked. The store must hold every kept trace (Keep is large).
func (lt *loadTracing) checkExported(t testing.TB, kept []Trace) {
	t.Helper()
	lt.mu.Lock()
	defer lt.mu.Unlock()
	bad := 0
	for _, k := range kept {
		tail, ok := lt.exported[k.TraceID]
		if !ok || tail != k.TailReason {
			if bad < 5 {
				t.Errorf("trace %s kept (%s %q), exported %v with sampling.tail %q", k.TraceID, k.Sampling, k.TailReason, ok, tail)
			}
			bad++
		}
	}
	if bad > 0 || len(lt.exported) != len(kept) {
		t.Errorf("%d traces kept, %d exported, %d of the kept ones missing or mismarked", len(kept), len(lt.exported), bad)
	}
}

// probe reads the sampler's probability for loadKey every 100 ms from
// probeProbability until stop.
type probe struct {
	done chan struct{}
	got  chan []probeReading
	rs   []probeReading
}

type probeReading struct {
	at time.Time
	p  float64
}

func probeProbability(smp *sampling.Sampler) *probe {
	pr := &probe{done: make(chan struct{}), got: make(chan []probeReading, 1)}
	go func() {
		var rs []probeReading
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-pr.done:
				pr.got <- rs
				return
			case now := <-tick.C:
				rs = append(rs, probeReading{now, smp.Probability(loadKey)})
			}
		}
	}()
	return pr
}

func (pr *probe) stop() {
	close(pr.done)
	pr.rs = <-pr.got
}

// mean is the mean of the readings taken in [from, to), after stop.
func (pr *probe) mean(from, to time.Time) float64 {
	var sum float64
	n := 0
	for _, r := range pr.rs {
		if !r.at.Before(from) && r.at.Before(to) {
			sum += r.p
			n++
		}
	}
	return sum / float64(max(n, 1))
}

// countKept counts kept traces by sampling ("head" or "tail") whose call
// started in [from, to).
func countKept(traces []Trace, how string, from, to time.Time) int {
	n := 0
	for i := range traces {
		tr := &traces[i]
		if tr.Sampling == how && !tr.Start.Before(from) && tr.Start.Before(to) {
			n++
		}
	}
	return n
}

// withinRel reports whether got is within ±tol (relative) of want.
func withinRel(got, want, tol float64) bool { return math.Abs(got-want) <= tol*want }

// checkCalls fails the test for calls that went wrong. Late calls (not sent
// because loadWorkers calls were in flight: the machine is too busy for the
// load) are only logged: they are not the proxy's fault, the sampler adapts
// to the load that arrives, and the rates are measured on the calls sent.
func checkCalls(t *testing.T, name string, r loadResult) {
	t.Helper()
	bad := 0
	for _, c := range r.calls {
		if c.sent.IsZero() {
			continue
		}
		wantStatus := http.StatusOK
		if c.behave == "fail" {
			wantStatus = http.StatusInternalServerError
		}
		if c.err != nil || c.status != wantStatus {
			if bad < 5 {
				t.Errorf("%s: call %d (%q): status %d, err %v", name, c.id, c.behave, c.status, c.err)
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d calls went wrong", name, bad, len(r.calls))
	}
	if r.late > 0 {
		t.Logf("%s: %d of %d calls not sent: %d calls were in flight (the machine is too busy for this load)",
			name, r.late, len(r.calls), loadWorkers)
	}
}

// TestLoadAdaptation is the adaptation Done-when under real load: open-loop
// HTTP calls through the proxy in steps of 100 → 1000 → 2500 QPS with the
// sampler's default target of 100 kept traces per second (Interval 500 ms to
// settle sooner). After a settling time of three intervals the head-kept
// rate, counted from the traces the tracer kept, is within ±15% of the
// target at each step, and at 1000 QPS the head probability is about 10%.
//
// Scaling: the issue's steps are 100 → 1000 → 5000 QPS, head probabilities
// 1 → 0.1 → 0.02. Two shared cores carry client, proxy and upstream, so the
// top step is 2500 QPS (p = 0.04) rather than 5000; the first two steps and
// the target are the issue's own (see the statistics note at the top of
// the file for why the target is not scaled down instead). On a machine
// too busy for 2500 QPS the client sends fewer calls (logged); the rate and
// the probability are then checked against the load that arrived, which is
// what the sampler adapts to.
func TestLoadAdaptation(t *testing.T) {
	if testing.Short() {
		t.Skip("drives load for about 16 s")
	}
	if raceEnabled {
		// CI runs it in the plain pass; under -race 2 cores cannot offer the load.
		t.Skip("measures kept traces per second under load: not with the race detector's slowdown")
	}
	const target = sampling.DefaultTargetPerSecond
	lt := newLoadTracing(t, sampling.Config{Interval: loadInterval})
	tr, smp, set := lt.tr, lt.smp, lt.smpMetrics
	s := startSidecar(t, loadRoute, loadUpstream(t, 0), false, tr)
	hc := newLoadClient(t)

	// Each step settles for three intervals (a rise is taken at the first
	// tick that sees it whole, at most two intervals in), then is measured.
	steps := []struct {
		qps         float64
		dur, settle time.Duration
		issueP      float64 // the issue's figure for the step's probability; 0: none
	}{
		{qps: 100, dur: 3 * time.Second, settle: 1500 * time.Millisecond},
		{qps: 1000, dur: 6500 * time.Millisecond, settle: 1500 * time.Millisecond, issueP: 0.1},
		{qps: 2500, dur: 6500 * time.Millisecond, settle: 1500 * time.Millisecond},
	}
	const tol = 0.15
	var results []loadResult
	var probes []*probe
	firstID := 0
	for _, st := range steps {
		pr := probeProbability(smp)
		r := pace(hc, s.addr, st.qps, st.dur, firstID, nil)
		pr.stop()
		probes = append(probes, pr)
		results = append(results, r)
		firstID += len(r.calls)
	}
	// Close the client's connections first: a connection it dialled but
	// never used would hold Shutdown for 5 s.
	hc.CloseIdleConnections()
	s.stop()    // every record delivered to the tracer
	lt.flush(t) // and exported
	traces := tr.Traces(0, "")
	lt.checkExported(t, traces)

	sent := 0
	for i, st := range steps {
		r := results[i]
		sent += len(r.calls) - r.late
		name := fmt.Sprintf("step %.0f QPS", st.qps)
		checkCalls(t, name, r)
		from, to := r.start.Add(st.settle), r.end
		secs := to.Sub(from).Seconds()
		qps := r.achieved(from, to)
		kept := countKept(traces, "head", from, to)
		rate := float64(kept) / secs
		p := probes[i].mean(from, to)
		sigma := math.Sqrt(float64(kept)*(1-min(p, 1))) / float64(max(kept, 1))
		t.Logf("%s: achieved %.0f QPS, head-kept %d in %.1f s = %.1f/s (target %d/s, %+.1f%%, binomial σ %.1f%%), mean probability %.4f (target/QPS %.4f), late %d",
			name, qps, kept, secs, rate, target, 100*(rate/target-1), 100*sigma, p, target/qps, r.late)
		if !withinRel(rate, target, tol) {
			t.Errorf("%s: head-kept %.1f/s, want %d/s ± 15%%", name, rate, target)
		}
		// The probability follows the load the sampler saw, whatever the
		// client achieved: p ≈ target/QPS (capped at 1).
		if want := min(1, target/qps); !withinRel(p, want, tol) {
			t.Errorf("%s: head probability %.4f, want target/QPS = %.4f ± 15%%", name, p, want)
		}
		if st.issueP == 0 {
			if qps < 0.9*st.qps {
				t.Logf("%s: the client achieved only %.0f QPS: the step was smaller than planned", name, qps)
			}
			continue
		}
		// The issue's figure, if the client achieved the step's load.
		if !withinRel(qps, st.qps, 0.05) {
			t.Errorf("%s: the client achieved %.0f QPS, not the step's %.0f (machine too busy?)", name, qps, st.qps)
		} else if !withinRel(p, st.issueP, tol) {
			t.Errorf("%s: head probability %.4f, want about %.2f", name, p, st.issueP)
		}
	}
	// Every call was considered, and every head keep reached the store.
	considered := metricValue(t, set, "inferwatch_traces_considered_total")
	headKept := metricValue(t, set, "inferwatch_traces_head_kept_total")
	heads := countKept(traces, "head", time.Time{}, time.Now())
	t.Logf("%d calls: considered %v, head-kept %v (store holds %d head, %d tail; %d traces, %d spans exported)",
		sent, considered, headKept, heads, len(traces)-heads, len(lt.exported), lt.spans)
	if int(considered) != sent {
		t.Errorf("sampler considered %v calls, the client sent %d", considered, sent)
	}
	if int(headKept) != heads {
		t.Errorf("sampler head-kept %v, the tracer holds %d head-sampled traces", headKept, heads)
	}
}

// TestLoadTail is the tail Done-when under real load: 1000 QPS through the
// proxy (head p ≈ 0.1 at the default target) with the upstream making 1% of
// calls 80 ms slower (the model's SLO is 50 ms) and answering 0.5% with
// HTTP 500. Every slow and every failed call's trace is kept (by the head
// or by the tail with the right reason) while the head rate stays within
// ±15% of target. Then a storm, 30% of calls slow for 4 s: the tail keeps
// stay within the budget plus the bucket's one-second burst.
//
// Sizes: the budget is 40/s, as docs/sampling.md says 1000 QPS with 1% slow
// and 0.5% failing needs (13.5/s of them not head-sampled, plus the calls
// above the P99, which may only use the upper half of the bucket). The SLO
// of 50 ms and the slowdown of 80 ms are well above the ~0.2 ms a normal
// call takes, so a scheduling hiccup on a busy machine does not make
// normal calls miss the SLO and eat the budget.
func TestLoadTail(t *testing.T) {
	if testing.Short() {
		t.Skip("drives load for about 12 s")
	}
	if raceEnabled {
		// CI runs it in the plain pass; under -race 2 cores cannot offer the load.
		t.Skip("measures kept traces per second under load: not with the race detector's slowdown")
	}
	const (
		qps     = 1000
		target  = sampling.DefaultTargetPerSecond
		budget  = 40
		slo     = 50 * time.Millisecond
		slowBy  = 80 * time.Millisecond
		settle  = 1500 * time.Millisecond
		steady  = 7500 * time.Millisecond // settle, then 6 s measured
		storm   = 4 * time.Second
		pSlow   = 0.01
		pFail   = 0.005
		pStormy = 0.30
	)
	lt := newLoadTracing(t, sampling.Config{Interval: loadInterval, TailBudgetPerSecond: budget,
		SLO: map[string]time.Duration{loadModel: slo}})
	tr, smp, set := lt.tr, lt.smp, lt.smpMetrics
	s := startSidecar(t, loadRoute, loadUpstream(t, slowBy), false, tr)
	hc := newLoadClient(t)
	rnd := rand.New(rand.NewPCG(3, 1))
	behave := func(slowShare float64) func(int) string {
		return func(int) string {
			switch x := rnd.Float64(); {
			case x < pFail:
				return "fail"
			case x < pFail+slowShare:
				return "slow"
			}
			return ""
		}
	}
	tailKept := func() float64 {
		var n float64
		for _, r := range []string{sampling.ReasonError, sampling.ReasonSLO, sampling.ReasonP99} {
			n += metricValue(t, set, `inferwatch_traces_tail_kept_total{reason="`+r+`"}`)
		}
		return n
	}

	pr := probeProbability(smp)
	steadyRun := pace(hc, s.addr, qps, steady, 0, behave(pSlow))
	pr.stop()
	exhaustedSteady := metricValue(t, set, "inferwatch_traces_tail_budget_exhausted_total")

	// The storm. The budget bound is checked on the tail keeps decided from
	// one second into the storm (the full bucket spent by then) until its
	// slow calls have ended.
	var stormRun loadResult
	done := make(chan struct{})
	go func() {
		defer close(done)
		stormRun = pace(hc, s.addr, qps, storm, len(steadyRun.calls), behave(pStormy))
	}()
	time.Sleep(time.Second)
	keptA, atA := tailKept(), time.Now()
	<-done
	time.Sleep(slowBy + 100*time.Millisecond) // the last slow calls end and reach the tracer
	keptB, atB := tailKept(), time.Now()
	hc.CloseIdleConnections()
	s.stop()
	lt.flush(t)
	traces := tr.Traces(0, "")
	lt.checkExported(t, traces)
	checkCalls(t, "steady", steadyRun)
	checkCalls(t, "storm", stormRun)

	// 1. Every slow and failed call of the steady phase was kept.
	byID := make(map[string]*Trace, len(traces))
	for i := range traces {
		byID[traces[i].TraceID] = &traces[i]
	}
	var nSlow, nFail, headSlowFail, missed int
	for _, c := range steadyRun.calls {
		if c.behave == "" || c.traceID == "" {
			continue
		}
		if c.behave == "slow" {
			nSlow++
		} else {
			nFail++
		}
		k := byID[c.traceID]
		wantReason := map[string]string{"slow": sampling.ReasonSLO, "fail": sampling.ReasonError}[c.behave]
		lt.mu.Lock()
		_, exported := lt.exported[c.traceID]
		lt.mu.Unlock()
		switch {
		case k == nil || !exported:
			missed++
			if missed <= 5 {
				t.Errorf("%s call %d (trace %s, head-sampled %v): kept %v, exported %v", c.behave, c.id, c.traceID, c.sampled, k != nil, exported)
			}
		case k.Sampling == "head":
			headSlowFail++
			if !c.sampled {
				t.Errorf("%s call %d: kept as head-sampled, but the upstream saw the sampled flag off", c.behave, c.id)
			}
		case k.Sampling == "tail" && k.TailReason != wantReason:
			t.Errorf("%s call %d: tail-kept for %q, want %q", c.behave, c.id, k.TailReason, wantReason)
		}
	}
	t.Logf("steady: %d slow, %d failed calls; %d not kept and exported, %d head-sampled; budget exhausted %v times",
		nSlow, nFail, missed, headSlowFail, exhaustedSteady)
	if missed > 0 {
		t.Errorf("%d of %d slow or failed calls not kept and exported (budget exhausted %v times)", missed, nSlow+nFail, exhaustedSteady)
	}
	if nSlow < 30 || nFail < 12 {
		t.Errorf("only %d slow and %d failed calls: the test did not test much", nSlow, nFail)
	}

	// 2. The head rate stayed on target meanwhile.
	from, to := steadyRun.start.Add(settle), steadyRun.end
	head := countKept(traces, "head", from, to)
	rate := float64(head) / to.Sub(from).Seconds()
	perSec := make([]int, int(steady/time.Second)+1)
	for i := range traces {
		if k := &traces[i]; k.Sampling == "head" && !k.Start.Before(steadyRun.start) {
			if b := int(k.Start.Sub(steadyRun.start) / time.Second); b < len(perSec) {
				perSec[b]++
			}
		}
	}
	t.Logf("steady: achieved %.0f QPS, head-kept %.1f/s (target %d, %+.1f%%, per second %v), mean probability %.4f, tail-kept %d",
		steadyRun.achieved(from, to), rate, target, 100*(rate/target-1), perSec, pr.mean(from, to), countKept(traces, "tail", from, to))
	if !withinRel(rate, target, 0.15) {
		t.Errorf("head-kept %.1f/s with slow and failing calls, want %d/s ± 15%%", rate, target)
	}

	// 3. The storm stayed within the budget: at most the budget for the
	// time elapsed plus the bucket's one-second burst.
	secs := atB.Sub(atA).Seconds()
	kept := keptB - keptA
	limit := budget*secs + budget
	exhausted := metricValue(t, set, "inferwatch_traces_tail_budget_exhausted_total") - exhaustedSteady
	slowStorm := 0
	for _, c := range stormRun.calls {
		if c.behave == "slow" && !c.sent.IsZero() {
			slowStorm++
		}
	}
	// Tail keeps per second of the storm, by when the call ended.
	bins := make([]int, int(storm/time.Second)+1)
	for i := range traces {
		k := &traces[i]
		end := k.Start.Add(time.Duration(k.DurationNS))
		if k.Sampling == "tail" && !end.Before(stormRun.start) {
			if b := int(end.Sub(stormRun.start) / time.Second); b < len(bins) {
				bins[b]++
			}
		}
	}
	t.Logf("storm: %d slow calls of %d; tail keeps per second %v; %.0f tail keeps in the %.2f s from 1 s in (%.1f/s, budget %d/s, bound %.0f); budget exhausted %v times",
		slowStorm, len(stormRun.calls), bins, kept, secs, kept/secs, budget, limit, exhausted)
	if kept > limit {
		t.Errorf("storm: %.0f tail keeps in %.2f s, over the budget %d/s plus a second's burst (%.0f)", kept, secs, budget, limit)
	}
	// And the budget, not something else, is what limited them.
	if kept < 0.8*budget*secs || exhausted < float64(slowStorm)/2 {
		t.Errorf("storm: %.0f tail keeps in %.2f s and %v refused: the storm did not press on the budget", kept, secs, exhausted)
	}
}

// TestLoadChainConsistent is the chain Done-when with real proxies: client →
// sidecar A → sidecar B → upstream, over HTTP and over gRPC. Both samplers
// have the same fixed probability (Floor = Ceiling = 0.3, so it does not
// depend on the QPS either sees). A starts every trace and decides; B,
// which receives A's traceparent and tracestate, follows it (parent-based)
// and takes its probability from A's th. The head-kept trace ids of A, of B
// and the ones the upstream received sampled are the same set, and the th
// the upstream receives encodes the probability A's sampler used.
func TestLoadChainConsistent(t *testing.T) {
	const (
		p     = 0.3
		calls = 3000
		conc  = 8
	)
	for _, proto := range []string{"http", "grpc"} {
		t.Run(proto, func(t *testing.T) {
			cfg := sampling.Config{Floor: p, Ceiling: p, Interval: loadInterval}
			ltA, ltB := newLoadTracing(t, cfg), newLoadTracing(t, cfg)
			trA, trB, smpA := ltA.tr, ltB.tr, ltA.smp

			var mu sync.Mutex
			seen := map[string]string{} // trace id -> traceparent + " " + tracestate the upstream got
			record := func(tp, ts string) {
				id, _, _ := parseTP(tp)
				mu.Lock()
				seen[id] = tp + " " + ts
				mu.Unlock()
			}
			var up string
			grpcUp := proto == "grpc"
			if grpcUp {
				up = startGRPCModel(t, grpcModel{onCall: func(_ context.Context, md metadata.MD) func() {
					record(strings.Join(md.Get("traceparent"), ","), strings.Join(md.Get("tracestate"), ","))
					return func() {}
				}})
			} else {
				up = httpModel(t, func(r *http.Request) func() {
					record(r.Header.Get("Traceparent"), r.Header.Get("Tracestate"))
					return func() {}
				})
			}
			b := startSidecar(t, "b", up, grpcUp, trB)
			a := startSidecar(t, "a", b.addr, grpcUp, trA)

			var call func() error
			var closeClient func() // before the sidecars stop, so that Shutdown finds no idle client connections
			if grpcUp {
				conn, err := grpc.NewClient(a.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
				if err != nil {
					t.Fatal(err)
				}
				closeClient = func() { conn.Close() }
				t.Cleanup(closeClient) // on an early end
				cl := inference.NewGRPCInferenceServiceClient(conn)
				req := &inference.ModelInferRequest{ModelName: loadModel, Id: "c",
					Inputs: []*inference.ModelInferRequest_InferInputTensor{{Name: "input", Datatype: "FP32", Shape: []int64{1, 4},
						Contents: &inference.InferTensorContents{Fp32Contents: []float32{1, 2, 3, 4}}}}}
				call = func() error {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					_, err := cl.ModelInfer(ctx, req)
					return err
				}
			} else {
				hc := newLoadClient(t)
				call = func() error { return postInfer(hc, a.addr, loadModel, nil) }
				closeClient = hc.CloseIdleConnections
			}
			start := time.Now()
			var wg sync.WaitGroup
			errs := make(chan error, conc)
			for w := range conc {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := w; i < calls; i += conc {
						if err := call(); err != nil {
							errs <- fmt.Errorf("call %d: %w", i, err)
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			took := time.Since(start)
			closeClient()
			a.stop()
			b.stop()
			ltA.flush(t)
			ltB.flush(t)
			ltA.checkExported(t, trA.Traces(0, ""))
			ltB.checkExported(t, trB.Traces(0, ""))

			headIDs := func(tr *Tracer) (map[string]float64, int) {
				ids := map[string]float64{}
				all := tr.Traces(0, "")
				for _, k := range all {
					if k.Sampling == "head" {
						ids[k.TraceID] = k.Probability
					}
				}
				return ids, len(all)
			}
			idsA, allA := headIDs(trA)
			idsB, allB := headIDs(trB)
			mu.Lock()
			defer mu.Unlock()
			upSampled := map[string]bool{}
			pA := smpA.Probability(sampling.Key{Route: "a", Model: map[bool]string{true: "", false: loadModel}[grpcUp]})
			thSeen := map[string]int{}
			for id, v := range seen {
				tp, ts, _ := strings.Cut(v, " ")
				_, sampled, err := parseTP(tp)
				if err != nil {
					t.Fatal(err)
				}
				th := thOf(ts)
				if sampled {
					upSampled[id] = true
					thSeen[th]++
				} else if th != "" {
					t.Errorf("trace %s not sampled, yet the upstream got th %q (tracestate %q)", id, th, ts)
				}
			}
			t.Logf("%d calls in %v (%.0f/s) through two sidecars at p = %.6f: A kept %d head (%d in all), B %d head (%d in all), upstream saw %d sampled; th values %v",
				len(seen), took.Round(time.Millisecond), float64(len(seen))/took.Seconds(), pA, len(idsA), allA, len(idsB), allB, len(upSampled), thSeen)
			if len(seen) != calls {
				t.Fatalf("the upstream saw %d distinct traces, want %d", len(seen), calls)
			}
			// The three sets are the same.
			for id := range idsA {
				if _, ok := idsB[id]; !ok {
					t.Errorf("trace %s head-kept by A, not by B", id)
				}
				if !upSampled[id] {
					t.Errorf("trace %s head-kept by A, but the upstream got it unsampled", id)
				}
			}
			for id := range idsB {
				if _, ok := idsA[id]; !ok {
					t.Errorf("trace %s head-kept by B, not by A", id)
				}
			}
			for id := range upSampled {
				if _, ok := idsA[id]; !ok {
					t.Errorf("trace %s sampled at the upstream, not head-kept by A", id)
				}
			}
			// The count is a probability-p sample (5σ).
			if mean := p * calls; math.Abs(float64(len(idsA))-mean) > 5*math.Sqrt(mean*(1-p)) {
				t.Errorf("A kept %d of %d at p = %v, expected about %.0f", len(idsA), calls, p, mean)
			}
			// th encodes the probability used, on the wire and on both sides.
			if !withinRel(pA, p, 1e-3) {
				t.Errorf("A's probability %v, want about %v", pA, p)
			}
			if len(thSeen) != 1 {
				t.Errorf("the upstream got th values %v, want one", thSeen)
			}
			for th := range thSeen {
				got, err := thProbability(th)
				if err != nil {
					t.Fatal(err)
				}
				if got != pA {
					t.Errorf("th %q encodes p = %v; A's sampler used %v", th, got, pA)
				}
			}
			for id, pr := range idsA {
				if pr != pA {
					t.Errorf("A's trace %s has probability %v, want %v", id, pr, pA)
					break
				}
			}
			for id, pr := range idsB {
				if pr != pA {
					t.Errorf("B's trace %s has probability %v (from the th it received), want A's %v", id, pr, pA)
					break
				}
			}
		})
	}
}
