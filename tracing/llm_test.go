package tracing

import (
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/inferwatch/inferwatch/record"
)

const msLLM = time.Millisecond

// TestLLMSpan: a streamed generation's span carries its token timing as
// attributes and its first token as an event; a decoupled stream's requests
// are events with their ids; events stay bounded.
func TestLLMSpan(t *testing.T) {
	start := time.Now()
	c := &record.Call{Start: start, RequestEnd: msLLM, UpstreamStart: msLLM, UpstreamSent: 2 * msLLM, FirstByte: 5 * msLLM,
		ResponseEnd: 99 * msLLM, End: 100 * msLLM, Protocol: record.ProtocolHTTP, API: record.APIOpenAI, Method: "chat_completions",
		Model: "llm", Code: "200", TraceID: [16]byte{1}, SpanID: [8]byte{2},
		LLM: &record.LLM{Streamed: true, FirstToken: 12 * msLLM, FirstTokenUpstream: 11 * msLLM, LastToken: 92 * msLLM,
			ContentEvents: 5, OutputTokens: 5, PromptTokens: 9, FinishReason: "stop"}}
	for _, g := range []time.Duration{10, 20, 20, 30} {
		c.LLM.Gaps.Add(g * msLLM)
	}
	cs := buildSpans(c, nil, "", "")
	call := cs.spans[0]
	attrs := map[string]any{}
	for _, a := range call.attrs {
		attrs[string(a.Key)] = a.Value.AsInterface()
	}
	for k, want := range map[string]any{
		attrLLMTTFT: 12.0, attrLLMTTFTUpstream: 9.0, attrLLMTPOT: 20.0, attrLLMOutTokens: int64(5),
		attrLLMEstimated: false, attrLLMPromptTokens: int64(9), attrLLMFinish: "stop",
		attrITLCount: int64(4), attrITLMean: 20.0, attrITLMax: 30.0, attrITLP50: 20.0,
	} {
		if attrs[k] != want {
			t.Errorf("%s = %v (%T), want %v (%T)", k, attrs[k], attrs[k], want, want)
		}
	}
	if len(call.events) != 1 || call.events[0].Name != eventFirstToken || !call.events[0].Time.Equal(start.Add(12*msLLM)) {
		t.Fatalf("events %+v", call.events)
	}

	s := &record.Call{Start: start, End: 50 * msLLM, Protocol: record.ProtocolGRPC, API: record.APIKServeV2, Method: "stream_infer",
		Model: "llm", Code: "OK", TraceID: [16]byte{1}, SpanID: [8]byte{3}}
	for i := range 40 {
		s.StreamRequests = append(s.StreamRequests, record.StreamRequest{ID: "r", Arrived: time.Duration(i) * msLLM,
			FirstResponse: time.Duration(i+3) * msLLM, Responses: 2, Final: true})
	}
	ev := buildSpans(s, nil, "", "").spans[0].events
	if len(ev) != maxSpanEvents || ev[0].Name != eventRequest {
		t.Fatalf("%d events (want %d), first %+v", len(ev), maxSpanEvents, ev[0])
	}

	// A request answered only with an error has no response, but its
	// failure is an event; one never answered is not.
	s.StreamRequests = []record.StreamRequest{{ID: "failed", Arrived: msLLM, Error: true}, {ID: "waiting", Arrived: 2 * msLLM}}
	ev = buildSpans(s, nil, "", "").spans[0].events
	if len(ev) != 1 {
		t.Fatalf("%d events, want the failed request's: %+v", len(ev), ev)
	}
	got := map[attribute.Key]attribute.Value{}
	for _, a := range ev[0].Attributes {
		got[a.Key] = a.Value
	}
	if got["request.id"].AsString() != "failed" || !got["error"].AsBool() || got["responses"].AsInt64() != 0 {
		t.Errorf("failed request's event: %+v", ev[0].Attributes)
	}
	if _, ok := got["first_response_ms"]; ok {
		t.Errorf("a request with no response has a first_response_ms: %+v", ev[0].Attributes)
	}
}
