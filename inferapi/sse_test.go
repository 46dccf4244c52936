package inferapi

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/record"
)

// TestSSEScannerSplits: the same stream fed whole, byte by byte and in
// every two-piece split gives the same events; line ends may be \n, \r\n
// or \r; comments and other fields are dropped; data lines join with \n.
func TestSSEScannerSplits(t *testing.T) {
	for _, tc := range []struct {
		name, stream string
		want         []string
	}{
		{"lf", "data: a\n\ndata: b\n\n", []string{"a", "b"}},
		{"crlf", "data: a\r\n\r\ndata:b\r\n\r\n", []string{"a", "b"}},
		{"cr", "data: a\r\rdata: b\r\r", []string{"a", "b"}},
		{"multi-line", "data: {\"x\":\ndata: 1}\n\n", []string{"{\"x\":\n1}"}},
		{"fields and comments", ": ping\n\nevent: response.output_text.delta\nid: 7\nretry: 10\ndata: x\n\n", []string{"x"}},
		{"no space", "data:x\n\n", []string{"x"}},
		{"empty data", "data\n\ndata:\n\n", []string{"", ""}},
		{"not data", "datum: x\n\n", nil},
		{"unterminated", "data: a\n\ndata: b\n", []string{"a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			feeds := [][]string{{tc.stream}}
			var bytewise []string
			for i := range len(tc.stream) {
				bytewise = append(bytewise, tc.stream[i:i+1])
			}
			feeds = append(feeds, bytewise)
			for i := 1; i < len(tc.stream); i++ {
				feeds = append(feeds, []string{tc.stream[:i], tc.stream[i:]})
			}
			for _, pieces := range feeds {
				var s SSEScanner
				var got []string
				for _, p := range pieces {
					s.Feed([]byte(p), func(data []byte, cut bool) {
						if cut {
							t.Errorf("cut event %q", data)
						}
						got = append(got, string(data))
					})
				}
				if strings.Join(got, "|") != strings.Join(tc.want, "|") || len(got) != len(tc.want) {
					t.Fatalf("pieces %q: events %q, want %q", pieces, got, tc.want)
				}
			}
		})
	}
}

// TestSSEScannerBounds: an event larger than the bound is delivered cut,
// and the next one whole.
func TestSSEScannerBounds(t *testing.T) {
	var s SSEScanner
	big := strings.Repeat("x", maxEventData+1000)
	var lens []int
	var cuts []bool
	s.Feed([]byte("data: "+big+"\n\ndata: small\n\n"), func(data []byte, cut bool) {
		lens = append(lens, len(data))
		cuts = append(cuts, cut)
	})
	if len(lens) != 2 || lens[0] != maxEventData || !cuts[0] || lens[1] != 5 || cuts[1] {
		t.Fatalf("lens %v cuts %v", lens, cuts)
	}
}

func TestParseOpenAIEvent(t *testing.T) {
	for _, tc := range []struct {
		name, data string
		want       OpenAIEvent
		err        bool
	}{
		{"chat role only", `{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`, OpenAIEvent{}, false},
		{"chat content", `{"choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]}`, OpenAIEvent{Content: true}, false},
		{"chat last", `{"choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":"stop"}],"usage":null}`, OpenAIEvent{Content: true, FinishReason: "stop"}, false},
		{"chat reasoning", `{"choices":[{"delta":{"reasoning_content":"hmm"}}]}`, OpenAIEvent{Content: true}, false},
		{"chat tool call", `{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{"}}]}}]}`, OpenAIEvent{Content: true}, false},
		{"usage chunk", `{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":34,"total_tokens":46}}`, OpenAIEvent{HasUsage: true, PromptTokens: 12, OutputTokens: 34}, false},
		{"completion text", `{"object":"text_completion","choices":[{"text":" the","index":0,"finish_reason":"length"}]}`, OpenAIEvent{Content: true, FinishReason: "length"}, false},
		{"responses delta", `{"type":"response.output_text.delta","delta":"Hi"}`, OpenAIEvent{Content: true}, false},
		{"responses reasoning summary", `{"type":"response.reasoning_summary_text.delta","item_id":"rs_1","output_index":0,"summary_index":0,"delta":"Think"}`, OpenAIEvent{Content: true}, false},
		{"responses audio", `{"type":"response.audio.delta","delta":"UklGRg=="}`, OpenAIEvent{Content: true}, false},
		{"responses audio transcript", `{"type":"response.audio.transcript.delta","delta":"Hel"}`, OpenAIEvent{Content: true}, false},
		{"responses custom tool input", `{"type":"response.custom_tool_call_input.delta","item_id":"ctc_1","output_index":0,"delta":"ls"}`, OpenAIEvent{Content: true}, false},
		{"responses reasoning summary part", `{"type":"response.reasoning_summary_part.added","part":{"type":"summary_text","text":""}}`, OpenAIEvent{}, false},
		{"responses completed", `{"type":"response.completed","response":{"status":"completed","usage":{"input_tokens":5,"output_tokens":9}}}`, OpenAIEvent{HasUsage: true, PromptTokens: 5, OutputTokens: 9}, false},
		{"vllm per-request metrics", `{"choices":[{"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":42,"completion_tokens":128},"metrics":{"time_to_first_token_ms":85.2,"generation_time_ms":1240.5,"queue_time_ms":12,"mean_itl_ms":9.1}}`,
			OpenAIEvent{FinishReason: "stop", HasUsage: true, PromptTokens: 42, OutputTokens: 128, Server: ServerLLMTimes{Queue: 12 * time.Millisecond, Prefill: 85200 * time.Microsecond, Decode: 1240500 * time.Microsecond}}, false},
		{"done", " [DONE] ", OpenAIEvent{Done: true}, false},
		{"error", `{"error":{"message":"overloaded","code":503}}`, OpenAIEvent{Error: true}, false},
		{"not json", `hello`, OpenAIEvent{}, true},
		{"cut", `{"choices":[{"delta":{"content":"x"}`, OpenAIEvent{Content: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseOpenAIEvent([]byte(tc.data))
			if (err != nil) != tc.err || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v, error %v", got, err, tc.want, tc.err)
			}
		})
	}
}

func TestParseTGITimes(t *testing.T) {
	h := http.Header{}
	h.Set("X-Validation-Time", "1")
	h.Set("X-Queue-Time", "12")
	h.Set("X-Inference-Time", "bad")
	h.Set("X-Time-Per-Token", "20")
	got := ParseTGITimes(h.Get, nil)
	want := []record.Stage{
		{Name: "validation", Duration: time.Millisecond, Source: StageSourceTGI},
		{Name: "queue", Duration: 12 * time.Millisecond, Source: StageSourceTGI},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

// TestWholeAnswerTiming: a generation that was not streamed gets its token
// counts, finish reason and server stages from the JSON answer, and a TPOT
// spreading the upstream time over its tokens; no TTFT.
func TestWholeAnswerTiming(t *testing.T) {
	h := http.Header{"Content-Type": {"application/json"}}
	body := `{"id":"x","object":"chat.completion","model":"llama","choices":[{"index":0,"message":{"role":"assistant","content":"hi there"},"finish_reason":"length"}],` +
		`"usage":{"prompt_tokens":7,"completion_tokens":40,"total_tokens":47},"metrics":{"queue_time_ms":3,"time_to_first_token_ms":20,"generation_time_ms":380}}`
	c := record.Call{UpstreamStart: time.Millisecond, UpstreamSent: 2 * time.Millisecond, FirstByte: 400 * time.Millisecond, ResponseEnd: 402 * time.Millisecond}
	r := HTTPRoute("POST", "/v1/chat/completions", "")
	if err := DecodeHTTPResponse(r, h, []byte(body), false, &c); err != nil {
		t.Fatal(err)
	}
	l := c.LLM
	if l == nil || l.Streamed || l.OutputTokens != 40 || l.PromptTokens != 7 || l.TokensEstimated || l.FinishReason != "length" {
		t.Fatalf("llm %+v", l)
	}
	if tpot, ok := l.TPOT(); !ok || tpot != 10*time.Millisecond {
		t.Errorf("TPOT %v %v, want the 400ms upstream time over 40 tokens", tpot, ok)
	}
	if _, ok := l.TTFT(); ok {
		t.Error("a whole answer has no TTFT")
	}
	want := []record.Stage{
		{Name: "queue", Duration: 3 * time.Millisecond, Source: StageSourceVLLM},
		{Name: "prefill", Duration: 20 * time.Millisecond, Source: StageSourceVLLM},
		{Name: "decode", Duration: 380 * time.Millisecond, Source: StageSourceVLLM},
	}
	if !slices.Equal(c.Stages, want) {
		t.Errorf("stages %+v, want %+v", c.Stages, want)
	}
}

func TestIsEventStream(t *testing.T) {
	for ct, want := range map[string]bool{
		"text/event-stream":                 true,
		"text/event-stream; charset=utf-8":  true,
		" Text/Event-Stream ;charset=utf-8": true,
		"text/event-streams":                false,
		"application/json":                  false,
		"":                                  false,
	} {
		if got := IsEventStream(ct); got != want {
			t.Errorf("IsEventStream(%q) = %v, want %v", ct, got, want)
		}
	}
}

// TestEventTimerPendingEvents: content events read in several chunks before
// the front hands them on all take that moment as their time at the client
// (a handler that writes events and flushes once); upstream times are each
// chunk's arrival.
func TestEventTimerPendingEvents(t *testing.T) {
	ev := func(s string) []byte {
		return []byte(`data: {"choices":[{"index":0,"delta":{"content":"` + s + `"}}]}` + "\n\n")
	}
	var tm EventTimer
	tm.Read([]byte(`data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`+"\n\n"), 1*time.Millisecond)
	tm.Written(2 * time.Millisecond) // a role-only chunk: no output event
	tm.Read(ev("a"), 10*time.Millisecond)
	tm.Read(ev("b"), 11*time.Millisecond)
	tm.Written(12 * time.Millisecond)
	tm.Read(ev("c"), 20*time.Millisecond)
	tm.Written(25 * time.Millisecond)
	tm.Read([]byte(`data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}`+"\n\ndata: [DONE]\n\n"), 26*time.Millisecond)
	tm.Written(27 * time.Millisecond)
	var c record.Call
	tm.Finish(&c, false)
	l := c.LLM
	if l == nil || !l.Streamed || l.ContentEvents != 3 || l.FirstTokenUpstream != 10*time.Millisecond || l.FirstToken != 12*time.Millisecond ||
		l.LastToken != 25*time.Millisecond || l.OutputTokens != 3 || l.PromptTokens != 5 || l.TokensEstimated || l.FinishReason != "stop" {
		t.Fatalf("LLM %+v", l)
	}
	if g := l.Gaps.Kept; len(g) != 2 || g[0] != 0 || g[1] != 13*time.Millisecond {
		t.Fatalf("gaps %v, want [0 13ms]", g)
	}
}

// TestEventTimerGenerateFinishReason: a Triton generate_stream from the
// vLLM backend asked for return_finish_reason counts its text events only,
// not the last one that carries the reason and no text, and records the
// reason.
func TestEventTimerGenerateFinishReason(t *testing.T) {
	tm := NewEventTimer(HTTPRoute("POST", "/v2/models/vllm/generate_stream", ""))
	for i, data := range []string{
		`{"model_name":"vllm","model_version":"1","text_output":"Hel","finish_reason":"None"}`,
		`{"model_name":"vllm","model_version":"1","text_output":"lo","finish_reason":"None"}`,
		`{"model_name":"vllm","model_version":"1","text_output":"","finish_reason":"stop"}`,
	} {
		at := time.Duration(i+1) * time.Millisecond
		tm.Read([]byte("data: "+data+"\n\n"), at)
		tm.Written(at)
	}
	var c record.Call
	tm.Finish(&c, false)
	if l := c.LLM; l.ContentEvents != 2 || l.OutputTokens != 2 || l.LastToken != 2*time.Millisecond || l.FinishReason != "stop" {
		t.Fatalf("LLM %+v, want 2 content events ending at 2ms, finish reason stop", l)
	}
}

func TestParseGenerateEvent(t *testing.T) {
	for _, tc := range []struct {
		name, data string
		want       OpenAIEvent
		err        bool
	}{
		{"text", `{"model_name":"llama","model_version":"1","text_output":"Hi"}`, OpenAIEvent{Content: true}, false},
		{"empty text", `{"model_name":"llama","text_output":""}`, OpenAIEvent{}, false},
		{"other string output", `{"model_name":"m","generated":"x"}`, OpenAIEvent{Content: true}, false},
		{"numbers only", `{"model_name":"m","cum_log_probs":-1.5,"batch_index":0}`, OpenAIEvent{}, false},
		{"text in an array", `{"model_name":"m","text_output":["","b"]}`, OpenAIEvent{Content: true}, false},
		{"numbers in arrays", `{"model_name":"m","output_log_probs":[-0.5,-1.25],"text_output":[""]}`, OpenAIEvent{}, false},
		{"error", `{"error":"out of memory"}`, OpenAIEvent{Error: true}, false},
		{"not JSON", `tok`, OpenAIEvent{}, true},
		// Triton's vLLM backend with return_finish_reason sends
		// finish_reason on every response: str(None) until the last one,
		// whose text delta is empty when the model stopped at its EOS.
		{"vLLM finish_reason None with text", `{"model_name":"vllm","text_output":"Hi","finish_reason":"None"}`, OpenAIEvent{Content: true}, false},
		{"vLLM finish_reason None, empty text", `{"model_name":"vllm","text_output":"","finish_reason":"None"}`, OpenAIEvent{}, false},
		{"vLLM last response", `{"model_name":"vllm","text_output":"","finish_reason":"stop"}`, OpenAIEvent{FinishReason: "stop"}, false},
		{"vLLM last response with text", `{"model_name":"vllm","finish_reason":"length","text_output":"end"}`, OpenAIEvent{Content: true, FinishReason: "length"}, false},
		{"finish_reason in an array", `{"model_name":"vllm","text_output":[""],"finish_reason":["stop"]}`, OpenAIEvent{FinishReason: "stop"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseGenerateEvent([]byte(tc.data))
			if (err != nil) != tc.err || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v, error %v", got, err, tc.want, tc.err)
			}
		})
	}
}

// TestEventTimerMidStreamError: a generation that fails after its 200 —
// an OpenAI error chunk, a Responses API response.failed or error event, a
// Triton generate_stream error — is recorded as failed: finish reason
// "error", and the call counts as failed, though its code stays 200.
func TestEventTimerMidStreamError(t *testing.T) {
	for _, tc := range []struct {
		name, path string
		events     []string
	}{
		{"chat error chunk", "/v1/chat/completions", []string{
			`{"choices":[{"index":0,"delta":{"content":"Hel"}}]}`,
			`{"error":{"object":"error","message":"engine dead","type":"InternalServerError","code":500}}`,
		}},
		{"responses failed", "/v1/responses", []string{
			`{"type":"response.output_text.delta","delta":"Hi"}`,
			`{"type":"response.failed","response":{"status":"failed","error":{"code":"server_error","message":"boom"}}}`,
		}},
		{"responses error", "/v1/responses", []string{
			`{"type":"error","code":"ERR_SOMETHING","message":"boom"}`,
		}},
		{"generate error", "/v2/models/llm/generate_stream", []string{
			`{"model_name":"llm","model_version":"1","text_output":"Hel"}`,
			`{"error":"in ensemble 'llm': failed to execute"}`,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tm := NewEventTimer(HTTPRoute("POST", tc.path, ""))
			for i, data := range tc.events {
				at := time.Duration(i+1) * time.Millisecond
				tm.Read([]byte("data: "+data+"\n\n"), at)
				tm.Written(at)
			}
			c := record.Call{Protocol: record.ProtocolHTTP, Code: "200"}
			tm.Finish(&c, false)
			if c.LLM.FinishReason != "error" || !c.Failed() {
				t.Fatalf("finish reason %q, failed %v; want error, true", c.LLM.FinishReason, c.Failed())
			}
		})
	}
	// A stream that ends well is no failure.
	tm := NewEventTimer(HTTPRoute("POST", "/v1/chat/completions", ""))
	tm.Read([]byte(`data: {"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"stop"}]}`+"\n\n"), time.Millisecond)
	c := record.Call{Protocol: record.ProtocolHTTP, Code: "200"}
	tm.Finish(&c, false)
	if c.LLM.FinishReason != "stop" || c.Failed() {
		t.Fatalf("finish reason %q, failed %v; want stop, false", c.LLM.FinishReason, c.Failed())
	}
}

// TestEmbeddingsAreNoGeneration: an embeddings answer carries usage (its
// prompt tokens) but generates nothing: it is no LLM call, so it feeds no
// inferwatch_llm_* series (e2e, prompt tokens) that docs/metrics.md keeps
// to completions, chat, responses and generate.
func TestEmbeddingsAreNoGeneration(t *testing.T) {
	h := http.Header{"Content-Type": {"application/json"}}
	body := `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.1,-0.2]}],"model":"bge","usage":{"prompt_tokens":8,"total_tokens":8}}`
	c := record.Call{UpstreamSent: time.Millisecond, ResponseEnd: 9 * time.Millisecond}
	r := HTTPRoute("POST", "/v1/embeddings", "")
	if err := DecodeHTTPResponse(r, h, []byte(body), false, &c); err != nil {
		t.Fatal(err)
	}
	if c.Model != "bge" || c.LLM != nil {
		t.Fatalf("model %q, LLM %+v; want bge and no LLM record", c.Model, c.LLM)
	}
	if r.Generative() {
		t.Error("an embeddings route is not generative")
	}
}
