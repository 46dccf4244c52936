package sidecar

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/alerting"
	"github.com/inferwatch/inferwatch/diagnosis"
	"github.com/inferwatch/inferwatch/record"
	"github.com/inferwatch/inferwatch/windowstats"
)

// throttledHistory is 30 healthy windows of mlp ending a minute ago and
// then three throttled, slower ones.
func throttledHistory(now time.Time) *diagnosis.History {
	h := diagnosis.NewHistory(0, 0)
	t0 := now.Add(-330 * time.Second).Truncate(10 * time.Second)
	for i := range 33 {
		w := diagnosis.Window{Start: t0.Add(time.Duration(i) * 10 * time.Second), Seconds: 10, Version: "1",
			Count: 1000, QPS: 100, Mean: 0.02, P99: 0.04,
			Phases: map[string]float64{"upstream": 0.018}, Stages: map[string]float64{"compute": 0.015},
			Host: &alerting.HostBreakdown{Seconds: 10, Cgroup: &alerting.HostCgroup{Coverage: 1}}}
		if i >= 30 {
			w.Mean, w.P99 = 0.05, 0.1
			w.Phases["upstream"] += 0.03
			w.Stages["compute"] += 0.03
			w.Host.Cgroup.Throttled = 3
			w.Slowest = []alerting.SlowCall{{At: w.Start, Duration: 0.2, TraceID: "0123456789abcdef0123456789abcdef"}}
		}
		h.Add("mlp", w)
	}
	return h
}

func TestDebugDiagnose(t *testing.T) {
	now := time.Now()
	eng, err := alerting.NewEngine(alerting.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := &Sidecar{engine: eng, hist: throttledHistory(now)}
	srv := httptest.NewServer(http.HandlerFunc(s.handleDiagnose))
	defer srv.Close()
	tests := []struct {
		name     string
		query    string
		code     int
		wantTop  string
		wantText string
	}{
		{name: "relative range", query: "?from=40s", code: 200, wantTop: diagnosis.CauseThrottling},
		{name: "model named", query: "?model=mlp&from=40s", code: 200, wantTop: diagnosis.CauseThrottling},
		{name: "clean range", query: "?from=" + now.Add(-300*time.Second).UTC().Format(time.RFC3339) + "&to=" + now.Add(-200*time.Second).UTC().Format(time.RFC3339), code: 200, wantText: "no anomaly"},
		{name: "unknown model", query: "?model=nope", code: 404, wantText: "no windows"},
		{name: "unknown alert", query: "?alert=P99OverBaseline", code: 404, wantText: "no alert"},
		{name: "bad time", query: "?from=yesterday", code: 400, wantText: "neither RFC 3339"},
		// A signed duration is not "that long ago": +5m read as 5 minutes
		// ago, --5m as 5 minutes ahead.
		{name: "plus duration", query: "?from=%2B5m", code: 400, wantText: "a duration ago"},
		{name: "negative duration", query: "?from=--5m", code: 400, wantText: "a duration ago"},
		{name: "future from", query: "?from=" + now.Add(time.Hour).UTC().Format(time.RFC3339), code: 400, wantText: "in the future"},
		{name: "to before from", query: "?from=40s&to=" + now.Add(-time.Hour).UTC().Format(time.RFC3339), code: 400, wantText: "not after from"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := http.Get(srv.URL + tc.query)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			var body struct {
				diagnosis.Report
				Error string `json:"error"`
			}
			if err := json.NewDecoder(res.Body).Decode(&body); err != nil {
				t.Fatal(err)
			}
			if res.StatusCode != tc.code {
				t.Fatalf("status %d, want %d: %+v", res.StatusCode, tc.code, body)
			}
			if tc.wantTop != "" && body.Top().Name != tc.wantTop {
				t.Errorf("top %q, want %q: %+v", body.Top().Name, tc.wantTop, body.Causes)
			}
			if tc.wantText != "" && !strings.Contains(body.Summary+body.Error, tc.wantText) {
				t.Errorf("summary %q error %q, want %q", body.Summary, body.Error, tc.wantText)
			}
		})
	}
}

func TestExplainAnnotatesAlert(t *testing.T) {
	now := time.Now()
	s := &Sidecar{hist: throttledHistory(now)}
	ws := s.hist.Windows("mlp")
	from := ws[30].Start
	// The window being judged, not yet in the history.
	cur := windowstats.WindowView{Start: ws[32].Start.Add(10 * time.Second), Seconds: 10, Count: 1000, QPS: 100, Mean: 0.05, P99: 0.1,
		Phases: []windowstats.PartView{{Name: "upstream", Count: 1000, Mean: 0.048}},
		Stages: []windowstats.PartView{{Name: "compute", Count: 1000, Mean: 0.045}}}
	a := s.explain("mlp", "1", from, cur, &alerting.HostBreakdown{Seconds: 10, Cgroup: &alerting.HostCgroup{Coverage: 1, Throttled: 3}})
	if !strings.HasPrefix(a["top_causes"], diagnosis.CauseThrottling+" ") || !strings.Contains(a["top_causes"], "[compute]") {
		t.Errorf("top_causes = %q", a["top_causes"])
	}
	if a["example_traces"] != "0123456789abcdef0123456789abcdef" || a["diagnosis"] == "" {
		t.Errorf("annotations = %v", a)
	}
	if len(a["top_causes"]) > maxCauseText+len("…") {
		t.Errorf("top_causes is %d bytes", len(a["top_causes"]))
	}
}

func TestHistoryFileAcrossRestart(t *testing.T) {
	path := t.TempDir() + "/history.json"
	first := &Sidecar{hist: throttledHistory(time.Now())}
	first.cfg.Diagnose.HistoryFile = path
	first.saveDiagnosisHistory()

	second := &Sidecar{}
	second.cfg.Diagnose.HistoryFile = path
	if err := second.newHistory(); err != nil {
		t.Fatal(err)
	}
	if got := len(second.hist.Windows("mlp")); got != 33 {
		t.Fatalf("restarted with %d windows, want 33", got)
	}
	bad := &Sidecar{}
	bad.cfg.Diagnose.HistoryFile = t.TempDir() // a directory: unreadable as a file
	if err := bad.newHistory(); err == nil || !strings.Contains(err.Error(), "diagnose.history_file") {
		t.Fatalf("err = %v, want one naming diagnose.history_file", err)
	}
}

// TestRankSeverity: without a model named, the report is the model whose
// latency rose most, not the one whose top cause scored a hair higher.
func TestRankSeverity(t *testing.T) {
	stage := func(score float64) []diagnosis.Cause {
		return []diagnosis.Cause{{Name: diagnosis.CauseServerStage, Score: score}}
	}
	tests := []struct {
		name string
		a, b diagnosis.Report // want a ranked above b
	}{
		{name: "tripled beats +24% at a higher score",
			a: diagnosis.Report{Anomaly: true, Baseline: diagnosis.Span{Mean: 0.01}, Added: 0.02, Causes: stage(0.58)},
			b: diagnosis.Report{Anomaly: true, Baseline: diagnosis.Span{Mean: 0.074}, Added: 0.0175, Causes: stage(0.6)}},
		{name: "same rise: the surer cause",
			a: diagnosis.Report{Anomaly: true, Baseline: diagnosis.Span{Mean: 0.01}, Added: 0.01, Causes: stage(0.9)},
			b: diagnosis.Report{Anomaly: true, Baseline: diagnosis.Span{Mean: 0.02}, Added: 0.02, Causes: stage(0.6)}},
		{name: "an incident without latency beats no anomaly",
			a: diagnosis.Report{Anomaly: true, Causes: []diagnosis.Cause{{Name: diagnosis.CauseOOMKill, Score: 1}}},
			b: diagnosis.Report{Baseline: diagnosis.Span{Mean: 0.01}, Added: 0.1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if ra, rb := rank(tc.a), rank(tc.b); ra <= rb {
				t.Fatalf("rank %v <= %v", ra, rb)
			}
		})
	}
}

// TestRecordWindowsStampsRSSOnRecentWindowsOnly: the RSS read now belongs to
// the window that just closed; windows caught up on later (after a stall,
// or a diagnose call between ticks) ended before it was read, and stamping
// it on them would flatten the leak trend the RSS is kept for.
func TestRecordWindowsStampsRSSOnRecentWindowsOnly(t *testing.T) {
	eng, err := alerting.NewEngine(alerting.Options{Stats: windowstats.Options{Window: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().Truncate(time.Second)
	for i := 6; i >= 1; i-- { // one call in each of the six windows before now
		start := now.Add(-time.Duration(i)*time.Second + 100*time.Millisecond)
		eng.Observe(&record.Call{Start: start, End: 10 * time.Millisecond, Model: "mlp", Version: "1", Code: "200", Protocol: record.ProtocolHTTP})
	}
	eng.Tick(t.Context(), now)
	s := &Sidecar{engine: eng, hist: diagnosis.NewHistory(0, 0)}
	s.cfg.Host.UpstreamPIDs = []int{os.Getpid()}
	s.recordWindowsAt(now)
	ws := s.hist.Windows("mlp")
	if len(ws) != 6 {
		t.Fatalf("%d windows recorded, want 6", len(ws))
	}
	for _, w := range ws {
		recent := now.Sub(w.End()) <= 2*time.Second
		if (w.RSS > 0) != recent {
			t.Errorf("window ending %v before now: RSS %v", now.Sub(w.End()), w.RSS)
		}
	}
}
