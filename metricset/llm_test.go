package metricset

import (
	"strings"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/record"
)

// TestObserveLLM: a streamed generation with usage, one without (counted,
// an estimate) that the client left, and a whole answer, each feed the LLM
// families with the intervals docs/metrics.md defines.
func TestObserveLLM(t *testing.T) {
	s := New(Options{})
	call := func(l *record.LLM) *record.Call {
		return &record.Call{
			Start: time.Now(), RequestEnd: ms, UpstreamStart: ms, UpstreamSent: 2 * ms,
			FirstByte: 20 * ms, ResponseEnd: 400 * ms, End: 401 * ms,
			Protocol: record.ProtocolHTTP, API: record.APIOpenAI, Method: "chat_completions",
			Model: "llama", Code: "200", LLM: l,
		}
	}
	streamed := &record.LLM{
		Streamed: true, FirstToken: 52 * ms, FirstTokenUpstream: 50 * ms, LastToken: 352 * ms,
		ContentEvents: 4, PromptTokens: 10, OutputTokens: 4, FinishReason: "stop",
	}
	for _, g := range []time.Duration{100 * ms, 100 * ms, 100 * ms} {
		streamed.Gaps.Add(g)
	}
	c := call(streamed)
	c.Stages = []record.Stage{{Name: "queue", Duration: 8 * ms}}
	s.Observe(c)

	left := &record.LLM{
		Streamed: true, FirstToken: 30 * ms, FirstTokenUpstream: 29 * ms, LastToken: 40 * ms,
		ContentEvents: 2, OutputTokens: 2, TokensEstimated: true, Disconnected: true, FinishReason: "weird",
	}
	left.Gaps.Add(10 * ms)
	s.Observe(call(left))

	whole := &record.LLM{Whole: 398 * ms, PromptTokens: 5, OutputTokens: 199, FinishReason: "length"}
	s.Observe(call(whole))

	e := scrape(t, s)
	m := map[string]string{"model": "llama", "version": "unknown"}
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"inferwatch_llm_time_to_first_token_seconds_count", m, 2}, // the whole answer has none
		{"inferwatch_llm_time_to_first_token_seconds_sum", m, 0.082},
		{"inferwatch_llm_time_to_first_token_upstream_seconds_sum", m, 0.048 + 0.027},
		{"inferwatch_llm_inter_token_latency_seconds_count", m, 4},
		{"inferwatch_llm_inter_token_latency_seconds_sum", m, 0.31},
		{"inferwatch_llm_time_per_output_token_seconds_count", m, 3},
		{"inferwatch_llm_time_per_output_token_seconds_sum", m, 0.1 + 0.01 + 0.002},
		{"inferwatch_llm_e2e_seconds_count", m, 3},
		{"inferwatch_llm_stage_duration_seconds_sum", with(m, "stage", "queue"), 0.008},
		{"inferwatch_llm_stage_duration_seconds_sum", with(m, "stage", "prefill"), 0.040 + 0.027},
		{"inferwatch_llm_stage_duration_seconds_sum", with(m, "stage", "decode"), 0.3 + 0.01},
		{"inferwatch_llm_prompt_tokens_total", m, 15},
		{"inferwatch_llm_output_tokens_total", with(m, "source", "usage"), 4 + 199},
		{"inferwatch_llm_output_tokens_total", with(m, "source", "events"), 2},
		{"inferwatch_llm_finish_total", with(m, "reason", "stop"), 1},
		{"inferwatch_llm_finish_total", with(m, "reason", "length"), 1},
		{"inferwatch_llm_finish_total", with(m, "reason", "other"), 1},
		{"inferwatch_llm_client_disconnects_total", m, 1},
	} {
		if got := e.value(tc.name, tc.labels); !near(got, tc.want, 1e-9) {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
	for name := range help {
		if strings.HasPrefix(name, "inferwatch_llm_") && e.Help[name] == "" {
			t.Errorf("no # HELP text for %s", name)
		}
	}
}

// TestObserveGapsPastTheKeptOnes: gaps past record.MaxGaps count at their
// mean, so count and sum stay exact.
func TestObserveGapsPastTheKeptOnes(t *testing.T) {
	s := New(Options{})
	l := &record.LLM{Streamed: true, FirstToken: ms, LastToken: time.Second, ContentEvents: record.MaxGaps + 11}
	for i := range record.MaxGaps + 10 {
		l.Gaps.Add(time.Duration(1+i%3) * ms)
	}
	var want time.Duration
	for i := range record.MaxGaps + 10 {
		want += time.Duration(1+i%3) * ms
	}
	s.Observe(&record.Call{Start: time.Now(), End: 2 * time.Second, Protocol: "http", API: record.APIOpenAI, Method: "chat_completions", Model: "m", Code: "200", LLM: l})
	e := scrape(t, s)
	m := map[string]string{"model": "m", "version": "unknown"}
	if got := e.value("inferwatch_llm_inter_token_latency_seconds_count", m); got != float64(record.MaxGaps+10) {
		t.Errorf("count %v, want %d", got, record.MaxGaps+10)
	}
	if got := e.value("inferwatch_llm_inter_token_latency_seconds_sum", m); !near(got, want.Seconds(), 1e-6) {
		t.Errorf("sum %v, want %v", got, want.Seconds())
	}
}

// TestObserveStreamRequests: each request of a decoupled stream is a
// generation of its own, timed from its own arrival.
func TestObserveStreamRequests(t *testing.T) {
	s := New(Options{})
	a := record.StreamRequest{ID: "a", Arrived: 10 * ms, FirstResponse: 30 * ms, LastResponse: 50 * ms, Responses: 3, Final: true}
	a.Gaps.Add(10 * ms)
	a.Gaps.Add(10 * ms)
	b := record.StreamRequest{ID: "b", Arrived: 12 * ms, FirstResponse: 62 * ms, LastResponse: 62 * ms, Responses: 1, Final: true}
	none := record.StreamRequest{ID: "c", Arrived: 13 * ms}
	failed := record.StreamRequest{ID: "d", Arrived: 14 * ms, Error: true} // timings left out: this one checks the count
	s.Observe(&record.Call{Start: time.Now(), End: 70 * ms, Protocol: "grpc", API: record.APIKServeV2, Method: "stream_infer",
		Model: "llm", Code: "OK", StreamRequests: []record.StreamRequest{a, b, none, failed}})
	e := scrape(t, s)
	m := map[string]string{"model": "llm", "version": "unknown"}
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"inferwatch_llm_time_to_first_token_seconds_count", m, 2},
		{"inferwatch_llm_time_to_first_token_seconds_sum", m, 0.020 + 0.050},
		{"inferwatch_llm_inter_token_latency_seconds_count", m, 2},
		{"inferwatch_llm_time_per_output_token_seconds_sum", m, 0.010},
		{"inferwatch_llm_e2e_seconds_sum", m, 0.040 + 0.050},
		{"inferwatch_llm_output_tokens_total", with(m, "source", "events"), 4},
		{"inferwatch_llm_finish_total", with(m, "reason", "error"), 1},
	} {
		if got := e.value(tc.name, tc.labels); !near(got, tc.want, 1e-9) {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
}

// TestObserveLLMMidStreamError: a generation that failed after its 200
// (record.LLM.Error, finish reason "error") counts as reason="error", the
// value docs/metrics.md names, not "other".
func TestObserveLLMMidStreamError(t *testing.T) {
	s := New(Options{})
	s.Observe(&record.Call{
		Start: time.Now(), End: 50 * ms, Protocol: record.ProtocolHTTP, API: record.APIOpenAI,
		Method: "chat_completions", Model: "llama", Code: "200",
		LLM: &record.LLM{Streamed: true, Error: true, FinishReason: "error"},
	})
	e := scrape(t, s)
	m := map[string]string{"model": "llama", "version": "unknown"}
	if got := e.value("inferwatch_llm_finish_total", with(m, "reason", "error")); got != 1 {
		t.Fatalf(`inferwatch_llm_finish_total{reason="error"} = %v, want 1`, got)
	}
}
