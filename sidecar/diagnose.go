package sidecar

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/inferwatch/inferwatch/alerting"
	"github.com/inferwatch/inferwatch/baseline"
	"github.com/inferwatch/inferwatch/diagnosis"
	"github.com/inferwatch/inferwatch/windowstats"
)

// maxCauseText bounds the top_causes annotation, for Alertmanager's sake.
const maxCauseText = 512

// newHistory makes the diagnosis history and loads what a previous run
// saved.
func (s *Sidecar) newHistory() error {
	s.hist = diagnosis.NewHistory(s.cfg.Diagnose.HistoryWindows, s.cfg.Limits.MaxModels)
	if p := s.cfg.Diagnose.HistoryFile; p != "" {
		if err := s.hist.Load(p, s.logger); err != nil {
			return fmt.Errorf("diagnose.history_file: %w", err)
		}
	}
	return nil
}

// runHistory keeps each closed window, with the host facts over its span
// and the upstream's RSS, until ctx is done; then saves the history.
func (s *Sidecar) runHistory(ctx context.Context) {
	t := time.NewTicker(s.engine.Window())
	defer t.Stop()
	lastSave := time.Now()
	for {
		select {
		case <-ctx.Done():
			s.recordWindows()
			s.saveDiagnosisHistory()
			return
		case <-t.C:
		}
		s.recordWindows()
		if time.Since(lastSave) >= time.Minute {
			s.saveDiagnosisHistory()
			lastSave = time.Now()
		}
	}
}

func (s *Sidecar) saveDiagnosisHistory() {
	if p := s.cfg.Diagnose.HistoryFile; p != "" {
		if err := s.hist.Save(p); err != nil {
			s.logger.Warn("saving the diagnosis history", "err", err)
		}
	}
}

// recordWindows adds the closed windows the history lacks.
func (s *Sidecar) recordWindows() { s.recordWindowsAt(time.Now()) }

// recordWindowsAt is recordWindows with the RSS read at now. The reading
// goes on the windows that closed since the last tick (ended at most two
// windows before now: a tick's phase and the close's grace lag it by up to
// one); windows caught up on later ended before it was taken, and the same
// reading stamped on them would flatten the leak trend it is kept for.
func (s *Sidecar) recordWindowsAt(now time.Time) {
	views := s.engine.Stats()
	recent := now.Add(-2 * s.engine.Window())
	var rss float64
	sampled := false
	for _, v := range views {
		last := s.hist.Last(v.Model, v.Version)
		for _, w := range v.Closed {
			if !w.Start.After(last) || w.Count == 0 {
				continue
			}
			r := 0.0 // absent
			if !w.End().Before(recent) {
				if !sampled {
					rss, sampled = s.upstreamRSS(), true
				}
				r = rss
			}
			s.hist.Add(v.Model, diagnosis.FromView(w, v.Version, s.snapshotHost(v.Model, v.Version, w.Start, w.End()), r))
		}
	}
}

// upstreamPIDs are the upstream's processes, when it is on this machine.
func (s *Sidecar) upstreamPIDs() []int {
	spec := s.upstreamSpec()
	if spec.IsZero() {
		return nil
	}
	pids, err := spec.Resolve()
	if err != nil {
		return nil
	}
	return pids
}

// upstreamRSS sums the upstream processes' resident memory; 0 when unknown.
func (s *Sidecar) upstreamRSS() float64 {
	var sum float64
	for _, pid := range s.upstreamPIDs() {
		if v, err := baseline.ReadRSS(pid); err == nil {
			sum += v
		}
	}
	return sum
}

func (s *Sidecar) memoryLimit() float64 {
	v, _, err := upstreamMemoryLimit(float64(s.cfg.Host.UpstreamMemoryLimit), s.upstreamPIDs())
	if err != nil {
		return 0
	}
	return v
}

// Diagnose answers /debug/diagnose's query: model (default: the one whose
// report is most anomalous), from and to (RFC 3339, or a duration meaning
// that long ago; default the last minute), or alert (an alertname, with
// model to choose among several).
func (s *Sidecar) Diagnose(q DiagnoseQuery) (diagnosis.Report, error) {
	s.recordWindows()
	now := time.Now()
	var req diagnosis.Request
	if q.Alert != "" {
		a, ok := findAlert(s.engine.Alerts(), q.Alert, q.Model)
		if !ok {
			return diagnosis.Report{}, fmt.Errorf("%w: no alert %q", ErrNotFound, q.Alert)
		}
		req.Model, req.Alert = a.Labels["model"], q.Alert
		req.From = a.StartsAt.Add(-s.engine.Window())
		if a.Snapshot != nil {
			req.From = a.Snapshot.Current.Start
		}
		req.To = a.EndsAt
	} else {
		var err error
		if req.From, err = parseWhen(q.From, now, now.Add(-time.Minute)); err != nil {
			return diagnosis.Report{}, fmt.Errorf("from: %w", err)
		}
		if req.To, err = parseWhen(q.To, now, time.Time{}); err != nil {
			return diagnosis.Report{}, fmt.Errorf("to: %w", err)
		}
		// Said as a request error, not "no windows in the range" (404),
		// which reads as if the sidecar had lost its history.
		if req.From.After(now) {
			return diagnosis.Report{}, fmt.Errorf("from: %s is in the future", req.From.Format(time.RFC3339))
		}
		if !req.To.IsZero() && !req.To.After(req.From) {
			return diagnosis.Report{}, fmt.Errorf("to: %s is not after from %s", req.To.Format(time.RFC3339), req.From.Format(time.RFC3339))
		}
		req.Model = q.Model
	}
	req.MemoryLimit = s.memoryLimit()
	models := []string{req.Model}
	if req.Model == "" {
		models = s.hist.Models()
	}
	var best diagnosis.Report
	found := false
	var lastErr error = fmt.Errorf("%w: no model has windows", ErrNotFound)
	for _, m := range models {
		r := req
		r.Model, r.Windows = m, s.hist.Windows(m)
		rep, err := diagnosis.Diagnose(r, diagnosis.Options{})
		if err != nil {
			lastErr = fmt.Errorf("model %q: %w", m, err)
			continue
		}
		if !found || rank(rep) > rank(best) {
			best, found = rep, true
		}
	}
	if !found {
		return diagnosis.Report{}, lastErr
	}
	return best, nil
}

// rank orders reports by how anomalous they are: the top cause's score
// weighted by how far the mean rose against its baseline. The score says
// how sure a cause is, not how bad things got: two models whose added
// latency sits wholly in one stage score alike, and the one that tripled
// its latency is the one to report, not the one that gained a fifth.
func rank(r diagnosis.Report) float64 {
	if !r.Anomaly {
		return -1
	}
	rise := 0.0
	if r.Baseline.Mean > 0 && r.Added > 0 {
		rise = r.Added / r.Baseline.Mean
	}
	return r.Top().Score * (1 + rise)
}

// ErrNotFound is a diagnosis query naming nothing the sidecar has.
var ErrNotFound = errors.New("not found")

// DiagnoseQuery is /debug/diagnose's parameters.
type DiagnoseQuery struct{ Model, From, To, Alert string }

func findAlert(as []alerting.Alert, name, model string) (alerting.Alert, bool) {
	for _, a := range as { // firing first, newest first
		if a.Labels["alertname"] == name && (model == "" || a.Labels["model"] == model) {
			return a, true
		}
	}
	return alerting.Alert{}, false
}

// parseWhen reads RFC 3339 or a duration before now; empty is def.
func parseWhen(v string, now, def time.Time) (time.Time, error) {
	if v == "" {
		return def, nil
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	// "5m" and "-5m" both mean five minutes ago; a sign inside ("--5m") or a
	// "+" would otherwise read as ahead of now, or as ago when meant ahead.
	d, err := time.ParseDuration(strings.TrimPrefix(v, "-"))
	if err != nil || strings.HasPrefix(v, "+") || strings.HasPrefix(v, "--") || d < 0 {
		return time.Time{}, fmt.Errorf("%q is neither RFC 3339 nor a duration ago (5m)", v)
	}
	return now.Add(-d), nil
}

// handleDiagnose serves /debug/diagnose.
func (s *Sidecar) handleDiagnose(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	rep, err := s.Diagnose(DiagnoseQuery{Model: q.Get("model"), From: q.Get("from"), To: q.Get("to"), Alert: q.Get("alert")})
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err != nil {
		code := http.StatusBadRequest
		if errors.Is(err, ErrNotFound) || errors.Is(err, diagnosis.ErrNoWindows) {
			code = http.StatusNotFound
		}
		w.WriteHeader(code)
		enc.Encode(map[string]string{"error": err.Error()})
		return
	}
	enc.Encode(rep)
}

// explain is the engine's Options.Explain: the diagnosis of the alert's
// windows against those before them, as annotations. It reads the history
// and the window being judged only.
func (s *Sidecar) explain(model, version string, from time.Time, w windowstats.WindowView, host *alerting.HostBreakdown) map[string]string {
	ws := s.hist.Windows(model)
	cur := diagnosis.FromView(w, version, host, 0)
	kept := false
	for _, x := range ws {
		if x.Start.Equal(cur.Start) && x.Version == version {
			kept = true
		}
	}
	if !kept {
		ws = append(ws, cur)
	}
	rep, err := diagnosis.Diagnose(diagnosis.Request{Model: model, From: from, Windows: ws}, diagnosis.Options{})
	if err != nil {
		return nil
	}
	return causeAnnotations(rep)
}

// causeAnnotations renders a report's top three causes for an alert.
func causeAnnotations(rep diagnosis.Report) map[string]string {
	var parts []string
	for _, c := range rep.Causes[:min(3, len(rep.Causes))] {
		p := fmt.Sprintf("%s %.2f", c.Name, c.Score)
		if c.Phase != "" {
			p += " [" + c.Phase + "]"
		}
		parts = append(parts, p+": "+c.Summary)
	}
	a := map[string]string{"diagnosis": truncate(rep.Summary, maxCauseText)}
	if len(parts) > 0 {
		a["top_causes"] = truncate(strings.Join(parts, "; "), maxCauseText)
	}
	if len(rep.Traces) > 0 {
		a["example_traces"] = strings.Join(rep.Traces, " ")
	}
	return a
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xc0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}
