package tracing

import (
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/inferwatch/inferwatch/record"
)

// Trace is one kept trace as the admin API serves it and Render draws it.
type Trace struct {
	TraceID     string    `json:"trace_id"`
	Route       string    `json:"route,omitempty"`
	Model       string    `json:"model,omitempty"`
	Start       time.Time `json:"start"`
	DurationNS  int64     `json:"duration_ns"`
	Status      string    `json:"status"` // "OK" or "ERROR"
	Code        string    `json:"code,omitempty"`
	Sampling    string    `json:"sampling"`              // "head" or "tail"
	Probability float64   `json:"probability,omitempty"` // of the head decision, when known
	TailReason  string    `json:"tail_reason,omitempty"`
	Spans       []Span    `json:"spans"` // the call span first
}

// Span is one span of a Trace.
type Span struct {
	SpanID       string         `json:"span_id"`
	ParentSpanID string         `json:"parent_span_id,omitempty"`
	Name         string         `json:"name"`
	Kind         string         `json:"kind"` // "server", "client" or "internal"
	Start        time.Time      `json:"start"`
	DurationNS   int64          `json:"duration_ns"`
	Error        string         `json:"error,omitempty"`
	Attributes   map[string]any `json:"attributes,omitempty"`
	Events       []SpanEvent    `json:"events,omitempty"`
}

// SpanEvent is a moment in a span: a stream's first token, say.
type SpanEvent struct {
	Name       string         `json:"name"`
	Time       time.Time      `json:"time"`
	Attributes map[string]any `json:"attributes,omitempty"`
}

// kept is what the store holds per trace; it becomes a Trace when read.
type kept struct {
	cs          *callSpans
	route       string
	model       string
	code        string
	failed      bool
	total       time.Duration
	probability float64
	tail        string
}

// store is a ring of the last kept traces.
type store struct {
	mu   sync.Mutex
	ring []kept
	next int
	n    int
}

func newStore(size int) *store {
	if size <= 0 {
		return nil
	}
	return &store{ring: make([]kept, size)}
}

func (s *store) add(c *record.Call, tail string, cs *callSpans) {
	k := kept{cs: cs, route: c.TraceRoute, model: c.Model, code: c.Code, failed: c.Failed(),
		total: c.Total(), probability: c.TraceProbability, tail: tail}
	s.mu.Lock()
	s.ring[s.next] = k
	s.next = (s.next + 1) % len(s.ring)
	s.n = min(s.n+1, len(s.ring))
	s.mu.Unlock()
}

// last returns up to limit kept traces, newest first, that match model
// (empty: any); limit <= 0 means all.
func (s *store) last(limit int, model string) []kept {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []kept
	for i := 0; i < s.n && (limit <= 0 || len(out) < limit); i++ {
		k := s.ring[(s.next-1-i+len(s.ring))%len(s.ring)]
		if model == "" || k.model == model {
			out = append(out, k)
		}
	}
	return out
}

func (k kept) trace() Trace {
	cs := k.cs
	t := Trace{
		TraceID: hex.EncodeToString(cs.traceID[:]), Route: k.route, Model: k.model,
		DurationNS: int64(k.total), Status: "OK", Code: k.code, Sampling: "head",
		Probability: k.probability, TailReason: k.tail,
	}
	if k.failed {
		t.Status = "ERROR"
	}
	if k.tail != "" {
		t.Sampling, t.Probability = "tail", 0
	}
	t.Spans = make([]Span, len(cs.spans))
	for i := range cs.spans {
		s := &cs.spans[i]
		sp := Span{SpanID: hex.EncodeToString(s.id[:]), Name: s.name, Kind: kindName(s.kind),
			Start: s.start, DurationNS: int64(s.end.Sub(s.start))}
		if s.parent != ([8]byte{}) {
			sp.ParentSpanID = hex.EncodeToString(s.parent[:])
		}
		if s.status == codes.Error {
			sp.Error = s.desc
			if sp.Error == "" {
				sp.Error = "error"
			}
		}
		if len(s.attrs) > 0 {
			sp.Attributes = make(map[string]any, len(s.attrs))
			for _, a := range s.attrs {
				sp.Attributes[string(a.Key)] = attrValue(a.Value)
			}
		}
		for _, e := range s.events {
			se := SpanEvent{Name: e.Name, Time: e.Time}
			if len(e.Attributes) > 0 {
				se.Attributes = make(map[string]any, len(e.Attributes))
				for _, a := range e.Attributes {
					se.Attributes[string(a.Key)] = attrValue(a.Value)
				}
			}
			sp.Events = append(sp.Events, se)
		}
		t.Spans[i] = sp
	}
	if len(cs.spans) > 0 {
		t.Start = cs.spans[0].start
	}
	return t
}

func attrValue(v attribute.Value) any {
	switch v.Type() {
	case attribute.BOOL:
		return v.AsBool()
	case attribute.INT64:
		return v.AsInt64()
	case attribute.FLOAT64:
		return v.AsFloat64()
	case attribute.STRINGSLICE:
		return v.AsStringSlice()
	}
	return v.String()
}

func kindName(k trace.SpanKind) string {
	switch k {
	case trace.SpanKindServer:
		return "server"
	case trace.SpanKindClient:
		return "client"
	}
	return "internal"
}

// Traces returns up to limit of the last kept traces, newest first, of one
// model (empty: any); limit <= 0 returns all that are held.
func (t *Tracer) Traces(limit int, model string) []Trace {
	ks := t.store.last(limit, model)
	out := make([]Trace, len(ks))
	for i, k := range ks {
		out[i] = k.trace()
	}
	return out
}

// TracesResponse is the body of GET /api/v1/traces.
type TracesResponse struct {
	Traces []Trace `json:"traces"`
}

// HandleTraces serves the last kept traces as JSON (GET /api/v1/traces),
// newest first. Query: limit (default: all held), model.
func (t *Tracer) HandleTraces(w http.ResponseWriter, r *http.Request) {
	limit, ok := queryLimit(w, r, 0)
	if !ok {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(TracesResponse{Traces: t.Traces(limit, r.URL.Query().Get("model"))})
}

// HandlePage serves the last kept traces as text trees (GET /traces).
// Query: limit (default 20), model.
func (t *Tracer) HandlePage(w http.ResponseWriter, r *http.Request) {
	limit, ok := queryLimit(w, r, 20)
	if !ok {
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	traces := t.Traces(limit, r.URL.Query().Get("model"))
	if len(traces) == 0 {
		w.Write([]byte("no traces kept yet\n"))
		return
	}
	Render(w, traces)
}

func queryLimit(w http.ResponseWriter, r *http.Request, def int) (int, bool) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return def, true
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		http.Error(w, "limit: want a non-negative integer, got "+strconv.Quote(v), http.StatusBadRequest)
		return 0, false
	}
	return n, true
}
