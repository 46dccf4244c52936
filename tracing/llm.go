package tracing

import (
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/inferwatch/inferwatch/record"
)

// The token timing of a generative call on its span: attributes that
// summarise it and events at the moments that matter (the first token;
// each request of a decoupled stream), never the text.
const (
	attrLLMTTFT         = "inference.llm.ttft_ms"
	attrLLMTTFTUpstream = "inference.llm.ttft_upstream_ms"
	attrLLMTPOT         = "inference.llm.tpot_ms"
	attrLLMEvents       = "inference.llm.output_events"
	attrLLMOutTokens    = "inference.llm.output_tokens"
	attrLLMEstimated    = "inference.llm.output_tokens_estimated"
	attrLLMPromptTokens = "inference.llm.prompt_tokens"
	attrLLMFinish       = "inference.llm.finish_reason"
	attrLLMDisconnected = "inference.llm.client_disconnected"
	attrITLCount        = "inference.llm.itl.count"
	attrITLMean         = "inference.llm.itl.mean_ms"
	attrITLP50          = "inference.llm.itl.p50_ms"
	attrITLP99          = "inference.llm.itl.p99_ms"
	attrITLMax          = "inference.llm.itl.max_ms"
	attrStreamRequests  = "inference.stream.requests"

	eventFirstToken = "llm.first_token"
	eventRequest    = "stream.request"

	// maxSpanEvents bounds the events of one span (a stream of thousands of
	// requests still summarises in its attributes).
	maxSpanEvents = 32
)

// llmAttributes summarises c.LLM.
func llmAttributes(a []attribute.KeyValue, c *record.Call) []attribute.KeyValue {
	l := c.LLM
	if l == nil {
		return a
	}
	if d, ok := l.TTFT(); ok {
		a = append(a, attribute.Float64(attrLLMTTFT, ms(d)))
	}
	if d, ok := l.TTFTUpstream(c); ok {
		a = append(a, attribute.Float64(attrLLMTTFTUpstream, ms(d)))
	}
	if d, ok := l.TPOT(); ok {
		a = append(a, attribute.Float64(attrLLMTPOT, ms(d)))
	}
	if l.Streamed {
		a = append(a, attribute.Int(attrLLMEvents, l.ContentEvents))
	}
	a = append(a, attribute.Int(attrLLMOutTokens, l.OutputTokens), attribute.Bool(attrLLMEstimated, l.TokensEstimated))
	if l.PromptTokens > 0 {
		a = append(a, attribute.Int(attrLLMPromptTokens, l.PromptTokens))
	}
	if l.FinishReason != "" {
		a = append(a, attribute.String(attrLLMFinish, l.FinishReason))
	}
	if l.Disconnected {
		a = append(a, attribute.Bool(attrLLMDisconnected, true))
	}
	return gapAttributes(a, &l.Gaps)
}

// gapAttributes summarises the gaps: count, mean, p50 and p99 of the kept
// ones, max of all.
func gapAttributes(a []attribute.KeyValue, g *record.Gaps) []attribute.KeyValue {
	if g.Count == 0 {
		return a
	}
	kept := slices.Clone(g.Kept)
	slices.Sort(kept)
	q := func(p float64) time.Duration { return kept[min(int(p*float64(len(kept))), len(kept)-1)] }
	return append(a,
		attribute.Int(attrITLCount, g.Count),
		attribute.Float64(attrITLMean, ms(g.Sum/time.Duration(g.Count))),
		attribute.Float64(attrITLP50, ms(q(0.50))),
		attribute.Float64(attrITLP99, ms(q(0.99))),
		attribute.Float64(attrITLMax, ms(g.Max)))
}

// llmEvents are the call span's events: the first token of a stream, and
// for a decoupled stream each request's first response (the first
// maxSpanEvents requests), with its id, wait and response count.
func llmEvents(c *record.Call) []sdktrace.Event {
	var ev []sdktrace.Event
	if l := c.LLM; l != nil && l.Streamed && l.FirstToken > 0 {
		attrs := []attribute.KeyValue{}
		if l.FirstTokenUpstream > 0 {
			attrs = append(attrs, attribute.Float64("upstream_offset_ms", ms(l.FirstTokenUpstream)))
		}
		ev = append(ev, sdktrace.Event{Name: eventFirstToken, Time: c.Start.Add(l.FirstToken), Attributes: attrs})
	}
	for _, r := range c.StreamRequests {
		if len(ev) >= maxSpanEvents {
			break
		}
		if r.Responses == 0 && !r.Error {
			continue
		}
		attrs := []attribute.KeyValue{attribute.String("request.id", r.ID)}
		if r.Responses > 0 {
			attrs = append(attrs, attribute.Float64("first_response_ms", ms(r.FirstResponse-r.Arrived)))
		}
		attrs = append(attrs, attribute.Int("responses", r.Responses), attribute.Bool("final", r.Final))
		if r.Error {
			attrs = append(attrs, attribute.Bool("error", true))
		}
		attrs = gapAttributes(attrs, &r.Gaps)
		ev = append(ev, sdktrace.Event{Name: eventRequest, Time: c.Start.Add(r.Arrived), Attributes: attrs})
	}
	return ev
}
