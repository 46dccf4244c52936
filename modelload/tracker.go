package modelload

import (
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/inferwatch/inferwatch/inferapi"
	"github.com/inferwatch/inferwatch/metricset"
	"github.com/inferwatch/inferwatch/record"
)

// Load kinds, the kind label of inferwatch_model_load_seconds.
const (
	KindInitial = "initial" // the model was not known to be loaded: first load, or a load after an unload or a not-ready answer
	KindReload  = "reload"  // the model was loaded (a load, a ready answer or a served inference said so)
)

var help = map[string]string{
	"inferwatch_model_load_seconds":                  "Duration of successful model loads through the upstream's repository API (Triton RepositoryModelLoad, POST /v2/repository/models/{m}/load), as the sidecar timed the call; kind=initial|reload.",
	"inferwatch_model_unload_seconds":                "Duration of successful model unloads through the upstream's repository API.",
	"inferwatch_model_load_failures_total":           "Repository load or unload calls (op=load|unload) the upstream failed.",
	"inferwatch_model_cold_request_duration_seconds": "Total duration of the first successful inference after each model (re)load: the cold call.",
	"inferwatch_model_ready":                         "1 when the model's last observed state is ready (a ready answer or a load), 0 when not ready (a not-ready answer or an unload).",
	"inferwatch_model_ready_transitions_total":       "Changes of a model's observed readiness (to=ready|not_ready).",
}

// MetricHelp returns the # HELP text of every family this package
// registers, for metricset.Set.AddHelp.
func MetricHelp() map[string]string { return maps.Clone(help) }

// inferMethods are the methods that run the model: the calls a cold call is
// one of.
var inferMethods = map[string]bool{
	inferapi.MethodInfer: true, inferapi.MethodStreamInfer: true, inferapi.MethodPredict: true,
	inferapi.MethodExplain: true, inferapi.MethodClassify: true, inferapi.MethodRegress: true,
	inferapi.MethodCompletions: true, inferapi.MethodChatCompletions: true, inferapi.MethodEmbeddings: true,
	inferapi.MethodResponses: true, inferapi.MethodGenerate: true, inferapi.MethodGenerateStream: true,
	inferapi.MethodMultiInference: true, inferapi.MethodStreamPredict: true,
}

// readiness is what the tracker last learned of a model's state.
type readiness uint8

const (
	stateUnknown readiness = iota
	stateReady
	stateNotReady
)

// model is the tracker's state of one model (its model label).
type model struct {
	state readiness
	// stateAt is the start of the call that changed the state last, and
	// prevState the state before it: a load's record can arrive after the
	// record of a call that already saw its effect.
	stateAt   time.Time
	prevState readiness
	// notReadyEnd is when the call that last showed the model not ready
	// (an unload, a not-ready answer) ended.
	notReadyEnd time.Time
	// controlEnd is when the last load, unload or readiness call ended: a
	// poll that began before it may tell an older state.
	controlEnd time.Time
	// coldSince is the end of the last load (or the observation of the
	// not-ready → ready transition) whose cold call is still to come; zero
	// when none is awaited.
	coldSince time.Time
	// early holds the first successful inferences seen since the last load
	// or unload record while no cold call was awaited: the pipeline orders
	// records by completion, so the cold call can arrive just before the
	// load that it follows.
	early []inferenceSeen
	ready *metrics.Gauge
}

// earlyMax bounds model.early.
const earlyMax = 4

// inferenceSeen is what the tracker keeps of an inference call (a sink must
// not keep the record itself).
type inferenceSeen struct {
	start   time.Time
	total   time.Duration
	version string // label
}

// Tracker is the record.Sink. Its state is bounded by the model label cap
// of the metric set it shares labels with.
type Tracker struct {
	set     *metricset.Set
	ms      *metrics.Set
	buckets []float64

	mu     sync.Mutex
	models map[string]*model // by model label
	known  map[string]string // raw model name → label, for the Poller; at most maxKnown
}

// maxKnown bounds Tracker.known: raw names that sanitise alike share a
// label, so there may be more names than labels, but not without end.
const maxKnown = 4096

var _ record.Sink = (*Tracker)(nil)

// New returns a Tracker registering its series on set's metrics.
func New(set *metricset.Set) *Tracker {
	return &Tracker{set: set, ms: set.Metrics(), buckets: metricset.DurationBuckets(), models: map[string]*model{}, known: map[string]string{}}
}

// Observe follows one finished call.
func (t *Tracker) Observe(c *record.Call) {
	switch {
	case c.Model == "":
		return
	case inferMethods[c.Method]:
	case c.API == record.APIKServeV2 && (c.Method == inferapi.MethodRepositoryLoad ||
		c.Method == inferapi.MethodRepositoryUnload || c.Method == inferapi.MethodModelReady):
	case c.Method == inferapi.MethodModelReady && (c.Protocol == record.ProtocolGRPC ||
		c.API == record.APITFServing || c.API == record.APIKServeV1):
		// Another API's readiness, read from its answer's body (TF
		// Serving's GetModelStatus and REST model status, KServe v1's
		// "ready"): TF Serving answers 200 while a version still loads.
	default:
		return
	}
	name, version := t.set.ModelLabels(c.Model, c.Version)
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.model(name)
	if _, ok := t.known[c.Model]; !ok && len(t.known) < maxKnown {
		t.known[strings.Clone(c.Model)] = name
	}
	if !inferMethods[c.Method] { // a load, an unload or a readiness call
		if end := c.Start.Add(c.End); end.After(m.controlEnd) {
			m.controlEnd = end
		}
	}
	switch {
	case c.Method == inferapi.MethodRepositoryLoad:
		t.load(m, c, name, version)
	case c.Method == inferapi.MethodRepositoryUnload:
		t.unload(m, c, name, version)
	case c.Method == inferapi.MethodModelReady:
		t.readyAnswer(m, c, name)
	default:
		t.inference(m, c, name, version)
	}
}

func (t *Tracker) model(name string) *model {
	m := t.models[name]
	if m == nil {
		m = &model{}
		t.models[name] = m
		m.ready = t.ms.GetOrCreateGauge(fmt.Sprintf(`inferwatch_model_ready{model=%q}`, name), func() float64 {
			t.mu.Lock()
			defer t.mu.Unlock()
			if m.state == stateReady {
				return 1
			}
			return 0
		})
	}
	return m
}

// succeeded reports whether a control call (load, unload) succeeded.
func succeeded(c *record.Call) bool {
	return c.End > 0 && c.ErrorKind == record.ErrNone && (c.Code == "OK" || c.Code == "200")
}

func (t *Tracker) load(m *model, c *record.Call, name, version string) {
	if !succeeded(c) {
		t.ms.GetOrCreateCounter(fmt.Sprintf(`inferwatch_model_load_failures_total{model=%q,op="load"}`, name)).Inc()
		return
	}
	prior, armed := m.state, false
	if m.state != stateUnknown && !m.stateAt.Before(c.Start) {
		// The state changed in a call that began after this load did: what
		// the load found is the state before that one, and a ready answer
		// after a not-ready one already awaits the cold call.
		prior = m.prevState
		armed = m.state == stateReady && m.prevState == stateNotReady
	}
	kind := KindInitial
	if prior == stateReady {
		kind = KindReload
	}
	t.ms.GetOrCreatePrometheusHistogramExt(fmt.Sprintf(`inferwatch_model_load_seconds{model=%q,version=%q,kind=%q}`, name, version, kind), t.buckets).
		Update(c.Total().Seconds())
	t.setState(m, name, stateReady, c.Start)
	if !armed {
		t.awaitCold(m, name, c.Start.Add(c.End))
	}
}

func (t *Tracker) unload(m *model, c *record.Call, name, version string) {
	if !succeeded(c) {
		t.ms.GetOrCreateCounter(fmt.Sprintf(`inferwatch_model_load_failures_total{model=%q,op="unload"}`, name)).Inc()
		return
	}
	t.ms.GetOrCreatePrometheusHistogramExt(fmt.Sprintf(`inferwatch_model_unload_seconds{model=%q,version=%q}`, name, version), t.buckets).
		Update(c.Total().Seconds())
	t.setState(m, name, stateNotReady, c.Start)
	m.notReadyEnd = c.Start.Add(c.End)
	m.coldSince, m.early = time.Time{}, m.early[:0]
}

// readyAnswer reads a readiness call's answer: gRPC's from the response
// body; KServe v2 REST's from the status (200 ready, 4xx not; KServe v2
// says so); KServe v1's and TF Serving's REST from the body, or a 4xx
// (an unknown model) as not ready.
func (t *Tracker) readyAnswer(m *model, c *record.Call, name string) {
	var s readiness
	switch {
	case c.Protocol == record.ProtocolGRPC:
		switch {
		case c.Code != "OK":
			// Triton answers NOT_FOUND for a model it does not know.
			if c.Code == "NOT_FOUND" || c.Code == "UNAVAILABLE" && c.ErrorKind == record.ErrNone {
				s = stateNotReady
			}
		case c.Ready == record.ReadyYes:
			s = stateReady
		case c.Ready == record.ReadyNo:
			s = stateNotReady
		}
	case c.API == record.APIKServeV2:
		switch {
		case c.Code == "200":
			s = stateReady
		case len(c.Code) == 3 && c.Code[0] == '4':
			s = stateNotReady
		}
	default:
		switch {
		case c.Code == "200" && c.Ready == record.ReadyYes:
			s = stateReady
		case c.Code == "200" && c.Ready == record.ReadyNo,
			len(c.Code) == 3 && c.Code[0] == '4':
			s = stateNotReady
		}
	}
	if s == stateUnknown {
		return
	}
	if s == stateReady && m.state == stateNotReady {
		// Loaded without a load call we saw (Triton's poll mode, a load on
		// another port): its first inference is cold too.
		t.awaitCold(m, name, c.Start.Add(c.End))
	}
	t.setState(m, name, s, c.Start)
	if s == stateNotReady {
		m.notReadyEnd = c.Start.Add(c.End)
	}
}

// observeIndex takes a poll of the upstream's repository index that began
// at start and ended at end: which models are ready. Models no call has
// named are passed over.
// follows says a call has named the raw model name: only such models'
// index entries are kept (observeIndex would skip the others anyway).
func (t *Tracker) follows(raw string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.known[raw]
	return ok
}

func (t *Tracker) observeIndex(ready map[string]bool, start, end time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for raw, r := range ready {
		name, ok := t.known[raw]
		if !ok {
			continue
		}
		m := t.models[name]
		if start.Before(m.controlEnd) {
			continue // a call said more recently
		}
		if !r {
			if m.state != stateNotReady {
				t.setState(m, name, stateNotReady, start)
				m.notReadyEnd = end
				m.coldSince, m.early = time.Time{}, m.early[:0]
			}
			continue
		}
		if m.state == stateNotReady {
			t.awaitCold(m, name, end)
		}
		t.setState(m, name, stateReady, start)
	}
}

func (t *Tracker) inference(m *model, c *record.Call, name, version string) {
	if c.End <= 0 || c.Failed() {
		return
	}
	seen := inferenceSeen{start: c.Start, total: c.Total(), version: version}
	switch {
	case m.state == stateUnknown:
		t.setState(m, name, stateReady, c.Start) // it served: it is loaded
	case m.state == stateNotReady && !c.Start.Before(m.notReadyEnd):
		// Served after the model was seen unloaded or not ready: something
		// the sidecar did not see loaded it (Triton's poll mode, a load on
		// another port), and this is its first call.
		t.setState(m, name, stateReady, c.Start)
		t.observeCold(name, seen)
		m.coldSince, m.early = time.Time{}, m.early[:0]
		return
	}
	if m.coldSince.IsZero() {
		if len(m.early) < earlyMax {
			m.early = append(m.early, seen)
		}
		return
	}
	if c.Start.Before(m.coldSince) {
		return // it overlapped the load: served by what was loaded before
	}
	t.observeCold(name, seen)
	m.coldSince = time.Time{}
}

// awaitCold starts waiting for the cold call after a load that ended at
// end, unless it already arrived.
func (t *Tracker) awaitCold(m *model, name string, end time.Time) {
	for _, e := range m.early {
		if !e.start.Before(end) {
			t.observeCold(name, e)
			m.coldSince, m.early = time.Time{}, m.early[:0]
			return
		}
	}
	m.coldSince, m.early = end, m.early[:0]
}

func (t *Tracker) observeCold(name string, s inferenceSeen) {
	t.ms.GetOrCreatePrometheusHistogramExt(fmt.Sprintf(`inferwatch_model_cold_request_duration_seconds{model=%q,version=%q}`, name, s.version), t.buckets).
		Update(s.total.Seconds())
}

// setState records the state a call that started at "at" saw.
func (t *Tracker) setState(m *model, name string, s readiness, at time.Time) {
	if m.state == s {
		return
	}
	if m.state != stateUnknown {
		to := "ready"
		if s == stateNotReady {
			to = "not_ready"
		}
		t.ms.GetOrCreateCounter(fmt.Sprintf(`inferwatch_model_ready_transitions_total{model=%q,to=%q}`, name, to)).Inc()
	}
	m.prevState, m.state, m.stateAt = m.state, s, at
}
