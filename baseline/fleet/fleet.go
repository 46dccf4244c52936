// Package fleet fits baselines for a whole fleet: it reads each model's
// latency history (and load) from a Prometheus-compatible query API
// (VictoriaMetrics, Prometheus), fits a baseline.Model per model, and
// writes the bands for the coming horizon back into VictoriaMetrics
// (/api/v1/import/prometheus) as
//
//	inferwatch_latency_baseline_seconds{model="...",bound="expected|lower|upper"}
//
// so that rules (deploy/rules) can compare every replica's P99 with one
// shared band. The `inferwatch baseline` command runs it on a schedule.
package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/inferwatch/inferwatch/baseline"
)

// Metric is the name the bands are written under.
const Metric = "inferwatch_latency_baseline_seconds"

// Options configure a run. Zero fields take the defaults shown.
type Options struct {
	// QueryURL is the query API's base (http://vm:8428, or a Prometheus).
	QueryURL string
	// ImportURL is where bands go: VictoriaMetrics' base URL (the
	// /api/v1/import/prometheus path is added). Default: QueryURL.
	ImportURL string
	// Latency is the PromQL of each model's latency in seconds, one series
	// per value of Label. Default: the P99 of inferwatch_request_duration_seconds.
	Latency string
	// Load is the PromQL of each model's request rate; "" for the default,
	// "-" for none.
	Load     string
	Label    string        // the label naming the model: "model"
	Lookback time.Duration // history read: 14 days
	Step     time.Duration // resolution: 1m
	Horizon  time.Duration // bands written ahead: 1h
	Band     float64       // half-width in residual scales: 3
	Fit      baseline.FitOptions
	Client   *http.Client // default: 30 s timeout
}

func (o Options) withDefaults() Options {
	if o.ImportURL == "" {
		o.ImportURL = o.QueryURL
	}
	if o.Label == "" {
		o.Label = "model"
	}
	if o.Latency == "" {
		o.Latency = fmt.Sprintf(`histogram_quantile(0.99, sum(rate(inferwatch_request_duration_seconds_bucket[1m])) by (le, %s))`, o.Label)
	}
	if o.Load == "" {
		o.Load = fmt.Sprintf(`sum(rate(inferwatch_request_duration_seconds_count[1m])) by (%s)`, o.Label)
	}
	if o.Lookback == 0 {
		o.Lookback = 14 * 24 * time.Hour
	}
	if o.Step == 0 {
		o.Step = time.Minute
	}
	if o.Horizon == 0 {
		o.Horizon = time.Hour
	}
	if o.Band == 0 {
		o.Band = 3
	}
	if o.Client == nil {
		o.Client = &http.Client{Timeout: 30 * time.Second}
	}
	return o
}

// Validate names the first wrong field.
func (o Options) Validate() error {
	o = o.withDefaults()
	var errs []error
	for _, u := range []struct{ name, v string }{{"query_url", o.QueryURL}, {"import_url", o.ImportURL}} {
		p, err := url.Parse(u.v)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			errs = append(errs, fmt.Errorf("%s %q: want an http(s) URL", u.name, u.v))
		}
	}
	if o.Step < time.Second {
		errs = append(errs, fmt.Errorf("step %v: must be at least 1s", o.Step))
	}
	if o.Lookback < 10*o.Step {
		errs = append(errs, fmt.Errorf("lookback %v: must cover at least ten steps", o.Lookback))
	}
	if o.Horizon < o.Step {
		errs = append(errs, fmt.Errorf("horizon %v: must be at least one step", o.Horizon))
	}
	if o.Band <= 0 {
		errs = append(errs, fmt.Errorf("band %g: must be positive", o.Band))
	}
	return errors.Join(errs...)
}

// Result is one model's fit.
type Result struct {
	Model  string
	Kind   string // baseline.KindTrailing, KindDaily, KindSeasonal
	Points int
	Err    error // the fit failed (too little history); nothing written
}

// Run reads, fits and writes once, at now. It returns one Result per model
// found; an error only when the query or the write failed.
func Run(ctx context.Context, o Options, now time.Time) ([]Result, error) {
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	o = o.withDefaults()
	start := now.Add(-o.Lookback)
	lat, err := queryRange(ctx, o, o.Latency, start, now)
	if err != nil {
		return nil, fmt.Errorf("fleet: latency: %w", err)
	}
	var load map[string][]baseline.Point
	if o.Load != "-" {
		if load, err = queryRange(ctx, o, o.Load, start, now); err != nil {
			return nil, fmt.Errorf("fleet: load: %w", err)
		}
	}
	models := make([]string, 0, len(lat))
	for m := range lat {
		models = append(models, m)
	}
	sort.Strings(models)
	var body bytes.Buffer
	var results []Result
	for _, name := range models {
		pts := lat[name]
		if lp, ok := load[name]; ok {
			baseline.JoinLoad(pts, lp)
		}
		res := Result{Model: name, Points: len(pts)}
		m, err := baseline.Fit(pts, o.Fit)
		if err != nil {
			res.Err = err
			results = append(results, res)
			continue
		}
		res.Kind = m.Kind
		// Load ahead is unknown: take the load of the same time a day
		// earlier (the daily cycle), else the last known.
		for t := now.Truncate(o.Step).Add(o.Step); !t.After(now.Add(o.Horizon)); t = t.Add(o.Step) {
			q := loadAt(pts, t.Add(-24*time.Hour))
			mu, sc := m.Predict(t, q)
			ms := t.UnixMilli()
			for _, b := range []struct {
				bound string
				v     float64
			}{{"expected", math.Exp(mu)}, {"lower", math.Exp(mu - o.Band*sc)}, {"upper", math.Exp(mu + o.Band*sc)}} {
				fmt.Fprintf(&body, "%s{%s=%q,bound=%q,kind=%q} %s %d\n", Metric, o.Label, name, b.bound, m.Kind,
					strconv.FormatFloat(b.v, 'g', 8, 64), ms)
			}
		}
		results = append(results, res)
	}
	if body.Len() > 0 {
		if err := post(ctx, o, strings.TrimSuffix(o.ImportURL, "/")+"/api/v1/import/prometheus", &body); err != nil {
			return results, fmt.Errorf("fleet: import: %w", err)
		}
	}
	return results, nil
}

// loadAt is the load of the point nearest t (NaN without load).
func loadAt(pts []baseline.Point, t time.Time) float64 {
	i := sort.Search(len(pts), func(i int) bool { return !pts[i].T.Before(t) })
	switch {
	case len(pts) == 0:
		return math.NaN()
	case i == len(pts):
		return pts[len(pts)-1].Q
	}
	return pts[i].Q
}

// queryRange runs a range query and returns its series by the model label.
func queryRange(ctx context.Context, o Options, q string, start, end time.Time) (map[string][]baseline.Point, error) {
	v := url.Values{}
	v.Set("query", q)
	v.Set("start", strconv.FormatInt(start.Unix(), 10))
	v.Set("end", strconv.FormatInt(end.Unix(), 10))
	v.Set("step", strconv.FormatFloat(o.Step.Seconds(), 'f', -1, 64))
	u := strings.TrimSuffix(o.QueryURL, "/") + "/api/v1/query_range?" + v.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := o.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s: %s", u, resp.Status, bytes.TrimSpace(b[:min(len(b), 512)]))
	}
	return parseMatrix(b, o.Label)
}

// parseMatrix reads a query_range answer: series keyed by the label's value.
func parseMatrix(b []byte, label string) (map[string][]baseline.Point, error) {
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Values [][2]any          `json:"values"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("query: %s %s", r.Status, r.Error)
	}
	if r.Data.ResultType != "matrix" {
		return nil, fmt.Errorf("result type %q, want matrix", r.Data.ResultType)
	}
	out := map[string][]baseline.Point{}
	for _, s := range r.Data.Result {
		name := s.Metric[label]
		if name == "" {
			continue
		}
		pts := make([]baseline.Point, 0, len(s.Values))
		for _, v := range s.Values {
			ts, ok := v[0].(float64)
			str, ok2 := v[1].(string)
			if !ok || !ok2 {
				return nil, fmt.Errorf("series %s: bad sample %v", name, v)
			}
			f, err := strconv.ParseFloat(str, 64)
			if err != nil {
				return nil, fmt.Errorf("series %s: value %q: %w", name, str, err)
			}
			sec, frac := math.Modf(ts)
			pts = append(pts, baseline.Point{T: time.Unix(int64(sec), int64(frac*1e9)).UTC(), V: f, Q: math.NaN()})
		}
		out[name] = pts
	}
	return out, nil
}

func post(ctx context.Context, o Options, u string, body io.Reader) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "text/plain")
	resp, err := o.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s: %s: %s", u, resp.Status, bytes.TrimSpace(b))
	}
	return nil
}
