package inferapi

import (
	"bytes"
	"encoding/json"
	"net/http"

	"github.com/inferwatch/inferwatch/record"
)

// decodeOpenAIRequest reads an OpenAI-compatible request: the model, whether
// the response streams, and the batch: 1, or the number of prompts (inputs
// for embeddings) when a list of them is sent. The Responses API's input
// (method) is one conversation, its list the conversation's items: batch 1.
func decodeOpenAIRequest(method string, h http.Header, body []byte, truncated bool, c *record.Call, scan bool) error {
	if kindOf(h, body) != bodyJSON || len(body) == 0 {
		return nil
	}
	batch := 1
	w := newJSONWalk(body).scanning(scan)
	err := w.object("body", func(key string) error {
		switch key {
		case "model":
			return w.model(c)
		case "stream":
			tok, err := w.dec.Token()
			if err != nil {
				return err
			}
			if b, ok := tok.(bool); ok && b {
				c.Stream = true
			}
			return w.skipFrom(tok)
		case "prompt", "input":
			if method == MethodResponses {
				return w.skip()
			}
			var err error
			batch, err = w.prompts()
			return err
		}
		return w.skip()
	})
	if err = finish(err, truncated); err != nil {
		return err
	}
	if c.BatchSize == 0 {
		c.BatchSize = batch
	}
	return nil
}

// prompts reads a prompt or embeddings input and returns how many it holds:
// a string or a list of token ids is one, a list of strings or of token
// lists is its length. A list cut before its end is 0, unknown.
func (w *jsonWalk) prompts() (int, error) {
	if w.peek() != '[' {
		return 1, w.skip()
	}
	if _, err := w.dec.Token(); err != nil {
		return 0, err
	}
	tokens := false // a single prompt as token ids
	n, err := w.elements(func(i int) error {
		tok, err := w.dec.Token()
		if err != nil {
			return err
		}
		if _, ok := tok.(json.Number); ok && i == 0 {
			tokens = true
		}
		return w.skipFrom(tok)
	})
	switch {
	case tokens:
		return 1, err
	case err != nil:
		return 0, err
	case n == 0:
		return 1, nil
	}
	return n, nil
}

// decodeOpenAIResponse reads the model from an OpenAI-compatible response:
// a JSON body, or the first event of a server-sent event stream, which also
// marks the call streaming. A whole generation's usage and finish reason
// make its LLM record; an embeddings answer's usage does not: it generated
// nothing, and would only put its latency among the generations' e2e.
func decodeOpenAIResponse(method string, h http.Header, body []byte, truncated bool, c *record.Call, scan bool) error {
	switch kindOf(h, body) {
	case bodyJSON:
	case bodyEventStream:
		c.Stream = true
		var ok bool
		body, truncated, ok = firstEvent(body, truncated)
		if !ok {
			return nil
		}
	default:
		return nil
	}
	if len(body) == 0 {
		return nil
	}
	whole := !c.Stream && method != MethodEmbeddings
	var ev OpenAIEvent
	w := newJSONWalk(body).scanning(scan)
	err := w.object("body", func(key string) error {
		switch key {
		case "model":
			return w.model(c)
		case "usage":
			if whole {
				return w.usage(&ev)
			}
		case "metrics":
			if whole {
				return w.serverTimes(&ev.Server)
			}
		case "choices":
			if whole {
				_, err := w.array(key, func(int) error { return w.choice(&ev) })
				return err
			}
		}
		return w.skip()
	})
	if whole && c.LLM == nil && (ev.HasUsage || ev.FinishReason != "") {
		c.LLM = wholeAnswer(c, ev)
		c.Stages = ev.Server.Stages(c.Stages, StageSourceVLLM)
	}
	return finish(err, truncated)
}

// model reads the model name into c unless it is known (from the path).
func (w *jsonWalk) model(c *record.Call) error {
	s, err := w.string("model")
	if err == nil && c.Model == "" {
		c.Model = s
	}
	return err
}

// wholeAnswer is the token timing of a non-streamed generation: the answer
// arrives at once, so there is no first token to time; Whole is the
// request handed over until the answer's last byte, which TPOT spreads
// over the output tokens.
func wholeAnswer(c *record.Call, ev OpenAIEvent) *record.LLM {
	l := &record.LLM{
		PromptTokens: ev.PromptTokens, OutputTokens: ev.OutputTokens,
		FinishReason: ev.FinishReason, TokensEstimated: !ev.HasUsage,
	}
	l.Whole, _ = c.SinceHandedOver(c.ResponseEnd)
	return l
}

// firstEvent returns the data of the first server-sent event that carries
// JSON, its data lines joined as the event-stream format says; cut says the
// prefix ended inside it. ok is false when the prefix holds no such event
// (only comments, or the [DONE] marker).
func firstEvent(body []byte, truncated bool) (data []byte, cut, ok bool) {
	var event [][]byte
	for len(body) > 0 {
		line, rest, found := bytes.Cut(body, []byte("\n"))
		body = rest
		line = bytes.TrimSuffix(line, []byte("\r"))
		if payload, isData := bytes.CutPrefix(line, []byte("data:")); isData {
			event = append(event, bytes.TrimPrefix(payload, []byte(" ")))
		}
		end := found && len(line) == 0 // a blank line ends an event
		if !end && len(body) > 0 {
			continue
		}
		data = bytes.TrimSpace(bytes.Join(event, []byte("\n")))
		event = event[:0]
		if len(data) > 0 && data[0] == '{' {
			return data, truncated && !end, true
		}
	}
	return nil, false, false
}
