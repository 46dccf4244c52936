// Package fleet fits baselines for a whole fleet: it reads each model's
// latency history (and load) from a Prometheus-compatible query API
// (VictoriaMetrics, Prometheus), fits a baseline.Model per fleet — a model
// in one namespace, by default — and writes the bands for the coming
// horizon back into VictoriaMetrics (/api/v1/import/prometheus) as
//
//	inferwatch_latency_baseline_seconds{namespace="...",model="...",bound="expected|lower|upper",kind="..."}
//
// so that rules (deploy/rules) can compare every replica's P99 with its
// fleet's shared band. The `inferwatch baseline` command runs it on a
// schedule.
package fleet

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/inferwatch/inferwatch/baseline"
	"github.com/inferwatch/inferwatch/metricset"
)

// Metric is the name the bands are written under.
const Metric = "inferwatch_latency_baseline_seconds"

// NoGroup, as Options.Group, fits one fleet per model.
var NoGroup = []string{}

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
	Load  string
	Label string // the label naming the model: "model"
	// Group are the labels that split a model's calls into fleets of their
	// own, each fitted apart and written with its values: ["namespace"]
	// (the rules judge each namespace apart). An empty value is a group
	// of its own (series that lack the label). Default ["namespace"];
	// NoGroup for one fleet per model.
	Group    []string
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
	if o.Group == nil {
		o.Group = []string{"namespace"}
	}
	by := strings.Join(append(slices.Clone(o.Group), o.Label), ", ")
	if o.Latency == "" {
		o.Latency = fmt.Sprintf(`histogram_quantile(0.99, sum(rate(inferwatch_request_duration_seconds_bucket[1m])) by (le, %s))`, by)
	}
	if o.Load == "" {
		o.Load = fmt.Sprintf(`sum(rate(inferwatch_request_duration_seconds_count[1m])) by (%s)`, by)
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
	if !usableLabel(o.Label) {
		errs = append(errs, fmt.Errorf("label %q: want a label name other than bound, kind, le", o.Label))
	}
	for i, g := range o.Group {
		switch {
		case !usableLabel(g):
			errs = append(errs, fmt.Errorf("group[%d] %q: want a label name other than bound, kind, le", i, g))
		case g == o.Label:
			errs = append(errs, fmt.Errorf("group[%d] %q: is the model label", i, g))
		}
	}
	return errors.Join(errs...)
}

// labelName is a Prometheus label name.
var labelName = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// usableLabel says whether l can name a fleet: a label name that is not
// one the bands or the histograms use for themselves.
func usableLabel(l string) bool {
	return labelName.MatchString(l) && !strings.HasPrefix(l, "__") && l != "bound" && l != "kind" && l != "le"
}

// Result is one fleet's fit.
type Result struct {
	Model  string
	Group  string // the fleet's group labels, `namespace="team-a"`; "" for none
	Kind   string // baseline.KindTrailing, KindDaily, KindSeasonal
	Points int
	Err    error // the fit failed (too little history); nothing written
}

// Run reads, fits and writes once, at now. It returns one Result per fleet
// (model and group) found; an error only when the query or the write
// failed.
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
	var load map[fleetKey][]baseline.Point
	if o.Load != "-" {
		if load, err = queryRange(ctx, o, o.Load, start, now); err != nil {
			return nil, fmt.Errorf("fleet: load: %w", err)
		}
	}
	fleets := make([]fleetKey, 0, len(lat))
	for k := range lat {
		fleets = append(fleets, k)
	}
	slices.SortFunc(fleets, func(a, b fleetKey) int {
		return cmp.Or(cmp.Compare(a.model, b.model), cmp.Compare(a.group, b.group))
	})
	var body bytes.Buffer
	var results []Result
	for _, k := range fleets {
		pts := lat[k]
		if lp, ok := load[k]; ok {
			baseline.JoinLoad(pts, lp)
		}
		res := Result{Model: k.model, Group: strings.TrimSuffix(k.group, ","), Points: len(pts)}
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
				fmt.Fprintf(&body, "%s{%s%s=%s,bound=%q,kind=%q} %s %d\n", Metric, k.group, o.Label, quoteLabel(k.model), b.bound, m.Kind,
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

// fleetKey names one fleet: a model, and the values of the group labels
// (rendered as the label pairs the bands carry, empty values left out).
type fleetKey struct {
	model string
	group string // `namespace="team-a",` or ""
}

func keyOf(metric map[string]string, label string, group []string) fleetKey {
	k := fleetKey{model: metric[label]}
	var b strings.Builder
	for _, g := range group {
		if v := metric[g]; v != "" {
			fmt.Fprintf(&b, "%s=%s,", g, quoteLabel(v))
		}
	}
	k.group = b.String()
	return k
}

func quoteLabel(v string) string { return `"` + metricset.EscapeLabelValue(v) + `"` }

// maxPoints is the most steps one range query spans. Query APIs cap the
// points per series of one answer — Prometheus at 11 000 ("exceeded
// maximum resolution"), VictoriaMetrics at -search.maxPointsPerTimeseries
// (30 000) — and the default lookback, 14 days at 1m, is 20 160 points.
const maxPoints = 10_000

// queryRange runs a range query, in pieces of maxPoints steps, and returns
// its series by fleet.
func queryRange(ctx context.Context, o Options, q string, start, end time.Time) (map[fleetKey][]baseline.Point, error) {
	out := map[fleetKey][]baseline.Point{}
	piece := time.Duration(maxPoints-1) * o.Step
	for from := start; !from.After(end); from = from.Add(piece + o.Step) {
		to := from.Add(piece)
		if to.After(end) {
			to = end
		}
		part, err := queryRangeOnce(ctx, o, q, from, to)
		if err != nil {
			return nil, err
		}
		for k, pts := range part {
			have := out[k]
			// A server that aligns a piece's ends to the step may answer
			// the point between two pieces in both: keep it once.
			if n := len(have); n > 0 {
				pts = pts[sort.Search(len(pts), func(i int) bool { return pts[i].T.After(have[n-1].T) }):]
			}
			out[k] = append(have, pts...)
		}
	}
	return out, nil
}

// queryRangeOnce runs one range query and returns its series by fleet.
func queryRangeOnce(ctx context.Context, o Options, q string, start, end time.Time) (map[fleetKey][]baseline.Point, error) {
	v := url.Values{}
	v.Set("query", q)
	// Milliseconds: a piece's ends fall between whole seconds when the
	// step does.
	v.Set("start", strconv.FormatFloat(float64(start.UnixMilli())/1e3, 'f', -1, 64))
	v.Set("end", strconv.FormatFloat(float64(end.UnixMilli())/1e3, 'f', -1, 64))
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
	return parseMatrix(b, o.Label, o.Group)
}

// parseMatrix reads a query_range answer: series keyed by the model label's
// value and the group labels' values.
func parseMatrix(b []byte, label string, group []string) (map[fleetKey][]baseline.Point, error) {
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
	out := map[fleetKey][]baseline.Point{}
	for _, s := range r.Data.Result {
		k := keyOf(s.Metric, label, group)
		name := k.group + k.model
		if k.model == "" {
			continue
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("series %s: two series for one fleet; the query must aggregate by %s and the group labels", name, label)
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
		out[k] = pts
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

// Name is the fleet as the bands name it: resnet{namespace="team-a"}.
func (r Result) Name() string {
	if r.Group == "" {
		return r.Model
	}
	return r.Model + "{" + r.Group + "}"
}
