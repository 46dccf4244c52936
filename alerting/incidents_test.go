package alerting

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// incidentsDir is the shared labelled benchmark: per-minute P99 series of
// ten models over 28 days with labelled incidents (see its generate.py).
const incidentsDir = "../../shared/bench/latency-incidents"

// TestP99RuleOnLabelledIncidents replays each series through the
// P99OverBaseline rule with its default thresholds, one series point per
// window (so windows are 1 minute here, and every window counts as having
// enough calls), and scores the firing minutes as the benchmark's score.py
// does (INFERWATCH_SCORE_PY=1 runs score.py itself on the same alerts, to
// cross-check). It reports the figures (docs/alerting.md records them), for the
// defaults and with the noise floor on, and checks only that the rule finds
// something; the thresholds are the seed's, not tuned to this data.
func TestP99RuleOnLabelledIncidents(t *testing.T) {
	if testing.Short() {
		t.Skip("replays 28 days of ten series")
	}
	if raceEnabled {
		t.Skip("one goroutine's replay: the plain pass runs it, the race detector has nothing to find")
	}
	data := filepath.Join(incidentsDir, "data")
	if _, err := os.Stat(filepath.Join(data, "incidents.json")); err != nil {
		t.Skipf("benchmark not present: %v", err)
	}
	series, _ := filepath.Glob(filepath.Join(data, "model_*_p99_ms.csv"))
	if len(series) == 0 {
		t.Skip("no series in " + data)
	}
	for _, tc := range []struct {
		name string
		th   Thresholds
	}{
		{"defaults (the seed's rule)", DefaultThresholds()},
		{"p99_noise_k 3", DefaultThresholds().over(Thresholds{P99NoiseK: 3})},
	} {
		sc, out := replayP99(t, series, tc.th)
		t.Logf("P99OverBaseline, %s: %s", tc.name, sc)
		if sc.recall == 0 {
			t.Errorf("%s: the P99 rule found no incident", tc.name)
		}
		// The benchmark's own scorer agrees with scoreIncidents; it is slow
		// (seconds per run), so it runs on request only.
		if os.Getenv("INFERWATCH_SCORE_PY") == "" {
			continue
		}
		if py, err := exec.LookPath("python3"); err == nil {
			b, err := exec.Command(py, filepath.Join(incidentsDir, "score.py"), data, out).CombinedOutput()
			if err != nil {
				t.Fatalf("score.py: %v\n%s", err, b)
			}
			t.Logf("score.py:\n%s", b)
		}
	}
}

// replayP99 runs every series through the rule and scores it; it also
// writes the alert CSVs score.py reads, into the folder it returns.
func replayP99(t *testing.T, series []string, th Thresholds) (score, string) {
	data := filepath.Join(incidentsDir, "data")
	out := t.TempDir()
	firing := map[string][]bool{}
	var times []time.Time
	for _, p := range series {
		name := filepath.Base(p)
		if strings.HasSuffix(name, ".load.csv") {
			continue
		}
		ts, vs := readSeries(t, p)
		times = ts
		r := newRules(th, 30)
		f := make([]bool, len(vs))
		var b strings.Builder
		b.WriteString("timestamp,alert\n")
		for i, v := range vs {
			c := r.checkP99(v, int64(th.MinCount))
			r.machines[ruleP99].step(c.v, th.P99For, th.HoldDown)
			f[i] = r.machines[ruleP99].state == StateFiring
			a := 0
			if f[i] {
				a = 1
			}
			fmt.Fprintf(&b, "%s,%d\n", ts[i].Format(benchTime), a)
		}
		firing[name] = f
		if err := os.WriteFile(filepath.Join(out, name), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return scoreIncidents(t, filepath.Join(data, "incidents.json"), times, firing), out
}

const benchTime = "2006-01-02 15:04:05"

func readSeries(t *testing.T, path string) ([]time.Time, []float64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	ts := make([]time.Time, 0, len(rows))
	vs := make([]float64, 0, len(rows))
	for _, row := range rows[1:] {
		tm, err1 := time.Parse(benchTime, row[0])
		v, err2 := strconv.ParseFloat(row[1], 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("%s: bad row %q", path, row)
		}
		ts = append(ts, tm)
		vs = append(vs, v/1e3)
	}
	return ts, vs
}

type score struct {
	found, total, events, falseAlarms int
	recall, precision, perDay, delay  float64
	byKind                            map[string][2]int
}

func (s score) String() string {
	kinds := make([]string, 0, len(s.byKind))
	for k, v := range s.byKind {
		kinds = append(kinds, fmt.Sprintf("%s %d/%d", k, v[0], v[1]))
	}
	sort.Strings(kinds)
	return fmt.Sprintf("recall %.3f (%d/%d: %s) precision %.3f (%d alert events) false alarms/day %.2f median delay %.1f min",
		s.recall, s.found, s.total, strings.Join(kinds, ", "), s.precision, s.events, s.perDay, s.delay)
}

// scoreIncidents follows score.py: an incident is found when an alert
// minute falls in [start, end+30 min]; an alert event (a run of alert
// minutes) from day 8 on is a false alarm when it touches no such span.
func scoreIncidents(t *testing.T, path string, times []time.Time, firing map[string][]bool) score {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var inc map[string][]struct{ Kind, Start, End string }
	if err := json.Unmarshal(b, &inc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	s := score{byKind: map[string][2]int{}}
	var delays []float64
	var days float64
	tp := 0
	for name, f := range firing {
		warm := times[0].Add(7 * 24 * time.Hour)
		days += times[len(times)-1].Sub(warm).Hours() / 24
		type span struct{ s, e time.Time }
		var spans []span
		for _, x := range inc[name] {
			st, _ := time.Parse(benchTime, x.Start)
			en, _ := time.Parse(benchTime, x.End)
			en = en.Add(30 * time.Minute)
			spans = append(spans, span{st, en})
			k := s.byKind[x.Kind]
			k[1]++
			s.total++
			for i, on := range f {
				if on && !times[i].Before(st) && !times[i].After(en) {
					k[0]++
					s.found++
					delays = append(delays, times[i].Sub(st).Minutes())
					break
				}
			}
			s.byKind[x.Kind] = k
		}
		for i := 0; i < len(f); {
			if !f[i] {
				i++
				continue
			}
			j := i
			for j+1 < len(f) && f[j+1] {
				j++
			}
			if !times[j].Before(warm) {
				s.events++
				hit := false
				for _, sp := range spans {
					if !times[i].After(sp.e) && !times[j].Before(sp.s) {
						hit = true
					}
				}
				if hit {
					tp++
				} else {
					s.falseAlarms++
				}
			}
			i = j + 1
		}
	}
	if s.total > 0 {
		s.recall = float64(s.found) / float64(s.total)
	}
	if s.events > 0 {
		s.precision = float64(tp) / float64(s.events)
	}
	if days > 0 {
		s.perDay = float64(s.falseAlarms) / days
	}
	if len(delays) > 0 {
		sort.Float64s(delays)
		s.delay = delays[len(delays)/2]
		if len(delays)%2 == 0 {
			s.delay = (delays[len(delays)/2-1] + delays[len(delays)/2]) / 2
		}
	}
	return s
}
