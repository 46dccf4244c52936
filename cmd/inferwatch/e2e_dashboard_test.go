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

// dashboardFile is the Grafana dashboard the chart and the docs ship.
var dashboardFile = filepath.Join("..", "..", "deploy", "grafana", "inferwatch.json")

// noDataInDemo lists the dashboard's queries (panel title, refId) the demo
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
}

// TestE2EDashboardQueriesReturnData: the dashboard's queries, run by a real
// Prometheus over what the demo's sidecar exports (gRPC, HTTP and toy-LLM
// traffic), each give data. promtool parsing (deploy/grafana) cannot see a
// label a metric does not have, a `by` that drops `le`, or a series the
// sidecar never exports; this does.
func TestE2EDashboardQueriesReturnData(t *testing.T) {
	promBin := testenv.RequireBinary(t, "prometheus")
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				RefID string `json:"refId"`
				Expr  string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	d := startDemo(t, "--qps", "100", "--duration", "60s", "--ttft-slo", "2s")
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
	// rate() defined; a few more leave room for the rarer ones.
	promWait(t, prom, 30*time.Second, `inferwatch_llm_finish_total`)
	time.Sleep(5 * time.Second)

	// What Grafana substitutes: "All" of a variable is its allValue.
	vars := strings.NewReplacer("$__rate_interval", "1m", "$model", ".*", "$namespace", ".*")
	seen := map[[2]string]bool{}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			key := [2]string{p.Title, tg.RefID}
			seen[key] = true
			why, exempt := noDataInDemo[key]
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
	for key := range noDataInDemo {
		if !seen[key] {
			t.Errorf("noDataInDemo lists %q %s, which the dashboard has no query of", key[0], key[1])
		}
	}
}
