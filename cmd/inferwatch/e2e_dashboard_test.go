package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/internal/testenv"
)

// dashboardFiles are the Grafana dashboards the chart and the docs ship.
var dashboardFiles = []string{
	filepath.Join("..", "..", "deploy", "grafana", "inferwatch.json"),
	filepath.Join("..", "..", "deploy", "grafana", "inferwatch-fleet.json"),
}

// noDataInDemo lists the dashboards' queries (panel title, refId) the demo
// cannot feed, and why. Every other query must give a series; one listed
// here that gives one fails the test too, so the list stays exact.
var noDataInDemo = map[[2]string]string{
	{"GPU utilisation (SM and memory)", "A"}:         "no GPU here",
	{"GPU memory used", "A"}:                         "no GPU here",
	{"Latency P50 / P99 (sidecar total)", "C"}:       "the fleet band is written by inferwatch baseline, not the sidecar",
	{"Model load time (repository load calls)", "A"}: "the demo makes no repository load calls",
	{"Model load time (repository load calls)", "B"}: "the demo makes no repository load calls",
	{"Model readiness and loads", "B"}:               "the demo makes no repository load calls",
	{"Sidecar: records dropped, notifications", "B"}: "no Alertmanager configured",
	// inferwatch-fleet.json
	{"P99 against its baseline (P99OverBaseline)", "C"}:                   "the fleet band is written by inferwatch baseline",
	{"P99 against its baseline (P99OverBaseline)", "D"}:                   "the fleet band is written by inferwatch baseline",
	{"Latency spread against its recent median (LatencyStdDevJump)", "B"}: "the recent median is of the windows before the last minute (offset 1m)",
	{"Throughput–latency slope (ThroughputLatencySlopeChange)", "B"}:      "the band is over the hour before the last 10 minutes",
	{"Throughput–latency slope (ThroughputLatencySlopeChange)", "C"}:      "the band is over the hour before the last 10 minutes",
}

// maybeDataInDemo lists queries whose data depends on timing the test does
// not control; they may give a series or none.
var maybeDataInDemo = map[[2]string]string{
	{"Throughput–latency slope (ThroughputLatencySlopeChange)", "A"}: "recorded only while the QPS of the last 10 minutes varies by 5 % (here: while the load's first minute fills the rate window)",
}

type dashboardPanel struct {
	Title   string `json:"title"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
}

// TestE2EDashboardQueriesReturnData: the dashboards' queries, run by a real
// Prometheus over what the demo's sidecar exports (gRPC, HTTP and toy-LLM
// traffic) and what the repository's rules record from it, each give data.
// promtool parsing (deploy/grafana) cannot see a label a metric does not
// have, a `by` that drops `le`, or a series nothing exports; this does.
func TestE2EDashboardQueriesReturnData(t *testing.T) {
	promBin := testenv.RequireBinary(t, "prometheus")
	var panels []dashboardPanel
	for _, f := range dashboardFiles {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var dash struct {
			Panels []dashboardPanel `json:"panels"`
		}
		if err := json.Unmarshal(raw, &dash); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		panels = append(panels, dash.Panels...)
	}
	// A 100 µs SLA (mnist-mlp takes about 0.6 ms) puts LatencyMeanOverSLA
	// in the ALERTS series (pending, then firing) for the fleet dashboard's
	// alert panel.
	d := startDemo(t, "--qps", "100", "--duration", "60s", "--ttft-slo", "2s", "--sla", "100us")
	// A clean demo fails no call: a few malformed infer requests feed the
	// error panels (upstream 400s, decode failures).
	var httpAddr string
	for _, l := range strings.Split(d.log(), "\n") {
		if m := routeLine.FindStringSubmatch(l); m != nil && m[2] == "http" {
			httpAddr = m[3]
		}
	}
	if httpAddr == "" {
		t.Fatalf("no http route in the demo's log:\n%s", d.log())
	}
	for range 3 {
		res, err := http.Post("http://"+httpAddr+"/v2/models/mnist-mlp/infer", "application/json", strings.NewReader(`{"inputs": [`))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode/100 != 4 {
			t.Errorf("malformed infer request: %s, want a 4xx", res.Status)
		}
	}
	dir := t.TempDir()
	prom := testenv.StartPrometheus(t, promBin, dir, d.admin, testenv.FastRules(t, promRulesFile, dir))
	// Two scrapes of the slowest series (a finished generation) make every
	// rate() defined; a few more leave room for the rarer ones. (count():
	// promWait wants one series.)
	promWait(t, prom, 30*time.Second, `count(inferwatch_llm_finish_total)`)
	promWait(t, prom, 30*time.Second, `count(ALERTS{alertname="LatencyMeanOverSLA"})`)
	// The trailing P99 baseline: 10 evaluations of the 1-minute P99.
	promWait(t, prom, 30*time.Second, `count(model:inferwatch_request_duration_seconds:p99_1m_median_1h)`)
	time.Sleep(5 * time.Second)

	// What Grafana substitutes: "All" of a variable is its allValue.
	vars := strings.NewReplacer("$__rate_interval", "1m", "$model", ".*", "$namespace", ".*")
	seen := map[[2]string]bool{}
	for _, p := range panels {
		for _, tg := range p.Targets {
			key := [2]string{p.Title, tg.RefID}
			seen[key] = true
			why, exempt := noDataInDemo[key]
			if _, maybe := maybeDataInDemo[key]; maybe {
				continue
			}
			var r struct {
				Result []json.RawMessage `json:"result"`
			}
			promQuery(t, prom, vars.Replace(tg.Expr), time.Time{}, &r)
			switch {
			case len(r.Result) == 0 && !exempt:
				t.Errorf("panel %q %s: no series for %s", p.Title, tg.RefID, vars.Replace(tg.Expr))
			case len(r.Result) > 0 && exempt:
				t.Errorf("panel %q %s has data, but is listed as having none in the demo (%s): take it off the list", p.Title, tg.RefID, why)
			}
		}
	}
	for _, list := range []map[[2]string]string{noDataInDemo, maybeDataInDemo} {
		for key := range list {
			if !seen[key] {
				t.Errorf("the lists name %q %s, which no dashboard has a query of", key[0], key[1])
			}
		}
	}
}
