package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/internal/testenv"
)

// truth is the synthetic models' noise-free P99 (seconds) at t with load q.
func truth(base, k, q, peak float64) float64 {
	u := q / peak
	return base * (1 + k*u*u)
}

func loadOf(t time.Time, peak float64) float64 {
	h := float64(t.UTC().Hour()) + float64(t.UTC().Minute())/60
	return peak * (0.15 + 0.85*math.Pow(0.5-0.5*math.Cos(2*math.Pi*(h-3)/24), 1.4))
}

// synthFleet is one fleet of the synthetic history: its series' labels and
// the noise-free P99 curve it follows.
type synthFleet struct {
	labels        string // `model="resnet"`, `namespace="team-a",model="resnet"`
	base, k, peak float64
}

// importHistory writes three days of each fleet's P99 (test_p99_seconds)
// and load (test_qps), one point a minute up to now, into vm.
func importHistory(t *testing.T, vm string, now time.Time, fleets []synthFleet) {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	var b strings.Builder
	for _, f := range fleets {
		for i := 3 * 1440; i > 0; i-- {
			ts := now.Add(-time.Duration(i) * time.Minute)
			q := loadOf(ts, f.peak) * (0.95 + 0.1*rng.Float64())
			v := truth(f.base, f.k, q, f.peak) * math.Exp(0.05*rng.NormFloat64())
			fmt.Fprintf(&b, "test_p99_seconds{%s} %g %d\n", f.labels, v, ts.UnixMilli())
			fmt.Fprintf(&b, "test_qps{%s} %g %d\n", f.labels, q, ts.UnixMilli())
		}
	}
	resp, err := http.Post(vm+"/api/v1/import/prometheus", "text/plain", strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("import: %s", resp.Status)
	}
	flush(vm)
}

// checkBands reads each fleet's band 30 minutes ahead and holds its
// expected P99 to the fleet's own truth.
func checkBands(t *testing.T, vm string, now time.Time, fleets []synthFleet) {
	t.Helper()
	at := now.Add(30 * time.Minute)
	for _, f := range fleets {
		got := map[string]float64{}
		for _, bound := range []string{"expected", "lower", "upper"} {
			q := fmt.Sprintf(`%s{%s,bound=%q}`, Metric, f.labels, bound)
			v, ok := query(t, vm, q, at)
			if !ok {
				t.Fatalf("%s at %s: no value, or not one series", q, at.Format(time.RFC3339))
			}
			got[bound] = v
		}
		want := truth(f.base, f.k, loadOf(at.Add(-24*time.Hour), f.peak), f.peak)
		t.Logf("%s at +30m: lower %.4f expected %.4f upper %.4f (truth %.4f)", f.labels, got["lower"], got["expected"], got["upper"], want)
		if math.Abs(got["expected"]/want-1) > 0.05 {
			t.Errorf("%s: expected %.4f, truth %.4f", f.labels, got["expected"], want)
		}
		if !(got["lower"] < got["expected"] && got["expected"] < got["upper"]) {
			t.Errorf("%s: band %v", f.labels, got)
		}
	}
}

// TestBandsRoundTripThroughVictoriaMetrics imports three days of two
// models' P99 and load into a real VictoriaMetrics, runs the fleet fit
// against its query API, and reads the bands it wrote back.
func TestBandsRoundTripThroughVictoriaMetrics(t *testing.T) {
	vm := testenv.StartVictoriaMetrics(t, testenv.RequireBinary(t, "victoria-metrics"))
	now := time.Now().UTC().Truncate(time.Minute)
	fleets := []synthFleet{{`model="resnet"`, 0.040, 1.0, 800}, {`model="bert"`, 0.120, 0.6, 200}}
	importHistory(t, vm, now, fleets)

	o := Options{QueryURL: vm, Latency: `test_p99_seconds`, Load: `test_qps`}
	res, err := Run(context.Background(), o, now)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 {
		t.Fatalf("results %+v, want two models", res)
	}
	for _, r := range res {
		if r.Err != nil || r.Kind != "daily" || r.Points < 4000 || r.Group != "" {
			t.Errorf("%+v: want a daily fit of about 4320 points, no group", r)
		}
	}
	flush(vm)
	checkBands(t, vm, now, fleets)
}

// TestBandsPerNamespace: one model served in two namespaces at different
// latencies is two fleets, each fitted from its own history and written
// with its namespace, as the rules judge them. Fitted as one fleet
// (NoGroup), the query's two series for one model are an error, not a
// band that is neither's.
func TestBandsPerNamespace(t *testing.T) {
	vm := testenv.StartVictoriaMetrics(t, testenv.RequireBinary(t, "victoria-metrics"))
	now := time.Now().UTC().Truncate(time.Minute)
	fleets := []synthFleet{
		{`namespace="team-a",model="resnet"`, 0.040, 1.0, 800},
		{`namespace="team-b",model="resnet"`, 0.160, 0.5, 300},
	}
	importHistory(t, vm, now, fleets)

	o := Options{QueryURL: vm, Latency: `test_p99_seconds`, Load: `test_qps`}
	res, err := Run(context.Background(), o, now)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range res {
		names = append(names, r.Name())
		if r.Err != nil || r.Kind != "daily" {
			t.Errorf("%+v: want a daily fit", r)
		}
	}
	if want := []string{`resnet{namespace="team-a"}`, `resnet{namespace="team-b"}`}; !slices.Equal(names, want) {
		t.Fatalf("fleets %q, want %q", names, want)
	}
	flush(vm)
	checkBands(t, vm, now, fleets)

	o.Group = NoGroup
	if _, err := Run(context.Background(), o, now.Add(time.Minute)); err == nil || !strings.Contains(err.Error(), "two series for one fleet") {
		t.Errorf("one fleet per model over two namespaces' series: err %v, want two series for one fleet", err)
	}
}

// TestBandsKeepLabelValues: a model or group value with a quote, a tab or a
// rune Go's %q would escape comes back from the import exactly as it was
// queried, so the rules' joins still match it.
func TestBandsKeepLabelValues(t *testing.T) {
	vm := testenv.StartVictoriaMetrics(t, testenv.RequireBinary(t, "victoria-metrics"))
	now := time.Now().UTC().Truncate(time.Minute)
	fleets := []synthFleet{{"team=\"a\tb\u00a0c\",model=\"r\\\"é\\\"snet\"", 0.040, 1.0, 800}}
	importHistory(t, vm, now, fleets)

	o := Options{QueryURL: vm, Latency: `test_p99_seconds`, Load: `test_qps`, Group: []string{"team"}}
	res, err := Run(context.Background(), o, now)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || res[0].Err != nil || res[0].Model != `r"é"snet` || res[0].Group != "team=\"a\tb\u00a0c\"" {
		t.Fatalf("results %+v, want one fit of the model, its group as written", res)
	}
	flush(vm)
	checkBands(t, vm, now, fleets)
}

func TestOptionsNameTheField(t *testing.T) {
	for _, tc := range []struct {
		o     Options
		field string
	}{
		{Options{QueryURL: "vm:8428"}, "query_url"},
		{Options{QueryURL: "http://vm", ImportURL: "ftp://x"}, "import_url"},
		{Options{QueryURL: "http://vm", Step: time.Millisecond}, "step"},
		{Options{QueryURL: "http://vm", Horizon: time.Second}, "horizon"},
		{Options{QueryURL: "http://vm", Band: -1}, "band"},
		{Options{QueryURL: "http://vm", Label: "kind"}, "label"},
		{Options{QueryURL: "http://vm", Group: []string{"name-space"}}, "group[0]"},
		{Options{QueryURL: "http://vm", Group: []string{"namespace", "bound"}}, "group[1]"},
		{Options{QueryURL: "http://vm", Group: []string{"model"}}, "group[0]"},
	} {
		if err := tc.o.Validate(); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%+v: err %v, want one naming %s", tc.o, err, tc.field)
		}
	}
}

func flush(vm string) {
	if resp, err := http.Get(vm + "/internal/force_flush"); err == nil {
		resp.Body.Close()
	}
}

func query(t *testing.T, vm, q string, at time.Time) (float64, bool) {
	t.Helper()
	resp, err := http.Get(vm + "/api/v1/query?query=" + url.QueryEscape(q) + "&time=" + strconv.FormatInt(at.Unix(), 10))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Data struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	if len(r.Data.Result) != 1 {
		return 0, false
	}
	s, _ := r.Data.Result[0].Value[1].(string)
	v, err := strconv.ParseFloat(s, 64)
	return v, err == nil
}

// TestLookbackOverThePointsLimit: a query API caps the points of one range
// query per series (Prometheus at 11 000, which refuses the default 14
// days at 1m, 20 160; VictoriaMetrics at -search.maxPointsPerTimeseries),
// so a lookback over that is read in pieces. Against a real
// VictoriaMetrics capped at 10 100 points, three days at a 20 s step
// (12 961 points) come back whole — every step once, in order — and are
// fitted; against a real Prometheus the default lookback is not refused.
func TestLookbackOverThePointsLimit(t *testing.T) {
	bin := testenv.RequireBinary(t, "victoria-metrics")
	addr := testenv.FreeAddr(t)
	p := testenv.Start(t, bin, "-httpListenAddr="+addr, "-storageDataPath="+t.TempDir(), "-retentionPeriod=30d",
		"-search.latencyOffset=0s", "-search.disableCache", "-loggerLevel=ERROR", "-search.maxPointsPerTimeseries=10100")
	testenv.WaitHTTP(t, p, "http://"+addr+"/health", 15*time.Second)
	vm := "http://" + addr
	now := time.Now().UTC().Truncate(time.Minute)
	fleets := []synthFleet{{`model="resnet"`, 0.040, 1.0, 800}}
	importHistory(t, vm, now, fleets)

	o := Options{QueryURL: vm, Latency: `test_p99_seconds`, Load: `test_qps`, Lookback: 3 * 24 * time.Hour, Step: 20 * time.Second}
	lat, err := queryRange(context.Background(), o.withDefaults(), o.Latency, now.Add(-o.Lookback), now)
	if err != nil {
		t.Fatalf("a lookback of %d steps over the server's 10 100: %v", int(o.Lookback/o.Step), err)
	}
	pts := lat[fleetKey{model: "resnet"}]
	if len(pts) < 3*86400/20 {
		t.Errorf("%d points, want %d (every step of three days)", len(pts), 3*86400/20+1)
	}
	for i := 1; i < len(pts); i++ {
		if d := pts[i].T.Sub(pts[i-1].T); d != o.Step {
			t.Fatalf("point %d at %s, %v after the one before", i, pts[i].T, d)
		}
	}
	res, err := Run(context.Background(), o, now)
	if err != nil || len(res) != 1 || res[0].Err != nil || res[0].Kind != "daily" {
		t.Fatalf("fit over the capped server: %+v, %v", res, err)
	}
	flush(vm)
	checkBands(t, vm, now, fleets)

	prom := testenv.RequireBinary(t, "prometheus")
	dir := t.TempDir()
	rules := filepath.Join(dir, "empty.rules.yaml")
	if err := os.WriteFile(rules, []byte("groups: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	paddr := testenv.StartPrometheus(t, prom, dir, testenv.FreeAddr(t), rules)
	if _, err := Run(context.Background(), Options{QueryURL: "http://" + paddr, ImportURL: vm, Load: "-"}, now); err != nil {
		t.Fatalf("the default 14-day lookback against Prometheus: %v", err)
	}
}
