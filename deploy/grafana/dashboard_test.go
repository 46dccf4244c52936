package grafana

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/inferwatch/inferwatch/internal/testenv"
	"gopkg.in/yaml.v3"
)

type dashboard struct {
	Title         string `json:"title"`
	UID           string `json:"uid"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		ID         int    `json:"id"`
		Type       string `json:"type"`
		Title      string `json:"title"`
		Datasource struct {
			Type string `json:"type"`
			UID  string `json:"uid"`
		} `json:"datasource"`
		GridPos struct{ H, W, X, Y int } `json:"gridPos"`
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// grafanaVars are what Grafana substitutes before a query reaches Prometheus.
var grafanaVars = strings.NewReplacer("$__rate_interval", "1m", "$__interval", "1m", "${datasource}", "x", "$model", ".*", "$namespace", ".*")

// documented returns the metric names the docs list in backticks, alone or
// with their labels (`inferwatch_llm_finish_total{reason}`).
func documented(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	re := regexp.MustCompile("`(inferwatch_[a-z0-9_]+)(\\{[^`]*\\})?`")
	for _, f := range []string{"metrics.md", "gpu.md", "bpf.md"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "docs", f))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			names[m[1]] = true
		}
	}
	return names
}

var (
	metricToken = regexp.MustCompile(`\binferwatch_[a-z0-9_]+`)
	selector    = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)\{`)
	// recordToken is a recording rule's name: level:metric:operation.
	recordToken = regexp.MustCompile(`\b[a-zA-Z_][a-zA-Z0-9_]*:[a-zA-Z0-9_:]+`)
)

// recorded returns the names deploy/rules records.
func recorded(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "rules", "inferwatch-rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Rules []struct {
				Record string `yaml:"record"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				names[r.Record] = true
			}
		}
	}
	return names
}

// checkNames returns the problems with the metric names of one expression:
// inferwatch metrics the docs list, series deploy/rules records, and
// Prometheus's ALERTS.
func checkNames(expr string, docs, records map[string]bool) []string {
	var bad []string
	for _, m := range metricToken.FindAllString(expr, -1) {
		base := m
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(m, suf); ok && docs[b] {
				base = b
			}
		}
		if !docs[base] {
			bad = append(bad, fmt.Sprintf("%s is not in docs/metrics.md (or gpu.md, bpf.md)", m))
		}
	}
	for _, m := range recordToken.FindAllString(expr, -1) {
		if !records[m] {
			bad = append(bad, fmt.Sprintf("%s is not recorded by deploy/rules", m))
		}
	}
	for _, m := range selector.FindAllStringSubmatch(expr, -1) {
		if !strings.HasPrefix(m[1], "inferwatch_") && !records[m[1]] && m[1] != "ALERTS" {
			bad = append(bad, fmt.Sprintf("selector %s{...} is not an inferwatch metric, a recorded series or ALERTS", m[1]))
		}
	}
	return bad
}

func TestCheckNamesCatches(t *testing.T) {
	docs := map[string]bool{"inferwatch_requests_total": true, "inferwatch_request_duration_seconds": true}
	records := map[string]bool{"model:inferwatch_request_duration_seconds:p99_1m": true}
	for _, tc := range []struct {
		expr string
		bad  bool
	}{
		{`rate(inferwatch_requests_total{model="a"}[1m])`, false},
		{`histogram_quantile(0.9, rate(inferwatch_request_duration_seconds_bucket{}[1m]))`, false},
		{`rate(inferwatch_request_total{}[1m])`, true},
		{`rate(http_requests_total{}[1m])`, true},
		{`model:inferwatch_request_duration_seconds:p99_1m{model="a"}`, false},
		{`model:inferwatch_request_duration_seconds:p98_1m{model="a"}`, true},
		{`ALERTS{alertname="P99OverBaseline"}`, false},
		{`ALERTS_FOR_STATE{alertname="P99OverBaseline"}`, true},
	} {
		if got := len(checkNames(tc.expr, docs, records)) > 0; got != tc.bad {
			t.Errorf("%s: flagged %v, want %v", tc.expr, got, tc.bad)
		}
	}
}

// queries reads a dashboard and returns its uid and every PromQL expression
// in it, variables substituted, keyed by where it is.
func queries(t *testing.T, raw []byte) (uid string, exprs map[string]string) {
	t.Helper()
	var d dashboard
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	if d.Title == "" || d.UID == "" || d.SchemaVersion < 30 || len(d.Panels) == 0 {
		t.Fatalf("not a Grafana dashboard: title %q uid %q schemaVersion %d, %d panels", d.Title, d.UID, d.SchemaVersion, len(d.Panels))
	}
	vars := map[string]bool{}
	out := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		if v.Type == "query" {
			inner, ok := strings.CutPrefix(v.Definition, "label_values(")
			i := strings.LastIndex(inner, ",")
			if !ok || i < 0 {
				t.Errorf("variable %s: definition %q is not label_values(selector, label)", v.Name, v.Definition)
				continue
			}
			out["variable "+v.Name] = grafanaVars.Replace(inner[:i])
		}
	}
	for _, v := range []string{"datasource", "model", "namespace"} {
		if !vars[v] {
			t.Errorf("no %s variable", v)
		}
	}
	ids := map[int]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] || p.ID == 0 {
			t.Errorf("panel %q: id %d missing or repeated", p.Title, p.ID)
		}
		ids[p.ID] = true
		if p.Datasource.Type != "prometheus" || p.GridPos.W == 0 || p.GridPos.H == 0 || len(p.Targets) == 0 {
			t.Errorf("panel %q: datasource %+v, gridPos %+v, %d targets", p.Title, p.Datasource, p.GridPos, len(p.Targets))
		}
		for _, tg := range p.Targets {
			if tg.Expr == "" {
				t.Errorf("panel %q target %s: no expr", p.Title, tg.RefID)
			}
			out[fmt.Sprintf("panel %q %s", p.Title, tg.RefID)] = grafanaVars.Replace(tg.Expr)
		}
	}
	return d.UID, out
}

// promtoolParse writes the expressions as recording rules and has
// Prometheus's own parser check them; it returns promtool's complaint.
func promtoolParse(t *testing.T, exprs map[string]string) error {
	t.Helper()
	bin := testenv.RequireBinary(t, "promtool")
	var rules []map[string]string
	i := 0
	for _, e := range exprs {
		i++
		rules = append(rules, map[string]string{"record": fmt.Sprintf("dashboard:query%d", i), "expr": e})
	}
	b, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "dashboard-rules.yaml")
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "check", "rules", f).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w: %s", err, out)
	}
	return nil
}

// TestDashboard checks every dashboard in this directory.
func TestDashboard(t *testing.T) {
	files, err := filepath.Glob("*.json")
	if err != nil || len(files) < 2 {
		t.Fatalf("dashboards %v: %v", files, err)
	}
	docs, records := documented(t), recorded(t)
	uids := map[string]string{}
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			uid, exprs := queries(t, raw)
			if other, dup := uids[uid]; dup {
				t.Errorf("uid %q is %s's too", uid, other)
			}
			uids[uid] = f
			for where, e := range exprs {
				for _, p := range checkNames(e, docs, records) {
					t.Errorf("%s: %s", where, p)
				}
			}
			if err := promtoolParse(t, exprs); err != nil {
				t.Errorf("promtool refuses a dashboard query: %v", err)
			}
		})
	}
	// The parse check can fail: a broken expression is refused.
	if err := promtoolParse(t, map[string]string{"x": `sum(rate(inferwatch_requests_total{model=~".*"}[1m])`}); err == nil {
		t.Errorf("promtool accepted an unbalanced expression")
	}
}
