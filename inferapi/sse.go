package inferapi

import (
	"bytes"
	"encoding/json"
	"strings"
	"time"

	"github.com/inferwatch/inferwatch/record"
)

// SSEScanner splits a server-sent event stream, fed in the chunks it
// arrives in, into events: the data lines of each event, joined with "\n"
// as the event-stream format says, handed to a callback when the blank line
// that ends the event arrives. Fields other than data (event, id, retry,
// comments) are dropped. An event's data is kept to maxEventData bytes; a
// longer one is still delivered, cut (Cut reports it), so memory stays
// bounded whatever the server sends.
type SSEScanner struct {
	line []byte // the current line so far, without its end
	data []byte // the current event's data lines so far
	has  bool   // the current event has a data line
	cut  bool   // the current event's data outgrew maxEventData
	cr   bool   // the last byte fed was '\r' (a "\r\n" may be split across chunks)
	long bool   // the current line outgrew what is kept of it
}

// maxEventData bounds one event's kept data: OpenAI chunks are a few hundred
// bytes; a final event with usage and logprobs a few KiB.
const maxEventData = 64 << 10

// Feed scans p and calls fn with each event it completes, in order. The data
// slice is valid only during the call; cut says it was clipped.
func (s *SSEScanner) Feed(p []byte, fn func(data []byte, cut bool)) {
	for len(p) > 0 {
		i := bytes.IndexAny(p, "\r\n")
		if i < 0 {
			s.appendLine(p)
			s.cr = false
			return
		}
		c := p[i]
		s.appendLine(p[:i])
		p = p[i+1:]
		if c == '\n' && s.cr && i == 0 {
			// The "\n" of a "\r\n" whose "\r" ended the previous chunk or line.
			s.cr = false
			continue
		}
		s.cr = c == '\r'
		if c == '\r' && len(p) > 0 && p[0] == '\n' {
			p = p[1:]
			s.cr = false
		}
		s.endLine(fn)
	}
}

func (s *SSEScanner) appendLine(b []byte) {
	// Only data lines need their bytes; a line is kept up to the event bound.
	room := maxEventData + len("data: ") - len(s.line)
	if len(b) > room {
		b, s.long = b[:max(room, 0)], true
	}
	s.line = append(s.line, b...)
}

func (s *SSEScanner) endLine(fn func(data []byte, cut bool)) {
	line, long := s.line, s.long
	s.line, s.long = s.line[:0], false
	if len(line) == 0 {
		if s.has {
			fn(s.data, s.cut)
		}
		s.data, s.has, s.cut = s.data[:0], false, false
		return
	}
	payload, ok := bytes.CutPrefix(line, []byte("data"))
	if !ok || (len(payload) > 0 && payload[0] != ':') {
		return // another field, or a comment
	}
	if len(payload) > 0 {
		payload = payload[1:]
	}
	payload = bytes.TrimPrefix(payload, []byte(" "))
	if s.has {
		s.data = append(s.data, '\n')
	}
	s.has = true
	room := maxEventData - len(s.data)
	if len(payload) > room || long {
		payload, s.cut = payload[:min(len(payload), max(room, 0))], true
	}
	s.data = append(s.data, payload...)
}

// OpenAIEvent is what one event of an OpenAI-compatible stream says about
// the generation, never its text.
type OpenAIEvent struct {
	Content      bool   // carries generated output: text, a delta's content or reasoning, a tool call
	Done         bool   // the [DONE] marker
	Error        bool   // an error object instead of a chunk
	FinishReason string // from a choice, when one finished
	HasUsage     bool   // a usage object with token counts came
	PromptTokens int
	OutputTokens int
	// Server stages from vLLM's per-request metrics object
	// (--enable-per-request-metrics): queue_time_ms, time_to_first_token_ms
	// (from scheduling: the prefill), generation_time_ms (the decode).
	Server ServerLLMTimes
}

// ServerLLMTimes are the stages an LLM server reported for one request;
// zero where it did not.
type ServerLLMTimes struct {
	Queue, Prefill, Decode time.Duration
}

// Stages appends the reported stages to dst, with source as their Source.
func (t ServerLLMTimes) Stages(dst []record.Stage, source string) []record.Stage {
	for _, st := range [...]struct {
		name string
		d    time.Duration
	}{{"queue", t.Queue}, {"prefill", t.Prefill}, {"decode", t.Decode}} {
		if st.d > 0 {
			dst = append(dst, record.Stage{Name: st.name, Duration: st.d, Source: source})
		}
	}
	return dst
}

// StageSourceVLLM is the Source of stages read from vLLM's per-request
// metrics object.
const StageSourceVLLM = "vllm"

// ParseOpenAIEvent reads one event's data from a /v1/completions,
// /v1/chat/completions or /v1/responses stream. Data that is not JSON (a
// cut event, say) reads as an unknown event with an error.
func ParseOpenAIEvent(data []byte) (OpenAIEvent, error) {
	var ev OpenAIEvent
	data = bytes.TrimSpace(data)
	if string(data) == "[DONE]" {
		ev.Done = true
		return ev, nil
	}
	w := newJSONWalk(data)
	err := w.object("event", func(key string) error {
		switch key {
		case "choices":
			_, err := w.array(key, func(int) error { return w.choice(&ev) })
			return err
		case "usage":
			return w.usage(&ev)
		case "error":
			if w.peek() != 'n' {
				ev.Error = true
			}
			return w.skip()
		case "type": // the Responses API names each event
			t, err := w.string(key)
			switch t {
			// The deltas of what the model generates: text, reasoning
			// (vLLM's reasoning_text, OpenAI's reasoning summary), tool
			// arguments, a refusal, audio and its transcript (the
			// Responses API spells it audio.transcript, unlike Realtime's
			// audio_transcript).
			case "response.output_text.delta", "response.reasoning_text.delta", "response.reasoning_summary_text.delta",
				"response.function_call_arguments.delta", "response.custom_tool_call_input.delta", "response.refusal.delta",
				"response.audio.delta", "response.audio.transcript.delta":
				ev.Content = true
			case "error", "response.failed":
				ev.Error = true
			}
			return err
		case "metrics":
			return w.serverTimes(&ev.Server)
		case "response": // response.completed carries the usage and status
			return w.object(key, func(k string) error {
				if k == "usage" {
					return w.usage(&ev)
				}
				return w.skip()
			})
		}
		return w.skip()
	})
	return ev, err
}

// choice reads one element of choices: text (completions), a delta's
// content, reasoning or tool calls (chat), and finish_reason.
func (w *jsonWalk) choice(ev *OpenAIEvent) error {
	return w.object("choice", func(key string) error {
		switch key {
		case "text":
			return w.nonEmptyString(&ev.Content)
		case "delta", "message":
			return w.object(key, func(k string) error {
				switch k {
				case "content", "reasoning_content", "reasoning", "refusal":
					return w.nonEmptyString(&ev.Content)
				case "tool_calls", "function_call":
					if c := w.peek(); c == '[' || c == '{' {
						ev.Content = true
					}
				}
				return w.skip()
			})
		case "finish_reason":
			if w.peek() == '"' {
				s, err := w.string(key)
				ev.FinishReason = s
				return err
			}
		}
		return w.skip()
	})
}

// nonEmptyString sets *set when the next value is a non-empty string,
// without building it.
func (w *jsonWalk) nonEmptyString(set *bool) error {
	tok, err := w.dec.Token()
	if err != nil {
		return err
	}
	if s, ok := tok.(string); ok && s != "" {
		*set = true
	}
	return w.skipFrom(tok)
}

// usage reads {prompt_tokens, completion_tokens} (or the Responses API's
// input_tokens, output_tokens); null is no usage.
func (w *jsonWalk) usage(ev *OpenAIEvent) error {
	if w.peek() != '{' {
		return w.skip()
	}
	return w.object("usage", func(key string) error {
		switch key {
		case "prompt_tokens", "input_tokens", "completion_tokens", "output_tokens":
			tok, err := w.dec.Token()
			if err != nil {
				return err
			}
			n, ok := tok.(json.Number)
			if !ok {
				return w.skipFrom(tok)
			}
			v, err := n.Int64()
			if err != nil || v < 0 {
				return nil
			}
			ev.HasUsage = true
			if key == "prompt_tokens" || key == "input_tokens" {
				ev.PromptTokens = int(v)
			} else {
				ev.OutputTokens = int(v)
			}
			return nil
		}
		return w.skip()
	})
}

// serverTimes reads vLLM's per-request metrics object (milliseconds).
func (w *jsonWalk) serverTimes(t *ServerLLMTimes) error {
	if w.peek() != '{' {
		return w.skip()
	}
	return w.object("metrics", func(key string) error {
		var dst *time.Duration
		switch key {
		case "queue_time_ms":
			dst = &t.Queue
		case "time_to_first_token_ms":
			dst = &t.Prefill
		case "generation_time_ms":
			dst = &t.Decode
		default:
			return w.skip()
		}
		tok, err := w.dec.Token()
		if err != nil {
			return err
		}
		if n, ok := tok.(json.Number); ok {
			if ms, err := n.Float64(); err == nil && ms >= 0 && ms < 1e9 {
				*dst = time.Duration(ms * float64(time.Millisecond))
			}
		}
		return w.skipFrom(tok)
	})
}

// IsEventStream says a Content-Type is a server-sent event stream's.
func IsEventStream(contentType string) bool {
	media, _, _ := strings.Cut(contentType, ";")
	return strings.EqualFold(strings.TrimSpace(media), "text/event-stream")
}

// EventTimer times an OpenAI-compatible event stream as it passes, for every
// front that sees one (the proxy, ext_proc, the HTTP middleware): the events
// each chunk completes are classified when the chunk arrives from the
// upstream (the event-stream scanner and a small JSON walk per event, no
// copy of the stream), and their times at the client are taken once the
// front has handed the chunk on. The stream itself is never held.
type EventTimer struct {
	generate bool // Triton's generate extension, else OpenAI's events
	scan     SSEScanner
	llm      record.LLM
	usage    bool           // some event carried usage
	server   ServerLLMTimes // the last per-request metrics the server sent

	pending int           // content events read and not yet handed on
	lastOut time.Duration // when the previous content event reached the client
}

// NewEventTimer times a generative route's event stream (Route.Generative)
// with that API's event reader. The zero EventTimer reads OpenAI's events.
func NewEventTimer(r Route) *EventTimer {
	return &EventTimer{generate: r.API != record.APIOpenAI}
}

// Read classifies the events the chunk completes; at is its arrival.
func (t *EventTimer) Read(p []byte, at time.Duration) {
	t.scan.Feed(p, func(data []byte, cut bool) {
		parse := ParseOpenAIEvent
		if t.generate {
			parse = ParseGenerateEvent
		}
		ev, err := parse(data)
		if err != nil && !cut {
			return // not a chunk we know; it still went through
		}
		if ev.Content || (cut && err != nil) {
			// A cut event is an oversized output chunk.
			t.pending++
			if t.llm.FirstTokenUpstream == 0 {
				t.llm.FirstTokenUpstream = at
			}
		}
		if ev.HasUsage {
			t.usage = true
			t.llm.PromptTokens, t.llm.OutputTokens = ev.PromptTokens, ev.OutputTokens
		}
		if ev.FinishReason != "" {
			t.llm.FinishReason = ev.FinishReason
		}
		if ev.Error {
			// The status was sent long ago: this event is the only sign
			// the generation failed.
			t.llm.Error = true
		}
		if ev.Server != (ServerLLMTimes{}) {
			t.server = ev.Server
		}
	})
}

// Written takes the client-side time of the content events read since the
// last call: all reached the client together, at out.
func (t *EventTimer) Written(out time.Duration) {
	for range t.pending {
		if t.llm.ContentEvents == 0 {
			t.llm.FirstToken = out
		} else {
			t.llm.Gaps.Add(out - t.lastOut)
		}
		t.llm.ContentEvents++
		t.lastOut = out
	}
	if t.pending > 0 {
		t.llm.LastToken = out
	}
	t.pending = 0
}

// Finish puts the timing into the record; disconnected says the client went
// away before the stream ended.
func (t *EventTimer) Finish(c *record.Call, disconnected bool) {
	l := t.llm
	l.Streamed = true
	l.Disconnected = disconnected
	if !t.usage {
		l.OutputTokens, l.TokensEstimated = l.ContentEvents, true
	}
	if l.Error {
		// However the stream went before, it ended in the error.
		l.FinishReason = "error"
	}
	c.LLM = &l
	c.Stages = t.server.Stages(c.Stages, StageSourceVLLM)
}

// ParseGenerateEvent reads one event of a Triton generate_stream answer: a
// response object whose outputs are named by the model. One that carries
// text — text_output, as the TensorRT-LLM and vLLM backends name it, or
// another non-empty string output, alone or in an array — is an output
// event (numbers, such as log probabilities, are not); "error" marks a
// failure the 200 status could not announce; a finish_reason output (the
// vLLM backend's, when asked for) is the finish reason, not text. The
// stream says nothing of tokens.
func ParseGenerateEvent(data []byte) (OpenAIEvent, error) {
	var ev OpenAIEvent
	w := newJSONWalk(bytes.TrimSpace(data))
	err := w.object("event", func(key string) error {
		switch key {
		case "id", "model_name", "model_version", "parameters":
			return w.skip()
		case "error":
			if w.peek() != 'n' {
				ev.Error = true
			}
			return w.skip()
		case "finish_reason":
			// Triton's vLLM backend (return_finish_reason) sends it on
			// every response, "None" until the last: a string output that
			// is no text, or the last response, whose delta is empty when
			// the model stopped at its end token, would count as a token.
			return w.generateFinishReason(&ev)
		}
		switch w.peek() {
		case '"':
			return w.nonEmptyString(&ev.Content)
		case '[': // a tensor of more than one element: strings are text
			_, err := w.array(key, func(int) error {
				if w.peek() == '"' {
					return w.nonEmptyString(&ev.Content)
				}
				return w.skip()
			})
			return err
		}
		return w.skip()
	})
	return ev, err
}

// generateFinishReason reads a generate event's finish_reason output, a
// string or a one-element array of strings; "None" (Python's str of no
// reason) is none.
func (w *jsonWalk) generateFinishReason(ev *OpenAIEvent) error {
	read := func() error {
		if w.peek() != '"' {
			return w.skip()
		}
		s, err := w.string("finish_reason")
		if err == nil && s != "" && s != "None" && ev.FinishReason == "" {
			ev.FinishReason = s
		}
		return err
	}
	if w.peek() != '[' {
		return read()
	}
	_, err := w.array("finish_reason", func(int) error { return read() })
	return err
}
