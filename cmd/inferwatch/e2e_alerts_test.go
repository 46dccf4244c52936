package main

// End-to-end tests of the demo's live alerting (issue 4's Done-when): the
// real binary runs `inferwatch demo` with 1 s windows and injected faults
// while the test polls the admin API (/api/v1/alerts every 200 ms,
// /api/v1/stats every second) and records what the rules did, when.
//
// Sizing the faults. The demo's model server runs --workers executions at
// once (2 by default) and the load is 200 calls/s, so a delay d added to
// every inference uses 200·d/workers of it: with 2 workers, at d = 10 ms it
// is saturated, completed calls per window fall below the rules' MinCount
// (100), the windows are not judged, and a firing alert even counts them as
// clear. The step test therefore adds 5 ms. The spike scenarios give the
// model server 32 workers and a base latency of 20 ms (a step at 1 ms, so
// from the start): the demo's MLP answers in well under a millisecond,
// where the jitter of a shared 2-core host alone moves a 1 s window's P99
// by more than 30% (see TestE2EDemoCleanRunFiresNothing), and the spike's
// effect would be indistinguishable from the host's.
//
// At 200 calls/s echo gets a quarter of the load, 50 calls per 1 s window,
// below MinCount: its rules never judge a window in these runs, and the
// tests only check that echo fires nothing before the faults.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/alerting"
	"github.com/inferwatch/inferwatch/internal/exposition"
	"github.com/inferwatch/inferwatch/internal/testenv"
	"github.com/inferwatch/inferwatch/windowstats"
)

// The rule settings the assertions depend on: the demo sets only the SLA of
// mnist-mlp, so these are alerting.DefaultThresholds.
var alertDefaults = alerting.DefaultThresholds()

// demoWindow is the window length of every run here.
const demoWindow = time.Second

// demoRun is a running `inferwatch demo` and what the test saw of it.
type demoRun struct {
	*proc
	t     *testing.T
	admin string // host:port
	// The model server starts between these two instants: after the exec,
	// before the sidecar logs its admin address. Fault times are offsets
	// from it.
	startLo, startHi time.Time

	stopPoll chan struct{}
	pollDone chan struct{}

	mu      sync.Mutex
	polls   []alertPoll
	windows map[string]map[int64]windowstats.WindowView // "model:version" → window start (Unix ns) → closed window
	pollErr error                                       // the last failed poll, for the log
	pollOK  int
}

// alertPoll is one answer of /api/v1/alerts.
type alertPoll struct {
	at     time.Time
	alerts []alerting.Alert
}

// startDemo runs `inferwatch demo --window 1s args...` with the admin API on
// a free loopback port and polls it until the process exits.
func startDemo(t *testing.T, args ...string) *demoRun {
	t.Helper()
	if testing.Short() {
		t.Skip("runs the demo for half a minute or more")
	}
	all := append([]string{"demo", "--window", demoWindow.String(), "--admin-listen", "127.0.0.1:0", "--log-level", "info",
		"--grpc-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"}, args...)
	d := &demoRun{t: t, startLo: time.Now(), stopPoll: make(chan struct{}), pollDone: make(chan struct{}),
		windows: map[string]map[int64]windowstats.WindowView{}}
	d.proc = start(t, "demo", all...)
	d.admin = d.waitLine(adminLine, 15*time.Second)[1]
	d.startHi = time.Now()
	t.Logf("demo %s: admin %s, model server started within %v", strings.Join(args, " "), d.admin, d.startHi.Sub(d.startLo).Round(time.Millisecond))
	go d.poll()
	t.Cleanup(d.stopPolling)
	return d
}

func (d *demoRun) stopPolling() {
	select {
	case <-d.stopPoll:
	default:
		close(d.stopPoll)
	}
	<-d.pollDone
}

// poll records /api/v1/alerts every 200 ms and the closed windows of
// /api/v1/stats every second, until the process exits or the test ends.
func (d *demoRun) poll() {
	defer close(d.pollDone)
	c := &http.Client{Timeout: time.Second}
	get := func(path string, v any) error {
		res, err := c.Get("http://" + d.admin + path)
		if err != nil {
			return err
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err != nil {
			return err
		}
		if res.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", path, res.Status)
		}
		return json.Unmarshal(b, v)
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		var alerts []alerting.Alert
		err := get("/api/v1/alerts", &alerts)
		at := time.Now()
		var views []windowstats.ModelView
		if err == nil && i%5 == 0 {
			err = get("/api/v1/stats", &views)
		}
		d.mu.Lock()
		if err != nil {
			d.pollErr = err
		} else {
			d.pollOK++
		}
		if alerts != nil {
			d.polls = append(d.polls, alertPoll{at: at, alerts: alerts})
		}
		for _, v := range views {
			key := v.Model + ":" + v.Version
			if d.windows[key] == nil {
				d.windows[key] = map[int64]windowstats.WindowView{}
			}
			for _, w := range v.Closed {
				d.windows[key][w.Start.UnixNano()] = w
			}
		}
		d.mu.Unlock()
		select {
		case <-d.stopPoll:
			return
		case <-d.done:
			return
		case <-tick.C:
		}
	}
}

// lastPoll returns when the last answered alerts poll was taken.
func (d *demoRun) lastPoll() time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.polls) == 0 {
		return time.Time{}
	}
	return d.polls[len(d.polls)-1].at
}

// finish waits for the demo to exit on its own (its --duration) and stops
// polling; it returns the exit code.
func (d *demoRun) finish(timeout time.Duration) int {
	d.t.Helper()
	code := d.wait(timeout)
	d.stopPolling()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.t.Logf("%d polls answered (last error: %v)", d.pollOK, d.pollErr)
	if d.pollOK < 10 {
		d.t.Fatalf("only %d polls of the admin API answered", d.pollOK)
	}
	return code
}

// history is one alert's (rule, model, version) observed states and
// episodes.
type history struct {
	rule, model, version string
	changes              []stateChange // observed active state over time
	episodes             []*episode    // firing episodes, by firing time
}

type stateChange struct {
	at    time.Time // poll time
	state string    // "pending", "firing" or "" (inactive)
}

// episode is one firing of an alert as the admin API showed it.
type episode struct {
	pendingAt time.Time // StartsAt of the pending alert before it fired: the end of the first breaching window (zero: not seen)
	firingAt  time.Time // StartsAt of the firing alert: the end of the window that fired it
	endsAt    time.Time // EndsAt once resolved (zero: not seen resolved)
	firing    alerting.Alert
}

func (e *episode) String() string {
	s := "firing " + e.firingAt.Format("15:04:05.000")
	if !e.pendingAt.IsZero() {
		s = "pending " + e.pendingAt.Format("15:04:05.000") + ", " + s
	}
	if !e.endsAt.IsZero() {
		s += ", resolved " + e.endsAt.Format("15:04:05.000")
	}
	return s + " (" + e.firing.Annotations["summary"] + ")"
}

// histories groups the polls by alert (rule, model, version), in order of
// first appearance.
func (d *demoRun) histories() []*history {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []*history
	byKey := map[[3]string]*history{}
	pending := map[[3]string]time.Time{}
	for _, p := range d.polls {
		active := map[[3]string]string{}
		for _, a := range p.alerts {
			k := [3]string{a.Labels["alertname"], a.Labels["model"], a.Labels["version"]}
			h := byKey[k]
			if h == nil {
				h = &history{rule: k[0], model: k[1], version: k[2]}
				byKey[k] = h
				out = append(out, h)
			}
			switch a.State {
			case alerting.StatePending:
				active[k] = string(a.State)
				pending[k] = a.StartsAt
			case alerting.StateFiring, alerting.StateResolved:
				if a.State == alerting.StateFiring {
					active[k] = string(a.State)
				}
				i := slices.IndexFunc(h.episodes, func(e *episode) bool { return e.firingAt.Equal(a.StartsAt) })
				if i < 0 {
					e := &episode{firingAt: a.StartsAt, firing: a}
					if pa := pending[k]; pa.Before(a.StartsAt) {
						e.pendingAt = pa
					}
					h.episodes = append(h.episodes, e)
					i = len(h.episodes) - 1
				}
				if a.State == alerting.StateResolved {
					h.episodes[i].endsAt = a.EndsAt
				}
			}
		}
		for k, h := range byKey {
			st := active[k]
			if st == "" {
				delete(pending, k) // a streak that ended does not lead to a later firing
			}
			if n := len(h.changes); n == 0 && st != "" || n > 0 && h.changes[n-1].state != st {
				h.changes = append(h.changes, stateChange{at: p.at, state: st})
			}
		}
	}
	for _, h := range out {
		sort.Slice(h.episodes, func(i, j int) bool { return h.episodes[i].firingAt.Before(h.episodes[j].firingAt) })
	}
	return out
}

// pickHistories returns the histories of rule (any rule when "") and model
// (any model when "").
func pickHistories(hs []*history, rule, model string) []*history {
	var out []*history
	for _, h := range hs {
		if (rule == "" || h.rule == rule) && (model == "" || h.model == model) {
			out = append(out, h)
		}
	}
	return out
}

// logHistories writes every alert's state changes and episodes, relative to
// the model server's start.
func (d *demoRun) logHistories(hs []*history) {
	d.t.Helper()
	var b strings.Builder
	rel := func(at time.Time) string { return fmt.Sprintf("%+.2fs", at.Sub(d.startLo).Seconds()) }
	for _, h := range hs {
		fmt.Fprintf(&b, "\n%s %s:%s:", h.rule, h.model, h.version)
		for _, c := range h.changes {
			st := c.state
			if st == "" {
				st = "inactive"
			}
			fmt.Fprintf(&b, " %s@%s", st, rel(c.at))
		}
		for _, e := range h.episodes {
			fmt.Fprintf(&b, "\n    episode: pending %s firing %s", relOrDash(e.pendingAt, d.startLo), rel(e.firingAt))
			if !e.endsAt.IsZero() {
				fmt.Fprintf(&b, " resolved %s", rel(e.endsAt))
			}
			fmt.Fprintf(&b, " — %s", e.firing.Annotations["summary"])
			if s := e.firing.Snapshot; s != nil && len(s.Moved) > 0 {
				fmt.Fprintf(&b, "; moved %v", s.Moved)
			}
		}
	}
	if len(hs) == 0 {
		b.WriteString(" none")
	}
	d.t.Logf("alerts (times from process start):%s", b.String())
}

func relOrDash(at, from time.Time) string {
	if at.IsZero() {
		return "-"
	}
	return fmt.Sprintf("%+.2fs", at.Sub(from).Seconds())
}

// logWindows writes the closed windows of a model seen through
// /api/v1/stats: start, calls, P99 and standard deviation in ms.
func (d *demoRun) logWindows(model string) {
	d.t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	var b strings.Builder
	for key, ws := range d.windows {
		if !strings.HasPrefix(key, model+":") {
			continue
		}
		starts := slices.Sorted(maps.Keys(ws))
		fmt.Fprintf(&b, "\n%s (window start from process start: calls P99ms SDms):", key)
		for i, s := range starts {
			w := ws[s]
			if i%6 == 0 {
				b.WriteString("\n   ")
			}
			fmt.Fprintf(&b, " %+5.1fs %3d %6.2f %5.2f |", time.Unix(0, s).Sub(d.startLo).Seconds(), w.Count, w.P99*1000, w.StdDev*1000)
		}
	}
	d.t.Logf("windows:%s", b.String())
}

// window returns the closed window of series ("model:version") that
// started at start, if the stats polls saw it.
func (d *demoRun) window(series string, start time.Time) (windowstats.WindowView, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	w, ok := d.windows[series][start.UnixNano()]
	return w, ok
}

// TestE2EDemoSpikeFiresP99OverBaseline runs the demo with two latency spikes
// (at 15 s and 30 s after start, 5 s each, +40 ms per inference on a 20 ms
// base) and checks P99OverBaseline of mnist-mlp: it fires once per spike,
// only after P99For (3) consecutive windows each above 1.3× the baseline
// (as /api/v1/stats shows them), so no earlier than two windows after the
// spike began unless the streak began on noise just before it, and never
// before the first spike; and it resolves once the spike is over, within
// the hold-down and a few windows.
func TestE2EDemoSpikeFiresP99OverBaseline(t *testing.T) {
	const (
		every    = 15 * time.Second
		spikeFor = 5 * time.Second
		duration = 44 * time.Second
	)
	d := startDemo(t, append(spikeArgs(every, spikeFor), "--duration", duration.String())...)
	if code := d.finish(duration + 20*time.Second); code != 0 {
		t.Errorf("demo exited %d, want 0", code)
	}
	hs := d.histories()
	d.logHistories(hs)
	d.logWindows("mnist-mlp")
	d.logWindows("echo")

	spikes := []time.Duration{every, 2 * every} // both end before the run does
	first := d.startLo.Add(every)
	for _, h := range pickHistories(hs, alerting.RuleP99OverBaseline, "") {
		for _, e := range h.episodes {
			if e.firingAt.Before(first) {
				t.Errorf("%s %s:%s fired before the first spike (at %v): %v", h.rule, h.model, h.version, first.Format("15:04:05.000"), e)
			}
		}
	}
	var mlp []*episode
	for _, h := range pickHistories(hs, alerting.RuleP99OverBaseline, "mnist-mlp") {
		if h.version == "1" {
			mlp = h.episodes
		}
	}
	w := demoWindow
	holdDown := time.Duration(alertDefaults.HoldDown) * w
	for i, off := range spikes {
		// The spike starts when the model server has run for off.
		spikeLo, spikeHi := d.startLo.Add(off), d.startHi.Add(off)
		endLo, endHi := spikeLo.Add(spikeFor), spikeHi.Add(spikeFor)
		until := d.startHi.Add(duration)
		if i+1 < len(spikes) {
			until = d.startLo.Add(spikes[i+1])
		}
		var eps []*episode
		for _, e := range mlp {
			if !e.firingAt.Before(spikeLo) && e.firingAt.Before(until) {
				eps = append(eps, e)
			}
		}
		name := fmt.Sprintf("spike %d (%.2f–%.2fs)", i+1, off.Seconds(), (off + spikeFor).Seconds())
		if len(eps) != 1 {
			t.Errorf("%s: P99OverBaseline mnist-mlp fired %d times, want once: %v", name, len(eps), eps)
			if len(eps) == 0 {
				continue
			}
		}
		e := eps[0]
		t.Logf("%s: first breaching window ended %s after the spike began, fired %s after, resolved %s after the spike ended",
			name, sinceOrDash(e.pendingAt, spikeLo), e.firingAt.Sub(spikeLo).Round(time.Millisecond), sinceOrDash(e.endsAt, endLo))

		// Three consecutive windows: pending at the end of the first
		// breaching window, firing at the end of the third.
		streak := time.Duration(alertDefaults.P99For-1) * w
		if e.pendingAt.IsZero() {
			t.Errorf("%s: the alert was never seen pending before it fired", name)
		} else if got := e.firingAt.Sub(e.pendingAt); got < streak {
			t.Errorf("%s: fired %v after it became pending, want at least %v (%d windows)", name, got, streak, alertDefaults.P99For)
		}
		// The windows of the streak, as /api/v1/stats showed them: each
		// judged (MinCount calls) and above the threshold the alert names,
		// or without enough calls to be judged (which holds a streak).
		threshold, err := strconv.ParseFloat(e.firing.Annotations["threshold"], 64)
		if err != nil {
			t.Errorf("%s: threshold annotation %q: %v", name, e.firing.Annotations["threshold"], err)
		}
		from := e.firingAt.Add(-time.Duration(alertDefaults.P99For) * w)
		if !e.pendingAt.IsZero() {
			from = e.pendingAt.Add(-w)
		}
		breaches, beforeSpike := 0, 0
		for start := from; start.Before(e.firingAt); start = start.Add(w) {
			win, ok := d.window("mnist-mlp:1", start)
			switch {
			case !ok:
				t.Errorf("%s: window %s not seen in /api/v1/stats", name, start.Format("15:04:05"))
			case win.Count < int64(alertDefaults.MinCount):
				t.Logf("%s: window %s has %d calls, not judged", name, start.Format("15:04:05"), win.Count)
			case !(win.P99 > threshold*(1-1e-5)): // the annotation has 6 digits
				t.Errorf("%s: window %s P99 %.3gs is not above the threshold %.3gs, yet in the streak", name, start.Format("15:04:05"), win.P99, threshold)
			default:
				breaches++
				if !start.Add(w).After(spikeLo) {
					beforeSpike++
				}
			}
		}
		if breaches < alertDefaults.P99For {
			t.Errorf("%s: %d breaching windows before firing, want %d", name, breaches, alertDefaults.P99For)
		}
		// A window of the spike ends after it began, so the third ends at
		// least two windows later — unless the streak began on noise just
		// before the spike (a window of the baseline above 1.3× it), which
		// the check above has shown.
		if got := e.firingAt.Sub(spikeLo); got < streak {
			if beforeSpike == 0 {
				t.Errorf("%s: fired %v after the spike began, want at least %v", name, got, streak)
			} else {
				t.Logf("%s: note: fired %v after the spike began: %d window(s) of the streak ended before it, above the threshold on noise", name, got, beforeSpike)
			}
		}
		// And the rule is prompt: the spike's first whole window is the
		// first breach at the latest.
		if late := spikeHi.Add(time.Duration(alertDefaults.P99For+1)*w + time.Second); e.firingAt.After(late) {
			t.Errorf("%s: fired %v after the spike began, want within %v", name, e.firingAt.Sub(spikeHi), late.Sub(spikeHi))
		}
		// Resolved after the spike: hold-down clear windows after it, and
		// a few windows of slack for the queue to drain and for noise.
		switch {
		case e.endsAt.IsZero():
			t.Errorf("%s: P99OverBaseline mnist-mlp never resolved", name)
		case e.endsAt.Before(endLo.Add(holdDown - w)):
			t.Errorf("%s: resolved %v after the spike ended, want at least %v (hold-down %d windows)", name, e.endsAt.Sub(endLo), holdDown-w, alertDefaults.HoldDown)
		case e.endsAt.After(endHi.Add(holdDown + 4*w)):
			t.Errorf("%s: resolved %v after the spike ended, want within %v (hold-down %d windows + 4)", name, e.endsAt.Sub(endHi), holdDown+4*w, alertDefaults.HoldDown)
		}
	}
}

// spikeArgs are the demo's flags for the spike scenarios: 200 calls/s, a
// 20 ms base latency with room for it (32 workers), and spikes of +40 ms.
func spikeArgs(every, spikeFor time.Duration) []string {
	return []string{"--qps", "200", "--workers", "32", "--base-latency", "20ms",
		"--inject-spike", every.String(), "--spike-for", spikeFor.String(), "--spike-extra", "40ms"}
}

func sinceOrDash(at, from time.Time) string {
	if at.IsZero() {
		return "-"
	}
	return at.Sub(from).Round(time.Millisecond).String()
}

// TestE2EDemoStepNamesMovedPhase steps the model server's latency up by 5 ms
// for good 12 s into the run. The step is injected in the server's infer
// stage, so the root-cause snapshot of the alert it fires must name the
// sidecar's upstream phase or the server's infer stage as what moved most —
// not a phase of the sidecar's own (ingress, decode, transfer, egress) — and
// show a move of about the step. Issue 4 asks it of LatencyStdDevJump's
// snapshot; P99OverBaseline, which carries one too, is checked alongside.
func TestE2EDemoStepNamesMovedPhase(t *testing.T) {
	const (
		stepAt   = 12 * time.Second
		step     = 10 * time.Millisecond
		duration = 24 * time.Second
	)
	// A 20 ms base latency, as the spike test has: against a P99 of a
	// millisecond or two, a few milliseconds of host jitter is already 30%,
	// and the P99 rule could fire on it before the step (it did at 10 ms in
	// a CI run with the diagnosis' e2e tests beside it).
	d := startDemo(t, "--qps", "200", "--base-latency", "20ms", "--inject-step-at", stepAt.String(), "--step-extra", step.String(), "--duration", duration.String())
	if code := d.finish(duration + 20*time.Second); code != 0 {
		t.Errorf("demo exited %d, want 0", code)
	}
	hs := d.histories()
	d.logHistories(hs)
	d.logWindows("mnist-mlp")

	// The step is set by a timer started just after the sidecar, which
	// logs its admin address as the last thing it does at start.
	stepLo, stepHi := d.startLo.Add(stepAt), d.startHi.Add(stepAt+100*time.Millisecond)
	w := demoWindow

	// stepEpisode returns the rule's first mnist-mlp episode that fired
	// after the step, nil if none did.
	stepEpisode := func(t *testing.T, rule string) *episode {
		t.Helper()
		for _, h := range pickHistories(hs, rule, "mnist-mlp") {
			if h.version != "1" {
				continue
			}
			for _, e := range h.episodes {
				if e.firingAt.After(stepLo) {
					return e
				}
				if e.endsAt.IsZero() || e.endsAt.After(stepLo) {
					t.Fatalf("%s mnist-mlp was already firing when the step came, on noise before it, so the step could not start an episode: %v", rule, e)
				}
				t.Logf("note: %s mnist-mlp fired before the step, on noise: %v", rule, e)
			}
		}
		return nil
	}
	checkSnapshot := func(t *testing.T, rule string, forN int, e *episode) {
		t.Helper()
		if late := stepHi.Add(time.Duration(forN+3) * w); e.firingAt.After(late) {
			t.Errorf("fired %v after the step, want within %v", e.firingAt.Sub(stepHi), late.Sub(stepHi))
		}
		s := e.firing.Snapshot
		if s == nil {
			t.Fatalf("firing %s has no snapshot: %+v", rule, e.firing)
		}
		t.Logf("step at %+.2f–%+.2fs; %s fired %v after it; snapshot moved %v; current window %s, reference window %s",
			stepLo.Sub(d.startLo).Seconds(), stepHi.Sub(d.startLo).Seconds(), rule, e.firingAt.Sub(stepLo).Round(time.Millisecond), s.Moved,
			s.Current.Start.Format("15:04:05"), s.Previous.Start.Format("15:04:05"))
		t.Logf("means (ms): phases now %s, before %s; stages now %s, before %s", ms(s.Current.Phases), ms(s.Previous.Phases), ms(s.Current.Stages), ms(s.Previous.Stages))
		if len(s.Moved) == 0 {
			t.Fatal("snapshot names nothing that moved")
		}
		if m := s.Moved[0]; m != "upstream" && m != "infer" {
			t.Errorf("snapshot's Moved %v starts with %q, want the upstream phase or the infer stage", s.Moved, m)
		}
		// The snapshot compares a window with the step in it with one
		// before it.
		if !s.Previous.Start.Before(stepHi) {
			t.Errorf("reference window %s starts after the step (%s)", s.Previous.Start.Format("15:04:05"), stepHi.Format("15:04:05.000"))
		}
		if !s.Current.Start.Add(w).After(stepLo) {
			t.Errorf("current window %s ends before the step (%s)", s.Current.Start.Format("15:04:05"), stepLo.Format("15:04:05.000"))
		}
		// And the move it shows is the step's, in the upstream phase and
		// in the infer stage alike. The snapshot is captured at the first
		// breaching window, which usually straddles the step and holds only
		// its tail, so the move is a share of the step: ask for a twentieth,
		// well above the noise of a window's mean (about 0.05 ms here).
		for _, p := range []struct {
			kind, name string
			cur, prev  map[string]float64
		}{{"phase", "upstream", s.Current.Phases, s.Previous.Phases}, {"stage", "infer", s.Current.Stages, s.Previous.Stages}} {
			if delta := p.cur[p.name] - p.prev[p.name]; delta < 0.05*step.Seconds() {
				t.Errorf("snapshot: %s %s mean moved %.3gms, want about the %v step", p.kind, p.name, delta*1000, step)
			}
		}
		// Both windows carry the host facts of the demo's upstream, its own
		// process: the scheduler's whenever the eBPF scheduler probes run
		// (as root), and no GPU unless NVML sampled one. Presence only; the
		// figures depend on the host.
		logs := d.log()
		schedOn := strings.Contains(logs, "scheduler tracepoints")
		gpuOn := strings.Contains(logs, "NVIDIA device(s)")
		for _, b := range []struct {
			name string
			h    *alerting.HostBreakdown
		}{{"current", s.Current.Host}, {"reference", s.Previous.Host}} {
			if b.h == nil {
				t.Errorf("snapshot: %s window has no host facts", b.name)
				continue
			}
			if (b.h.Sched != nil) != schedOn {
				t.Errorf("snapshot: %s window's scheduler facts %+v, want present exactly when the scheduler probes are on (%v)", b.name, b.h.Sched, schedOn)
			}
			if !gpuOn && b.h.GPU != nil {
				t.Errorf("snapshot: %s window has GPU facts %+v on a machine without a sampled GPU", b.name, b.h.GPU)
			}
		}
		host := e.firing.Annotations["host_facts"]
		t.Logf("host_facts: %s", host)
		if host == "" || (schedOn && !strings.Contains(host, "runqueue ")) || (!gpuOn && !gpuAbsent.MatchString(host)) {
			t.Errorf("host_facts annotation %q, want the run-queue figures (scheduler probes on: %v) and the GPU named absent", host, schedOn)
		}
	}

	t.Run(alerting.RuleP99OverBaseline, func(t *testing.T) {
		e := stepEpisode(t, alerting.RuleP99OverBaseline)
		if e == nil {
			t.Fatal("P99OverBaseline mnist-mlp did not fire after the step")
		}
		checkSnapshot(t, alerting.RuleP99OverBaseline, alertDefaults.P99For, e)
	})
	t.Run(alerting.RuleLatencyStdDevJump, func(t *testing.T) {
		e := stepEpisode(t, alerting.RuleLatencyStdDevJump)
		if e == nil {
			// Show why: the std-dev of the windows around the step.
			var b strings.Builder
			for start := stepLo.Truncate(w).Add(-3 * w); start.Before(stepLo.Add(8 * w)); start = start.Add(w) {
				if win, ok := d.window("mnist-mlp:1", start); ok {
					fmt.Fprintf(&b, " %+.1fs:%.2f", start.Sub(stepLo).Seconds(), win.StdDev*1000)
				}
			}
			t.Fatalf("LatencyStdDevJump mnist-mlp did not fire after the step. Window std-devs (ms) by start relative to the step:%s. "+
				"The step adds a constant delay: only the window that straddles it mixes the two levels and has a wider spread, "+
				"and StdDevFor is %d windows", b.String(), alertDefaults.StdDevFor)
		}
		checkSnapshot(t, alerting.RuleLatencyStdDevJump, alertDefaults.StdDevFor, e)
	})
}

// gpuAbsent matches a host_facts annotation that names the GPU absent.
var gpuAbsent = regexp.MustCompile(`absent: (.*, )?gpu(,|$)`)

// ms renders a breakdown's means in milliseconds.
func ms(m map[string]float64) string {
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%.2f", k, m[k]*1000)
	}
	return strings.Join(parts, " ")
}

// TestE2EDemoCleanRunFiresNothing runs the demo without faults for 45 s:
// no alert may fire (pending is allowed: a noisy window may start a streak
// that the next one ends), unless the machine itself stalled during the
// breaching windows, as an independent watcher in this process measures it
// (stallWatch): that is a real latency change, which the rules are right
// to report. Its windows are 2 s, not the other tests' 1 s: with 1 s
// windows of the ~1 ms demo model, CI saw a P99 of 1.0 → 1.9 ms fire
// P99OverBaseline, and with a 10 ms model sleeps' jitter fired
// LatencyStdDevJump, both on quiet machines; 2 s windows passed, and still
// fire both rules on a 5 ms step (checked by hand).
//
// INFERWATCH_E2E_STRICT_CLEAN=1 drops the stall exemption: any alert that
// fires fails the test, stalls or not (issue #13's check on a quiet host:
// `go test -p 1 -count=10 -run 'TestE2EDemoCleanRunFiresNothing$'`).
func TestE2EDemoCleanRunFiresNothing(t *testing.T) {
	const duration = 45 * time.Second
	strict := os.Getenv("INFERWATCH_E2E_STRICT_CLEAN") == "1"
	stalls := watchStalls(t)
	d := startDemo(t, "--qps", "200", "--window", "2s", "--duration", duration.String())
	if code := d.finish(duration + 15*time.Second); code != 0 {
		t.Errorf("demo exited %d, want 0", code)
	}
	hs := d.histories()
	d.logHistories(hs)
	pendings := 0
	for _, h := range hs {
		for _, c := range h.changes {
			if c.state == string(alerting.StatePending) {
				pendings++
			}
		}
		for _, e := range h.episodes {
			// The breaching windows: from the first one's start to the
			// one that fired. A stall of the machine there is a real
			// latency change, which the rules are right to report.
			from := e.pendingAt.Add(-time.Second)
			if e.pendingAt.IsZero() {
				from = e.firingAt.Add(-4 * time.Second)
			}
			if seen := stalls.within(from, e.firingAt); len(seen) > 0 && !strict {
				t.Logf("%s %s:%s fired while this machine stalled (%v), not on a quiet host: %v; host facts: %s",
					h.rule, h.model, h.version, seen, e, e.firing.Annotations["host_facts"])
				continue
			}
			t.Errorf("clean run fired %s %s:%s (stalls of the machine there: %v; strict %v): %v; host facts: %s",
				h.rule, h.model, h.version, stalls.within(from, e.firingAt), strict, e, e.firing.Annotations["host_facts"])
		}
	}
	t.Logf("%d pending streaks that did not fire; stalls of the machine seen: %v", pendings, stalls.within(time.Time{}, time.Now()))
	if t.Failed() {
		d.logWindows("mnist-mlp")
		d.logWindows("echo")
	}
}

// amReceiver is the webhook Alertmanager notifies; it keeps every
// notification.
type amReceiver struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []amNotification
}

// amNotification is the part of Alertmanager's webhook payload the tests
// read.
type amNotification struct {
	received    time.Time
	Status      string            `json:"status"`
	GroupLabels map[string]string `json:"groupLabels"`
	Alerts      []struct {
		Status   string            `json:"status"`
		Labels   map[string]string `json:"labels"`
		StartsAt time.Time         `json:"startsAt"`
		EndsAt   time.Time         `json:"endsAt"`
	} `json:"alerts"`
}

func newAMReceiver(t *testing.T) *amReceiver {
	r := &amReceiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var n amNotification
		if err := json.NewDecoder(req.Body).Decode(&n); err != nil {
			t.Errorf("receiver: decode notification: %v", err)
			return
		}
		n.received = time.Now()
		r.mu.Lock()
		r.got = append(r.got, n)
		r.mu.Unlock()
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// count returns how many notifications carried the alert with labels
// (alertname, model, version) that started at startsAt, with status.
func (r *amReceiver) count(labels map[string]string, startsAt time.Time, status string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, m := range r.got {
		for _, a := range m.Alerts {
			if a.Status == status && a.StartsAt.Equal(startsAt) && a.Labels["alertname"] == labels["alertname"] &&
				a.Labels["model"] == labels["model"] && a.Labels["version"] == labels["version"] {
				n++
			}
		}
	}
	return n
}

// countEndedBy returns how many resolved notifications of the alert with
// labels that started at startsAt end at or before t.
func (r *amReceiver) countEndedBy(labels map[string]string, startsAt, t time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, m := range r.got {
		for _, a := range m.Alerts {
			if a.Status == "resolved" && a.StartsAt.Equal(startsAt) && !a.EndsAt.After(t) && a.Labels["alertname"] == labels["alertname"] &&
				a.Labels["model"] == labels["model"] && a.Labels["version"] == labels["version"] {
				n++
			}
		}
	}
	return n
}

func (r *amReceiver) log(t *testing.T, from time.Time) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, m := range r.got {
		fmt.Fprintf(&b, "\n  %+.2fs %s %v:", m.received.Sub(from).Seconds(), m.Status, m.GroupLabels)
		for _, a := range m.Alerts {
			fmt.Fprintf(&b, " [%s %s:%s started %+.2fs]", a.Status, a.Labels["alertname"], a.Labels["model"], a.StartsAt.Sub(from).Seconds())
		}
	}
	t.Logf("receiver got %d notifications (times from the demo's start):%s", len(r.got), b.String())
}

// startRealAlertmanager starts Debian's prometheus-alertmanager on a free
// loopback port, routing every alert to receiverURL with group_wait and
// group_interval 1s, repeat_interval 1h and resolved notifications on, and
// returns its address.
func startRealAlertmanager(t *testing.T, receiverURL string) string {
	t.Helper()
	bin := testenv.RequireBinary(t, "prometheus-alertmanager", "alertmanager")
	addr := testenv.FreeAddr(t)
	testenv.StartAlertmanager(t, bin, t.TempDir(), addr, receiverURL)
	return addr
}

// amAlert is the part of GET /api/v2/alerts the tests read.
type amAlert struct {
	Labels   map[string]string `json:"labels"`
	StartsAt time.Time         `json:"startsAt"`
	EndsAt   time.Time         `json:"endsAt"`
	Status   struct {
		State string `json:"state"`
	} `json:"status"`
}

// amActive lists Alertmanager's active alerts matching the label filters.
func amActive(addr string, filters ...string) ([]amAlert, error) {
	q := url.Values{"filter": filters}
	c := &http.Client{Timeout: 2 * time.Second}
	res, err := c.Get("http://" + addr + "/api/v2/alerts?" + q.Encode())
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, err
	}
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /api/v2/alerts: %s: %s", res.Status, bytes.TrimSpace(body))
	}
	var all []amAlert
	if err := json.Unmarshal(body, &all); err != nil {
		return nil, fmt.Errorf("GET /api/v2/alerts: %v: %s", err, body)
	}
	var active []amAlert
	for _, a := range all {
		if a.Status.State == "active" {
			active = append(active, a)
		}
	}
	return active, nil
}

// TestE2EDemoRealAlertmanager runs the spike scenario (one spike, 15 s in)
// with --alertmanager-url pointing at a real Alertmanager: the firing
// P99OverBaseline of mnist-mlp is listed by Alertmanager's v2 API with the
// sidecar's labels and start, it leaves the active list once resolved, and
// downstream of Alertmanager every episode the sidecar had — of any rule —
// was notified firing exactly once and, once resolved, resolved exactly once.
func TestE2EDemoRealAlertmanager(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo for half a minute")
	}
	const (
		every    = 15 * time.Second
		spikeFor = 5 * time.Second
		duration = 28 * time.Second // the second spike would begin at 30 s
	)
	recv := newAMReceiver(t)
	am := startRealAlertmanager(t, recv.srv.URL)
	d := startDemo(t, append(spikeArgs(every, spikeFor), "--duration", duration.String(), "--alertmanager-url", "http://"+am)...)

	// Watch Alertmanager's view of the alert while the demo runs.
	filters := []string{`alertname="P99OverBaseline"`, `model="mnist-mlp"`}
	var (
		seen              []amAlert
		firstSeen, goneAt time.Time
		amErr             error
		ctx, stopWatching = context.WithCancel(context.Background())
		watchDone         = make(chan struct{})
	)
	go func() {
		defer close(watchDone)
		for ctx.Err() == nil {
			active, err := amActive(am, filters...)
			switch {
			case err != nil:
				amErr = err
			case len(active) > 0 && firstSeen.IsZero():
				firstSeen, seen = time.Now(), active
			case len(active) == 0 && !firstSeen.IsZero() && goneAt.IsZero():
				goneAt = time.Now()
			}
			select {
			case <-ctx.Done():
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	code := d.finish(duration + 20*time.Second)
	// The last resolve may still be on its way through group_interval.
	time.Sleep(3 * time.Second)
	stopWatching()
	<-watchDone
	if code != 0 {
		t.Errorf("demo exited %d, want 0", code)
	}
	hs := d.histories()
	d.logHistories(hs)
	recv.log(t, d.startLo)
	if amErr != nil {
		t.Logf("last failed Alertmanager query: %v", amErr)
	}

	var mlp *history
	for _, h := range pickHistories(hs, alerting.RuleP99OverBaseline, "mnist-mlp") {
		if h.version == "1" {
			mlp = h
		}
	}
	if mlp == nil || len(mlp.episodes) == 0 {
		d.logWindows("mnist-mlp")
		t.Fatal("P99OverBaseline mnist-mlp never fired in the sidecar")
	}
	// One spike, one episode: the Alertmanager checks below follow it.
	e := mlp.episodes[0]
	if len(mlp.episodes) != 1 || e.firingAt.Before(d.startLo.Add(every)) {
		t.Errorf("P99OverBaseline mnist-mlp fired %d times, first at %s, want once, for the spike at %s",
			len(mlp.episodes), e.firingAt.Format("15:04:05"), d.startLo.Add(every).Format("15:04:05.000"))
	}
	t.Logf("sidecar: %v; Alertmanager listed it active %s after the sidecar fired it and dropped it %s after the sidecar resolved it",
		e, sinceOrDash(firstSeen, e.firingAt), sinceOrDash(goneAt, e.endsAt))

	// Alertmanager's v2 API: the alert, with the sidecar's labels.
	switch {
	case firstSeen.IsZero():
		t.Errorf("Alertmanager never listed P99OverBaseline mnist-mlp as active")
	case len(seen) != 1:
		t.Errorf("Alertmanager listed %d active P99OverBaseline mnist-mlp alerts, want 1: %+v", len(seen), seen)
	default:
		a := seen[0]
		if fmt.Sprint(a.Labels) != fmt.Sprint(e.firing.Labels) {
			t.Errorf("Alertmanager lists labels %v, the sidecar's are %v", a.Labels, e.firing.Labels)
		}
		for k, v := range map[string]string{"alertname": "P99OverBaseline", "model": "mnist-mlp", "version": "1"} {
			if a.Labels[k] != v {
				t.Errorf("Alertmanager's alert has %s=%q, want %q", k, a.Labels[k], v)
			}
		}
		if !a.StartsAt.Equal(e.firingAt) {
			t.Errorf("Alertmanager's startsAt %v, the sidecar fired at %v", a.StartsAt, e.firingAt)
		}
	}
	if !e.endsAt.IsZero() && goneAt.IsZero() {
		t.Errorf("the sidecar resolved P99OverBaseline mnist-mlp at %v but Alertmanager still lists it active", e.endsAt.Format("15:04:05"))
	}
	if e.endsAt.IsZero() {
		t.Errorf("P99OverBaseline mnist-mlp did not resolve before the demo ended: %v", e)
	}

	// Downstream: once per episode, for every alert the sidecar fired.
	lastPoll := d.lastPoll()
	episodes := 0
	for _, h := range hs {
		for _, e := range h.episodes {
			episodes++
			labels := map[string]string{"alertname": h.rule, "model": h.model, "version": h.version}
			if n := recv.count(labels, e.firingAt, "firing"); n != 1 {
				t.Errorf("receiver got %d firing notifications of %s %s:%s (%v), want 1", n, h.rule, h.model, h.version, e)
			}
			if !e.endsAt.IsZero() {
				if n := recv.count(labels, e.firingAt, "resolved"); n != 1 {
					t.Errorf("receiver got %d resolved notifications of %s %s:%s (%v), want 1", n, h.rule, h.model, h.version, e)
				}
				continue
			}
			// Still firing at the last poll: the sidecar may have resolved
			// it in the window that closed between that poll and its exit,
			// but no resolve may end before a poll that showed it firing.
			if n := recv.countEndedBy(labels, e.firingAt, lastPoll); n != 0 {
				t.Errorf("receiver got %d resolved notifications of %s %s:%s ending by the last poll at %s, when it was still firing (%v), want 0",
					n, h.rule, h.model, h.version, lastPoll.Format("15:04:05.000"), e)
			}
			if n := recv.count(labels, e.firingAt, "resolved"); n > 1 {
				t.Errorf("receiver got %d resolved notifications of %s %s:%s (%v), want at most 1", n, h.rule, h.model, h.version, e)
			}
		}
	}
	recv.mu.Lock()
	total := 0
	for _, m := range recv.got {
		total += len(m.Alerts)
	}
	recv.mu.Unlock()
	t.Logf("%d episodes in the sidecar, %d alerts in %d notifications downstream", episodes, total, len(recv.got))
}

// notifyFailing is the sidecar's log line when a notifier's deliveries
// start failing.
var notifyFailing = regexp.MustCompile(`msg="alert notifications failing" notifier=alertmanager`)

// TestE2EDemoAlertmanagerDown points the demo at an Alertmanager that is not
// there, with an SLA (100µs) that mnist-mlp breaks from the first window so
// that LatencyMeanOverSLA fires at once: the notifications fail and are
// counted after their retries, while the sidecar keeps proxying the load,
// its rules keep evaluating, and the demo exits 0 at the end of its
// duration without hanging on the undeliverable alerts.
func TestE2EDemoAlertmanagerDown(t *testing.T) {
	const duration = 16 * time.Second
	dead := testenv.FreeAddr(t) // nothing listens there
	d := startDemo(t, "--qps", "200", "--sla", "100us", "--alertmanager-url", "http://"+dead, "--duration", duration.String())
	s := &sidecarProc{proc: d.proc, admin: d.admin}
	okCalls := func(ss exposition.Page) float64 {
		overGRPC, _ := ss.Sum("inferwatch_requests_total", map[string]string{"method": "infer", "code": "OK"})
		overHTTP, _ := ss.Sum("inferwatch_requests_total", map[string]string{"method": "infer", "code": "200"})
		return overGRPC + overHTTP
	}

	// Failures are counted once a batch has used up its attempts (5, with
	// backoff from 500ms: under 8s).
	var failedAt time.Time
	var ss exposition.Page
	deadline := time.Now().Add(duration - 2*time.Second)
	for {
		_, body := s.adminGet(t, "/metrics")
		ss = parseMetrics(t, body)
		if n, _ := ss.Sum("inferwatch_notifications_total", map[string]string{"notifier": "alertmanager", "result": "failed"}); n > 0 {
			failedAt = time.Now()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no failed notification counted %v into the run with Alertmanager down", time.Since(d.startLo).Round(time.Second))
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("first failed notification counted %v after start", failedAt.Sub(d.startLo).Round(time.Millisecond))
	if n, _ := ss.Sum("inferwatch_notifications_total", map[string]string{"notifier": "alertmanager", "result": "sent"}); n != 0 {
		t.Errorf("%v notifications counted sent to a dead port", n)
	}
	d.waitLine(notifyFailing, 2*time.Second)

	// Still serving: the load's calls keep succeeding, readiness holds and
	// the rules still answer.
	before := okCalls(ss)
	time.Sleep(1500 * time.Millisecond)
	_, body := s.adminGet(t, "/metrics")
	after := okCalls(parseMetrics(t, body))
	if after-before < 100 { // 200 calls/s offered
		t.Errorf("%v calls succeeded in 1.5s with Alertmanager down, want about 300", after-before)
	}
	if code, body := s.adminGet(t, "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz %d %q with Alertmanager down", code, strings.TrimSpace(body))
	}
	var alerts []alerting.Alert
	if _, body := s.adminGet(t, "/api/v1/alerts"); json.Unmarshal([]byte(body), &alerts) != nil ||
		!slices.ContainsFunc(alerts, func(a alerting.Alert) bool {
			return a.Labels["alertname"] == alerting.RuleLatencyMeanOverSLA && a.State == alerting.StateFiring
		}) {
		t.Errorf("/api/v1/alerts lists no firing LatencyMeanOverSLA: %s", body)
	}

	// Exits 0, on time: the notifier flushes for at most its 5s flush
	// timeout.
	end := d.startHi.Add(duration)
	if code := d.finish(duration + 20*time.Second); code != 0 {
		t.Errorf("demo exited %d with Alertmanager down, want 0", code)
	}
	exited := time.Now()
	t.Logf("exited %v after its duration ended", exited.Sub(end).Round(time.Millisecond))
	if late := exited.Sub(end); late > 12*time.Second {
		t.Errorf("exited %v after its duration, want the drain and the notifier's flush timeout at most", late)
	}
}

// stallWatch records stalls of the machine as the test process sees them,
// independently of the sidecar: a 2 ms sleep that overslept by 20 ms or
// more, or 20 ms or more of CPU time stolen by the hypervisor (the steal
// column of /proc/stat) within a tenth of a second. 20 ms: a tick or two of
// steal (10 ms) comes every few seconds on the development VM and is within
// what a clean run must absorb; the stalls that fired alerts in CI pushed a
// 12 ms P99 to 22–41 ms.
type stallWatch struct {
	mu     sync.Mutex
	stalls []stallSeen
}

const stallMin = 20 * time.Millisecond

type stallSeen struct {
	at   time.Time
	d    time.Duration
	kind string
}

func (s stallSeen) String() string {
	return fmt.Sprintf("%s %v at %s", s.kind, s.d.Round(time.Millisecond), s.at.Format("15:04:05.000"))
}

// watchStalls starts watching until the test ends.
func watchStalls(t *testing.T) *stallWatch {
	w := &stallWatch{}
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	go func() {
		const nap = 2 * time.Millisecond
		hz := 100.0 // USER_HZ, as /proc/stat counts
		lastSteal, lastRead := stealTicks(), time.Now()
		for {
			select {
			case <-done:
				return
			default:
			}
			before := time.Now()
			time.Sleep(nap)
			now := time.Now()
			if over := now.Sub(before) - nap; over >= stallMin {
				w.add(stallSeen{before, over, "oversleep"})
			}
			if now.Sub(lastRead) >= 100*time.Millisecond {
				if st := stealTicks(); st >= 0 && lastSteal >= 0 && st > lastSteal {
					if d := time.Duration(float64(st-lastSteal) / hz * float64(time.Second)); d >= stallMin {
						w.add(stallSeen{lastRead, d, "steal"})
					}
					lastSteal = st
				}
				lastRead = now
			}
		}
	}()
	return w
}

func (w *stallWatch) add(s stallSeen) {
	w.mu.Lock()
	w.stalls = append(w.stalls, s)
	w.mu.Unlock()
}

// within returns the stalls that overlap [from, to].
func (w *stallWatch) within(from, to time.Time) []stallSeen {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []stallSeen
	for _, s := range w.stalls {
		if s.at.Add(s.d).After(from) && !s.at.After(to) {
			out = append(out, s)
		}
	}
	return out
}

// stealTicks is the machine's stolen CPU time so far, in USER_HZ ticks
// summed over CPUs; -1 when /proc/stat cannot say.
func stealTicks() int64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return -1
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal ...
	if len(f) < 9 || f[0] != "cpu" {
		return -1
	}
	v, err := strconv.ParseInt(f[8], 10, 64)
	if err != nil {
		return -1
	}
	return v
}
