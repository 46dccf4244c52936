package tracing

import (
	"encoding/hex"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/record"
	"github.com/inferwatch/inferwatch/sampling"
)

// fakeSampler samples by a fixed head answer (or honours the parent) and
// records what it was asked.
type fakeSampler struct {
	head      bool   // decision without a parent
	headState string // tracestate it returns without a parent
	prob      float64
	tail      map[string]string // model -> reason to keep by tail

	gotKey    sampling.Key
	gotParent sampling.Parent
	observed  []time.Duration
}

func (f *fakeSampler) Head(k sampling.Key, _ [16]byte, p sampling.Parent) sampling.Decision {
	f.gotKey, f.gotParent = k, p
	if p.Present {
		ts := p.TraceState
		if ts == "" {
			ts = f.headState
		}
		return sampling.Decision{Sampled: p.Sampled, TraceState: ts}
	}
	return sampling.Decision{Sampled: f.head, Probability: f.prob, TraceState: f.headState}
}

func (f *fakeSampler) Tail(_ sampling.Key, model string, _ time.Duration, failed, head bool) (bool, string) {
	if head {
		return true, ""
	}
	if r, ok := f.tail[model]; ok {
		return true, r
	}
	if failed {
		return true, "error"
	}
	return false, ""
}

func (f *fakeSampler) ObserveLatency(_ string, d time.Duration) { f.observed = append(f.observed, d) }

func mustHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestStartPropagation(t *testing.T) {
	const (
		tid    = "4bf92f3577b34da6a3ce929d0e0e4736"
		sid    = "00f067aa0ba902b7"
		b3tid  = "80f198ee56343ba864fe8b2a57d3eff7"
		b3sid  = "e457b5a2e4d86bd1"
		b3pid  = "05e3ac9a4f6e3b90"
		b3tid8 = "64fe8b2a57d3eff7"
	)
	type want struct {
		traceID    string // "" = a new one
		parentSpan string // "" = none (zero)
		parent     sampling.Parent
		flags      string // of the outgoing traceparent
		state      string // outgoing tracestate ("" = absent)
		sampled    bool
		b3         string // outgoing b3, with T = trace id as sent, U = upstream span, S = sidecar span
		b3multi    bool   // outgoing X-B3-* expected
	}
	cases := []struct {
		name string
		hdr  http.Header
		samp fakeSampler
		want want
	}{
		{"no context: the sidecar starts the trace", http.Header{},
			fakeSampler{head: true, prob: 0.1, headState: "ot=th:e666666666666"},
			want{flags: "03", sampled: true, state: "ot=th:e666666666666"}},
		{"no context, not sampled", http.Header{},
			fakeSampler{head: false, prob: 0.1, headState: "ot=th:e666666666666"},
			want{flags: "02", state: "ot=th:e666666666666"}},
		{"W3C sampled parent", http.Header{"Traceparent": {"00-" + tid + "-" + sid + "-01"}, "Tracestate": {"congo=t61rcWkgMzE"}},
			fakeSampler{},
			want{traceID: tid, parentSpan: sid, parent: sampling.Parent{Present: true, Sampled: true, TraceState: "congo=t61rcWkgMzE"},
				flags: "01", sampled: true, state: "congo=t61rcWkgMzE"}},
		{"W3C unsampled parent", http.Header{"Traceparent": {"00-" + tid + "-" + sid + "-00"}},
			fakeSampler{head: true},
			want{traceID: tid, parentSpan: sid, parent: sampling.Parent{Present: true}, flags: "00"}},
		{"W3C random flag carried", http.Header{"Traceparent": {"00-" + tid + "-" + sid + "-03"}},
			fakeSampler{},
			want{traceID: tid, parentSpan: sid, parent: sampling.Parent{Present: true, Sampled: true}, flags: "03", sampled: true}},
		{"W3C tracestate over two lines", http.Header{"Traceparent": {"00-" + tid + "-" + sid + "-01"}, "Tracestate": {"a=1", "b=2"}},
			fakeSampler{},
			want{traceID: tid, parentSpan: sid, parent: sampling.Parent{Present: true, Sampled: true, TraceState: "a=1,b=2"},
				flags: "01", sampled: true, state: "a=1,b=2"}},
		{"W3C future version with more fields", http.Header{"Traceparent": {"cc-" + tid + "-" + sid + "-01-what-ever"}},
			fakeSampler{},
			want{traceID: tid, parentSpan: sid, parent: sampling.Parent{Present: true, Sampled: true}, flags: "01", sampled: true}},
		// W3C: of a later version's flags only the sampled bit is read; its
		// other bits may not mean "random" there.
		{"W3C future version: the sampled bit only", http.Header{"Traceparent": {"cc-" + tid + "-" + sid + "-03-what-ever"}},
			fakeSampler{},
			want{traceID: tid, parentSpan: sid, parent: sampling.Parent{Present: true, Sampled: true}, flags: "01", sampled: true}},
		{"malformed: upper-case hex", http.Header{"Traceparent": {"00-" + strings.ToUpper(tid) + "-" + sid + "-01"}, "Tracestate": {"x=y"}},
			fakeSampler{head: true, prob: 1},
			want{flags: "03", sampled: true}},
		{"malformed: version ff", http.Header{"Traceparent": {"ff-" + tid + "-" + sid + "-01"}},
			fakeSampler{head: true}, want{flags: "03", sampled: true}},
		{"malformed: zero trace id", http.Header{"Traceparent": {"00-" + strings.Repeat("0", 32) + "-" + sid + "-01"}},
			fakeSampler{head: true}, want{flags: "03", sampled: true}},
		{"malformed: zero span id", http.Header{"Traceparent": {"00-" + tid + "-" + strings.Repeat("0", 16) + "-01"}},
			fakeSampler{head: true}, want{flags: "03", sampled: true}},
		{"malformed: version 00 too long", http.Header{"Traceparent": {"00-" + tid + "-" + sid + "-01-x"}},
			fakeSampler{head: true}, want{flags: "03", sampled: true}},
		{"malformed: truncated", http.Header{"Traceparent": {"00-" + tid + "-" + sid}},
			fakeSampler{head: true}, want{flags: "03", sampled: true}},
		{"malformed: two traceparents", http.Header{"Traceparent": {"00-" + tid + "-" + sid + "-01", "00-" + tid + "-" + sid + "-01"}},
			fakeSampler{head: true}, want{flags: "03", sampled: true}},
		{"B3 single, sampled, with parent", http.Header{"B3": {b3tid + "-" + b3sid + "-1-" + b3pid}},
			fakeSampler{},
			want{traceID: b3tid, parentSpan: b3sid, parent: sampling.Parent{Present: true, Sampled: true}, flags: "01", sampled: true,
				b3: b3tid + "-U-1-S"}},
		{"B3 single, 64-bit trace id, debug", http.Header{"B3": {b3tid8 + "-" + b3sid + "-d"}},
			fakeSampler{},
			want{traceID: "0000000000000000" + b3tid8, parentSpan: b3sid, parent: sampling.Parent{Present: true, Sampled: true},
				flags: "01", sampled: true, b3: b3tid8 + "-U-1-S"}},
		{"B3 single, no sampling state: ours to decide", http.Header{"B3": {b3tid + "-" + b3sid}},
			fakeSampler{head: false, prob: 0.5},
			want{traceID: b3tid, parentSpan: b3sid, flags: "00", b3: b3tid + "-U-0-S"}},
		{"B3 bare deny", http.Header{"B3": {"0"}},
			fakeSampler{head: true},
			want{parent: sampling.Parent{Present: true}, flags: "02"}},
		{"B3 single malformed", http.Header{"B3": {b3tid + "-zz57b5a2e4d86bd1-1"}},
			fakeSampler{head: true}, want{flags: "03", sampled: true}},
		{"B3 multi, unsampled", http.Header{"X-B3-Traceid": {b3tid}, "X-B3-Spanid": {b3sid}, "X-B3-Parentspanid": {b3pid}, "X-B3-Sampled": {"0"}},
			fakeSampler{head: true},
			want{traceID: b3tid, parentSpan: b3sid, parent: sampling.Parent{Present: true}, flags: "00", b3multi: true}},
		{"B3 multi, debug flag", http.Header{"X-B3-Traceid": {b3tid}, "X-B3-Spanid": {b3sid}, "X-B3-Flags": {"1"}},
			fakeSampler{},
			want{traceID: b3tid, parentSpan: b3sid, parent: sampling.Parent{Present: true, Sampled: true}, flags: "01", sampled: true, b3multi: true}},
		{"B3 multi, bare deny", http.Header{"X-B3-Sampled": {"0"}},
			fakeSampler{head: true},
			want{parent: sampling.Parent{Present: true}, flags: "02"}},
		{"B3 multi, bare debug", http.Header{"X-B3-Flags": {"1"}},
			fakeSampler{head: false},
			want{parent: sampling.Parent{Present: true, Sampled: true}, flags: "03", sampled: true}},
		{"B3 multi without a span id is absent", http.Header{"X-B3-Traceid": {b3tid}, "X-B3-Sampled": {"1"}},
			fakeSampler{head: true}, want{flags: "03", sampled: true}},
		{"W3C wins over B3", http.Header{"Traceparent": {"00-" + tid + "-" + sid + "-01"}, "B3": {b3tid + "-" + b3sid + "-0"}},
			fakeSampler{},
			want{traceID: tid, parentSpan: sid, parent: sampling.Parent{Present: true, Sampled: true}, flags: "01", sampled: true,
				b3: tid + "-U-1-S"}},
		{"malformed W3C falls back to B3", http.Header{"Traceparent": {"garbage"}, "B3": {b3tid + "-" + b3sid + "-1"}},
			fakeSampler{},
			want{traceID: b3tid, parentSpan: b3sid, parent: sampling.Parent{Present: true, Sampled: true}, flags: "01", sampled: true,
				b3: b3tid + "-U-1-S"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.samp
			tr, err := newTracer(Config{Sampler: &s}, nil)
			if err != nil {
				t.Fatal(err)
			}
			c := &record.Call{Model: "mnist"}
			h := tc.hdr.Clone()
			tr.Start(c, "grpc-in", h)

			if s.gotKey != (sampling.Key{Route: "grpc-in", Model: "mnist"}) {
				t.Errorf("sampling key %+v", s.gotKey)
			}
			if s.gotParent != tc.want.parent {
				t.Errorf("sampler's parent %+v, want %+v", s.gotParent, tc.want.parent)
			}
			gotTID := hex.EncodeToString(c.TraceID[:])
			if c.TraceID == ([16]byte{}) {
				t.Fatal("no trace id")
			}
			if tc.want.traceID != "" && gotTID != tc.want.traceID {
				t.Errorf("trace id %s, want %s", gotTID, tc.want.traceID)
			}
			if tc.want.traceID == "" && (strings.Contains(tc.hdr.Get("Traceparent"), gotTID) || strings.Contains(tc.hdr.Get("B3"), gotTID)) {
				t.Errorf("trace id %s taken from a malformed header", gotTID)
			}
			if got := hex.EncodeToString(c.ParentSpanID[:]); tc.want.parentSpan != "" && got != tc.want.parentSpan {
				t.Errorf("parent span %s, want %s", got, tc.want.parentSpan)
			} else if tc.want.parentSpan == "" && c.ParentSpanID != ([8]byte{}) {
				t.Errorf("parent span %s, want none", got)
			}
			if c.SpanID == ([8]byte{}) || c.UpstreamSpanID == ([8]byte{}) || c.SpanID == c.UpstreamSpanID {
				t.Errorf("span ids %x %x", c.SpanID, c.UpstreamSpanID)
			}
			if c.TraceSampled != tc.want.sampled {
				t.Errorf("sampled %v, want %v", c.TraceSampled, tc.want.sampled)
			}
			if c.TraceRoute != "grpc-in" || c.TraceModel != "mnist" {
				t.Errorf("trace key %q %q", c.TraceRoute, c.TraceModel)
			}
			wantTP := "00-" + gotTID + "-" + hex.EncodeToString(c.UpstreamSpanID[:]) + "-" + tc.want.flags
			if got := h.Values("Traceparent"); len(got) != 1 || got[0] != wantTP {
				t.Errorf("outgoing traceparent %q, want %q", got, wantTP)
			}
			if got := h.Get("Tracestate"); got != tc.want.state || c.TraceState != tc.want.state {
				t.Errorf("outgoing tracestate %q (record %q), want %q", got, c.TraceState, tc.want.state)
			}
			if _, ok := h["Tracestate"]; ok && tc.want.state == "" {
				t.Error("empty tracestate header sent")
			}
			wantB3 := strings.NewReplacer("U", hex.EncodeToString(c.UpstreamSpanID[:]), "S", hex.EncodeToString(c.SpanID[:])).Replace(tc.want.b3)
			if got := h.Get("B3"); got != wantB3 {
				t.Errorf("outgoing b3 %q, want %q", got, wantB3)
			}
			if v := h.Get("X-B3-Sampled"); v != "" && (v == "1") != tc.want.sampled {
				t.Errorf("outgoing X-B3-Sampled %q disagrees with traceparent's sampled flag %v", v, tc.want.sampled)
			}
			if tc.want.b3multi {
				st := "0"
				if tc.want.sampled {
					st = "1"
				}
				if h.Get("X-B3-Traceid") != tc.want.traceID || h.Get("X-B3-Spanid") != hex.EncodeToString(c.UpstreamSpanID[:]) ||
					h.Get("X-B3-Parentspanid") != hex.EncodeToString(c.SpanID[:]) || h.Get("X-B3-Sampled") != st || h.Get("X-B3-Flags") != "" {
					t.Errorf("outgoing X-B3-*: %v", h)
				}
			}
		})
	}
}

func TestStartNewTraceIDsDiffer(t *testing.T) {
	tr, _ := newTracer(Config{}, nil)
	seen := map[[16]byte]bool{}
	for range 1000 {
		c := &record.Call{}
		tr.Start(c, "r", http.Header{})
		if seen[c.TraceID] {
			t.Fatalf("trace id %x twice", c.TraceID)
		}
		seen[c.TraceID] = true
	}
}

func TestTraceparentRoundTrip(t *testing.T) {
	var tid [16]byte
	var sid [8]byte
	copy(tid[:], mustHex(t, "4bf92f3577b34da6a3ce929d0e0e4736"))
	copy(sid[:], mustHex(t, "00f067aa0ba902b7"))
	s := formatTraceparent(tid, sid, 0x03)
	if s != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03" {
		t.Fatalf("format: %s", s)
	}
	gt, gs, gf, ok := parseTraceparent(s)
	if !ok || gt != tid || gs != sid || gf != 3 {
		t.Fatalf("parse: %x %x %x %v", gt, gs, gf, ok)
	}
}

func TestDropThreshold(t *testing.T) {
	for in, want := range map[string]string{
		"":                             "",
		"ot=th:8":                      "",
		"ot=th:8;rv:0123456789abcd":    "ot=rv:0123456789abcd",
		"congo=x,ot=th:c;rv:ab,rojo=1": "congo=x,ot=rv:ab,rojo=1",
		"rojo=th:1":                    "rojo=th:1",
	} {
		if got := dropThreshold(in); got != want {
			t.Errorf("dropThreshold(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzTraceParent checks that no traceparent or b3 header crashes the hook,
// that an accepted traceparent survives formatting, and that whatever the
// client sent, the upstream gets one well-formed traceparent.
func FuzzTraceParent(f *testing.F) {
	for _, s := range []string{
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03-extra",
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01",
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"80f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1-1-05e3ac9a4f6e3b90",
		"64fe8b2a57d3eff7-e457b5a2e4d86bd1-d",
		"0", "d", "-", "--", "",
	} {
		f.Add(s)
	}
	tr, _ := newTracer(Config{}, nil)
	f.Fuzz(func(t *testing.T, s string) {
		if tid, sid, flags, ok := parseTraceparent(s); ok {
			if tid == ([16]byte{}) || sid == ([8]byte{}) {
				t.Fatalf("accepted zero ids in %q", s)
			}
			again := formatTraceparent(tid, sid, flags)
			if len(s) == 55 && s[:2] == "00" && again != s {
				t.Fatalf("%q formats back as %q", s, again)
			}
			if t2, s2, f2, ok2 := parseTraceparent(again); !ok2 || t2 != tid || s2 != sid || f2 != flags {
				t.Fatalf("%q: reformatted %q does not parse back", s, again)
			}
		}
		parseB3(s)
		for _, h := range []http.Header{
			{"Traceparent": {s}, "Tracestate": {s}},
			{"B3": {s}},
			{"X-B3-Traceid": {s}, "X-B3-Spanid": {s}, "X-B3-Sampled": {s}},
		} {
			c := &record.Call{}
			tr.Start(c, "r", h)
			tp := h.Values("Traceparent")
			if len(tp) != 1 {
				t.Fatalf("%v: traceparent %q", h, tp)
			}
			if _, _, _, ok := parseTraceparent(tp[0]); !ok {
				t.Fatalf("sent a bad traceparent %q for %q", tp[0], s)
			}
		}
	})
}
