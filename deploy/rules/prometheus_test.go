package rules

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/internal/exposition"
	"github.com/inferwatch/inferwatch/internal/testenv"
	"github.com/inferwatch/inferwatch/metricset"
	"github.com/inferwatch/inferwatch/record"
)

// Bucket error of the duration histograms (docs/metrics.md): the estimate
// lies within +26.6 % / -21 % of the true quantile, adjacent bounds being at
// most 1.2655 apart.
const (
	maxOver  = 0.2655
	maxUnder = 1 - 1/1.2655
)

// TestRulesInPrometheus loads the rules into a real Prometheus that scrapes
// a real metricset.Set fed with known call durations, and checks that every
// rule evaluates without error and that the p50 and p99 recording rules
// agree with the histogram's own quantiles (Prometheus' interpolation on
// the scraped buckets) and with the true quantiles within the bucket error.
// Rules are evaluated every second here; the 1-minute windows stay.
func TestRulesInPrometheus(t *testing.T) {
	bin := testenv.RequireBinary(t, "prometheus")

	set := metricset.New(metricset.Options{})
	durations := logSpread(2000, time.Millisecond, 500*time.Millisecond)
	var mu sync.Mutex // a scrape sees all of a batch or none of it
	observe := func() {
		mu.Lock()
		defer mu.Unlock()
		for _, d := range durations {
			set.Observe(call("resnet", "1", d))
		}
	}
	// The series exist, with these counts, before the first scrape; the
	// same durations are observed once more after it, so every bucket's
	// increase is proportional to its starting value and rate()'s
	// extrapolation scales all buckets alike.
	observe()
	sidecar := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		mu.Lock()
		defer mu.Unlock()
		set.WritePrometheus(w)
		// The operator's SLA series (docs/rules.md), far below the
		// observed mean so that LatencyMeanOverSLA's join is exercised.
		fmt.Fprintln(w, `inferwatch_model_sla_seconds{model="resnet"} 0.01`)
	}))
	t.Cleanup(sidecar.Close)

	dir := t.TempDir()
	prom := testenv.StartPrometheus(t, bin, dir, strings.TrimPrefix(sidecar.URL, "http://"), testenv.FastRules(t, rulesFile, dir))

	waitFor(t, prom, `inferwatch_request_duration_seconds_count{model="resnet"}`, func(v float64) bool { return v == float64(len(durations)) })
	observe()

	local := scrapeBuckets(t, sidecar.URL, "resnet")
	for _, tc := range []struct {
		q      float64
		record string
	}{
		{0.5, "model:inferwatch_request_duration_seconds:p50_1m"},
		{0.99, "model:inferwatch_request_duration_seconds:p99_1m"},
	} {
		got := waitFor(t, prom, tc.record+`{model="resnet",version="1"}`, func(float64) bool { return true })
		own := bucketQuantile(tc.q, local)
		if math.Abs(got-own) > 1e-9*own {
			t.Errorf("%s = %.6fs, the histogram's own q%v (Prometheus' interpolation on /metrics) %.6fs", tc.record, got, tc.q, own)
		}
		truth := trueQuantile(tc.q, durations)
		if rel := (got - truth) / truth; rel > maxOver || rel < -maxUnder {
			t.Errorf("%s = %.6fs, true q%v %.6fs: %+.1f%% beyond the bucket error (+%.1f%%/-%.1f%%)", tc.record, got, tc.q, truth, 100*rel, 100*maxOver, 100*maxUnder)
		}
		t.Logf("q%v: recording rule %.4fs, histogram %.4fs, true %.4fs (%+.1f%%)", tc.q, got, own, truth, 100*(got-truth)/truth)
	}
	mean := waitFor(t, prom, `model:inferwatch_request_duration_seconds:mean_1m{model="resnet"}`, func(float64) bool { return true })
	var sum float64
	for _, d := range durations {
		sum += d.Seconds()
	}
	if want := sum / float64(len(durations)); math.Abs(mean-want) > 1e-6*want {
		t.Errorf("mean_1m = %.6fs, want %.6fs", mean, want)
	}

	// The SLA join matches: the observed-mean alert is at least pending
	// (its for: is minutes long).
	waitFor(t, prom, `count(ALERTS{alertname="LatencyMeanOverSLA",basis="observed",model="resnet",version="1"})`, func(v float64) bool { return v == 1 })

	checkRuleHealth(t, prom)
}

// waitFor polls an instant query expected to give at most one series until
// its value satisfies ok, and returns it.
func waitFor(t *testing.T, addr, query string, ok func(float64) bool) float64 {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		v, found := queryScalar(t, addr, query)
		if found && ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %v (present: %v) after 20s", query, v, found)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func queryScalar(t *testing.T, addr, query string) (float64, bool) {
	t.Helper()
	var r struct {
		Data struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	apiGet(t, addr, "/api/v1/query?query="+url.QueryEscape(query), &r)
	switch len(r.Data.Result) {
	case 0:
		return 0, false
	case 1:
	default:
		t.Fatalf("%s: %d series, want one", query, len(r.Data.Result))
	}
	s, _ := r.Data.Result[0].Value[1].(string)
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("%s: value %v: %v", query, r.Data.Result[0].Value[1], err)
	}
	return v, true
}

func apiGet(t *testing.T, addr, path string, into any) {
	t.Helper()
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	var env struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&env); err != nil {
		t.Fatalf("GET %s: decode: %v", path, err)
	}
	if env.Status != "success" {
		t.Fatalf("GET %s: %s", path, env.Error)
	}
	if err := json.Unmarshal([]byte(`{"data":`+string(env.Data)+`}`), into); err != nil {
		t.Fatalf("GET %s: decode data: %v", path, err)
	}
}

// checkRuleHealth waits until Prometheus has evaluated every rule and
// fails on any that errs (a PromQL runtime error, e.g. many-to-many
// matching).
func checkRuleHealth(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var r struct {
			Data struct {
				Groups []struct {
					Name  string `json:"name"`
					Rules []struct {
						Name      string `json:"name"`
						Health    string `json:"health"`
						LastError string `json:"lastError"`
					} `json:"rules"`
				} `json:"groups"`
			} `json:"data"`
		}
		apiGet(t, addr, "/api/v1/rules", &r)
		var pending []string
		rules := 0
		for _, g := range r.Data.Groups {
			for _, rule := range g.Rules {
				rules++
				switch rule.Health {
				case "ok":
				case "err":
					t.Errorf("rule %s in group %s: %s", rule.Name, g.Name, rule.LastError)
				default:
					pending = append(pending, rule.Name)
				}
			}
		}
		if rules == 0 {
			t.Fatal("Prometheus loaded no rules")
		}
		if len(pending) == 0 || t.Failed() {
			t.Logf("%d rules evaluated", rules)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("rules not evaluated after 20s: %v", pending)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

type bucket struct{ le, count float64 }

// scrapeBuckets reads a model's cumulative request-duration buckets from the
// sidecar's /metrics.
func scrapeBuckets(t *testing.T, base, model string) []bucket {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	text, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	page, err := exposition.Parse(string(text))
	if err != nil {
		t.Fatal(err)
	}
	var out []bucket
	for _, s := range page.Find("inferwatch_request_duration_seconds_bucket", map[string]string{"model": model}) {
		le, err := strconv.ParseFloat(s.Labels["le"], 64) // "+Inf" reads as +Inf
		if err != nil {
			t.Fatalf("le in %s: %v", s.Series, err)
		}
		out = append(out, bucket{le: le, count: s.Value})
	}
	if len(out) == 0 {
		t.Fatalf("no buckets for %s in /metrics", model)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].le < out[j].le })
	return out
}

// bucketQuantile is histogram_quantile's method: find the bucket holding
// the rank, interpolate linearly inside it (from 0 for the first bucket).
func bucketQuantile(q float64, bs []bucket) float64 {
	total := bs[len(bs)-1].count
	rank := q * total
	i := sort.Search(len(bs)-1, func(i int) bool { return bs[i].count >= rank })
	if i == len(bs)-1 {
		return bs[len(bs)-2].le
	}
	start, below := 0.0, 0.0
	if i > 0 {
		start, below = bs[i-1].le, bs[i-1].count
	}
	return start + (bs[i].le-start)*(rank-below)/(bs[i].count-below)
}

// call is a completed gRPC call of the given duration.
func call(model, version string, d time.Duration) *record.Call {
	return &record.Call{
		Start:       time.Now(),
		RequestEnd:  d / 10,
		FirstByte:   d * 8 / 10,
		ResponseEnd: d * 9 / 10,
		End:         d,
		Protocol:    record.ProtocolGRPC,
		API:         record.APIKServeV2,
		Method:      "ModelInfer",
		Model:       model,
		Version:     version,
		Code:        "OK",
	}
}

// logSpread returns n durations spread evenly in log scale over [lo, hi].
func logSpread(n int, lo, hi time.Duration) []time.Duration {
	out := make([]time.Duration, n)
	ratio := math.Log(float64(hi) / float64(lo))
	for i := range out {
		out[i] = time.Duration(float64(lo) * math.Exp(ratio*float64(i)/float64(n-1)))
	}
	return out
}

// trueQuantile is the nearest-rank quantile of the durations, in seconds.
func trueQuantile(q float64, ds []time.Duration) float64 {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[max(int(math.Ceil(q*float64(len(s))))-1, 0)].Seconds()
}
