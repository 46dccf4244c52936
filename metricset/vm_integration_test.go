package metricset

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/internal/testenv"
)

// maxQuantileError is the worst-case relative error of histogram_quantile
// with durationBuckets: the estimate and the true quantile share a bucket,
// so they differ by at most the widest ratio of adjacent bounds, minus one
// (2^(1/3) ≈ 1.26 before rounding the bounds, 1.2655 after).
var maxQuantileError = func() float64 {
	worst := 0.0
	for i := 1; i < len(durationBuckets); i++ {
		worst = max(worst, durationBuckets[i]/durationBuckets[i-1]-1)
	}
	return worst
}()

// TestPushToVictoriaMetrics pushes to a real VictoriaMetrics and checks that
// histogram_quantile over the pushed `le` buckets agrees with the observed
// durations within the bucket error, and that the extra labels arrived.
func TestPushToVictoriaMetrics(t *testing.T) {
	vm := testenv.StartVictoriaMetrics(t, testenv.RequireBinary(t, "victoria-metrics"))

	s := New(Options{})
	durations := logSpread(1000, time.Millisecond, 500*time.Millisecond)
	for _, d := range durations {
		s.Observe(grpcCall("resnet", "1", "OK", d))
	}

	pod := "pod-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := s.InitPush(ctx, vm+"/api/v1/import/prometheus", 200*time.Millisecond,
		map[string]string{"pod": pod, "namespace": "inferwatch-test"}); err != nil {
		t.Fatal(err)
	}

	// Wait until the whole push is searchable, extra labels included.
	countQ := fmt.Sprintf(`sum(inferwatch_request_duration_seconds_count{pod=%q,namespace="inferwatch-test"})`, pod)
	deadline := time.Now().Add(20 * time.Second)
	for {
		// force_flush makes freshly ingested samples and series searchable
		// now instead of after VictoriaMetrics' periodic flushes.
		if resp, err := http.Get(vm + "/internal/force_flush"); err == nil {
			resp.Body.Close()
		}
		v, ok := queryScalar(t, vm, countQ)
		if ok && v == float64(len(durations)) {
			t.Logf("push searchable after %v", time.Since(deadline.Add(-20*time.Second)).Round(time.Millisecond))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %v (present %v) after 20s, want %d", countQ, v, ok, len(durations))
		}
		time.Sleep(250 * time.Millisecond)
	}

	for _, q := range []float64{0.5, 0.9, 0.99} {
		query := fmt.Sprintf(`histogram_quantile(%v, sum(inferwatch_request_duration_seconds_bucket{pod=%q}) by (le))`, q, pod)
		got, ok := queryScalar(t, vm, query)
		if !ok {
			t.Fatalf("%s returned nothing", query)
		}
		truth := trueQuantile(q, durations)
		if rel := math.Abs(got-truth) / truth; rel > maxQuantileError {
			t.Errorf("q%v: VictoriaMetrics says %.6fs, observed %.6fs: error %.1f%% beyond the %.1f%% bucket bound",
				q, got, truth, 100*rel, 100*maxQuantileError)
		}
		// The same buckets read with Prometheus' interpolation must agree
		// with VictoriaMetrics: le buckets mean the same to both engines.
		local := quantile(q, scrape(t, s).buckets("inferwatch_request_duration_seconds", base("resnet", "1")))
		if math.IsNaN(local) || math.Abs(got-local) > 1e-3*local {
			t.Errorf("q%v: VictoriaMetrics says %.6fs, Prometheus' method on /metrics %.6fs", q, got, local)
		}
		t.Logf("q%v: true %.4fs, VictoriaMetrics %.4fs (%+.1f%%)", q, truth, got, 100*(got-truth)/truth)
	}
}

// queryScalar runs an instant query expected to yield at most one series.
func queryScalar(t *testing.T, vm, query string) (float64, bool) {
	t.Helper()
	resp, err := http.Get(vm + "/api/v1/query?query=" + url.QueryEscape(query))
	if err != nil {
		t.Fatalf("query %s: %v", query, err)
	}
	defer resp.Body.Close()
	var r struct {
		Status string
		Error  string
		Data   struct {
			Result []struct {
				Value [2]any
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatalf("query %s: decode response: %v", query, err)
	}
	if r.Status != "success" {
		t.Fatalf("query %s: %s", query, r.Error)
	}
	if len(r.Data.Result) == 0 {
		return 0, false
	}
	if len(r.Data.Result) > 1 {
		t.Fatalf("query %s: %d series, want one", query, len(r.Data.Result))
	}
	s, _ := r.Data.Result[0].Value[1].(string)
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("query %s: value %v: %v", query, r.Data.Result[0].Value[1], err)
	}
	return v, true
}

// logSpread returns n durations spread evenly in log scale over [lo, hi],
// shuffled deterministically so the order of observation is not sorted.
func logSpread(n int, lo, hi time.Duration) []time.Duration {
	out := make([]time.Duration, n)
	ratio := math.Log(float64(hi) / float64(lo))
	for i := range out {
		j := (i * 7919) % n // 7919 is prime, so this permutes 0..n-1
		out[i] = time.Duration(float64(lo) * math.Exp(ratio*float64(j)/float64(n-1)))
	}
	return out
}

// trueQuantile is the nearest-rank quantile of the observed durations, in
// seconds.
func trueQuantile(q float64, ds []time.Duration) float64 {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(i, 0)].Seconds()
}
