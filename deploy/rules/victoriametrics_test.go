package rules

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/internal/testenv"
)

// TestNamespaceJoinsInVictoriaMetrics evaluates the rules that choose a
// (namespace, model)'s SLA, TTFT SLO and fleet band in a real
// VictoriaMetrics, whose MetricsQL is what vmalert runs (the dry run only
// parses them; promtool test 10 checks Prometheus' answers). Their inputs —
// the recorded rates they join against included — are imported as they
// stand at one instant, each rule's expression is taken from the rules file
// and queried there, and the answer must be promtool's: a namespace's own
// series where it has one, else the one with no namespace, for every
// namespace serving the model; a sidecar's own band (no kind) never.
func TestNamespaceJoinsInVictoriaMetrics(t *testing.T) {
	vm := testenv.StartVictoriaMetrics(t, testenv.RequireBinary(t, "victoria-metrics"))

	at := time.Now().Truncate(time.Second).Add(-time.Minute)
	series := []string{
		`model:inferwatch_request_duration_seconds_count:rate1m{namespace="team-a",model="resnet",version="1"} 6.7`,
		`model:inferwatch_request_duration_seconds_count:rate1m{namespace="team-b",model="resnet",version="1"} 6.7`,
		`model:inferwatch_request_duration_seconds_count:rate1m{namespace="team-b",model="resnet",version="2"} 1`,
		`model:inferwatch_request_duration_seconds_count:rate1m{model="solo",version="1"} 2`,
		`inferwatch_model_sla_seconds{namespace="team-a",pod="a-0",model="resnet"} 0.1`,
		`inferwatch_model_sla_seconds{namespace="team-a",pod="a-1",model="resnet"} 0.1`,
		`inferwatch_model_sla_seconds{model="resnet"} 0.2`,
		`inferwatch_model_sla_seconds{model="solo"} 0.3`,
		`model:inferwatch_llm_time_to_first_token_seconds_count:rate1m{namespace="team-a",model="llm",version="1"} 1`,
		`model:inferwatch_llm_time_to_first_token_seconds_count:rate1m{namespace="team-b",model="llm",version="1"} 1`,
		`inferwatch_model_ttft_slo_seconds{namespace="team-a",pod="a-0",model="llm"} 0.5`,
		`inferwatch_model_ttft_slo_seconds{model="llm"} 2`,
		`inferwatch_latency_baseline_seconds{namespace="team-a",model="resnet",bound="upper",kind="daily"} 0.3`,
		`inferwatch_latency_baseline_seconds{namespace="team-a",model="resnet",bound="expected",kind="daily"} 0.2`,
		`inferwatch_latency_baseline_seconds{model="resnet",bound="upper",kind="seasonal"} 0.5`,
		`inferwatch_latency_baseline_seconds{model="resnet",bound="expected",kind="seasonal"} 0.4`,
		`inferwatch_latency_baseline_seconds{namespace="team-b",pod="b-0",model="resnet",version="1",bound="upper"} 0.01`,
	}
	var body strings.Builder
	for _, s := range series {
		for _, ts := range []time.Time{at.Add(-30 * time.Second), at} {
			fmt.Fprintf(&body, "%s %d\n", s, ts.UnixMilli())
		}
	}
	resp, err := http.Post(vm+"/api/v1/import/prometheus", "text/plain", strings.NewReader(body.String()))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("import: %s", resp.Status)
	}
	if resp, err := http.Get(vm + "/internal/force_flush"); err == nil {
		resp.Body.Close()
	}

	exprs := map[string]string{}
	for _, g := range loadRules(t).Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				exprs[r.Record] = r.Expr
			}
		}
	}
	for _, tc := range []struct {
		record string
		want   map[string]float64 // rendered label set → value
	}{
		{"model:inferwatch_model_sla_seconds:max", map[string]float64{
			`{model="resnet"}`:                    0.2,
			`{model="solo"}`:                      0.3,
			`{model="resnet",namespace="team-a"}`: 0.1,
			`{model="resnet",namespace="team-b"}`: 0.2,
		}},
		{"model:inferwatch_model_ttft_slo_seconds:max", map[string]float64{
			`{model="llm"}`:                    2,
			`{model="llm",namespace="team-a"}`: 0.5,
			`{model="llm",namespace="team-b"}`: 2,
		}},
		{"model:inferwatch_latency_baseline_seconds:upper", map[string]float64{
			`{model="resnet"}`:                    0.5,
			`{model="resnet",namespace="team-a"}`: 0.3,
			`{model="resnet",namespace="team-b"}`: 0.5,
		}},
		{"model:inferwatch_latency_baseline_seconds:expected", map[string]float64{
			`{model="resnet"}`:                    0.4,
			`{model="resnet",namespace="team-a"}`: 0.2,
			`{model="resnet",namespace="team-b"}`: 0.4,
		}},
	} {
		expr, ok := exprs[tc.record]
		if !ok {
			t.Fatalf("no recording rule %s", tc.record)
		}
		got := instant(t, vm, expr, at)
		if !maps.Equal(got, tc.want) {
			t.Errorf("%s in VictoriaMetrics:\n got  %v\n want %v", tc.record, sorted(got), sorted(tc.want))
		}
	}
}

// instant runs q at t and returns its samples by rendered label set.
func instant(t *testing.T, base, q string, at time.Time) map[string]float64 {
	t.Helper()
	v := url.Values{"query": {q}, "time": {strconv.FormatInt(at.Unix(), 10)}}
	resp, err := http.Get(base + "/api/v1/query?" + v.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	if r.Status != "success" {
		t.Fatalf("query %q: %s %s", q, r.Status, r.Error)
	}
	out := map[string]float64{}
	for _, s := range r.Data.Result {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(s.Metric)) {
			parts = append(parts, fmt.Sprintf("%s=%q", k, s.Metric[k]))
		}
		str, _ := s.Value[1].(string)
		f, err := strconv.ParseFloat(str, 64)
		if err != nil {
			t.Fatalf("query %q: value %v", q, s.Value)
		}
		out["{"+strings.Join(parts, ",")+"}"] = f
	}
	return out
}

func sorted(m map[string]float64) []string {
	var s []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		s = append(s, fmt.Sprintf("%s %g", k, m[k]))
	}
	return s
}
