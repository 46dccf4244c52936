package record

import "time"

// LLM is the token timing of one generative call, measured where the
// sidecar sees each server-sent event: read from the upstream, and written
// (flushed) to the client. Offsets are from Call.Start, like the phases.
// Text is never held: only which events carried output.
type LLM struct {
	// FirstToken is when the first event carrying output reached the
	// client; FirstTokenUpstream when it arrived from the upstream.
	FirstToken         time.Duration
	FirstTokenUpstream time.Duration
	// LastToken is when the last event carrying output reached the client.
	LastToken time.Duration

	// ContentEvents counts events that carried output; Gaps are the times
	// between consecutive ones as written to the client (the inter-token
	// latency).
	ContentEvents int
	Gaps          Gaps

	PromptTokens int
	OutputTokens int
	// TokensEstimated says OutputTokens was counted from content events,
	// the server having sent no usage (stream_options.include_usage unset).
	TokensEstimated bool
	// FinishReason is the server's finish_reason, or "error" when Error.
	FinishReason string
	// Error: the stream carried an error event after its 200 status (an
	// OpenAI error chunk, a Responses API error or response.failed event,
	// a Triton generate error): the generation failed, which the status
	// could no longer say. Call.Failed counts it.
	Error    bool
	Streamed bool // server-sent events; false for a whole JSON answer
	// Whole, for an answer that was not streamed: the request handed over
	// until the answer's last byte from the upstream.
	Whole time.Duration
	// Disconnected: the client went away mid-stream.
	Disconnected bool
}

// MaxGaps bounds the gaps a record keeps one by one (a long generation has
// thousands); the counters still cover every one.
const MaxGaps = 8192

// Gaps are the intervals between consecutive events of a stream: the first
// MaxGaps kept, and count, sum and maximum of all.
type Gaps struct {
	Kept  []time.Duration
	Count int
	Sum   time.Duration
	Max   time.Duration
}

// Add records one gap.
func (g *Gaps) Add(d time.Duration) {
	if len(g.Kept) < MaxGaps {
		g.Kept = append(g.Kept, d)
	}
	g.Count++
	g.Sum += d
	g.Max = max(g.Max, d)
}

// StreamRequest is one request of an inference stream (Triton's
// ModelStreamInfer, decoupled models; TorchServe's StreamPredictions and
// StreamPredictions2) and the responses matched to it by id (TorchServe's
// sequenceId). Offsets are from the call's Start.
type StreamRequest struct {
	ID            string
	Arrived       time.Duration // the request message read from the client
	FirstResponse time.Duration // its first response read from the upstream
	LastResponse  time.Duration
	Responses     int  // output responses: a failed one (Error) is not counted
	Gaps          Gaps // between its responses
	Final         bool // a response carried triton_final_response (TorchServe has no such flag)
	Error         bool // a response carried error_message, or a TorchServe status other than OK
}

// MaxStreamRequests bounds the requests a stream's record describes; more
// are counted in Call.StreamRequestsDropped.
const MaxStreamRequests = 256

// TTFT is the time to first token as the client sees it at the sidecar:
// request headers received until the first output event was flushed to
// the client. Only a streamed answer has one.
func (l *LLM) TTFT() (time.Duration, bool) {
	return l.FirstToken, l.Streamed && l.FirstToken > 0
}

// TTFTUpstream is the upstream's share of the TTFT: the request handed
// over (c's UpstreamSent, or UpstreamStart while the request still flowed)
// until the first output event arrived from the upstream.
func (l *LLM) TTFTUpstream(c *Call) (time.Duration, bool) {
	if !l.Streamed {
		return 0, false
	}
	return c.SinceHandedOver(l.FirstTokenUpstream)
}

// TPOT is the time per output token after the first: for a stream, first
// to last output event at the client over the tokens between them; for a
// whole answer, Whole over all its tokens.
func (l *LLM) TPOT() (time.Duration, bool) {
	if !l.Streamed {
		if l.OutputTokens <= 0 || l.Whole <= 0 {
			return 0, false
		}
		return l.Whole / time.Duration(l.OutputTokens), true
	}
	if l.OutputTokens < 2 || l.LastToken <= l.FirstToken {
		return 0, false
	}
	return (l.LastToken - l.FirstToken) / time.Duration(l.OutputTokens-1), true
}

// TokensPerSecond is output tokens over the call's whole time.
func (l *LLM) TokensPerSecond(total time.Duration) (float64, bool) {
	if l.OutputTokens <= 0 || total <= 0 {
		return 0, false
	}
	return float64(l.OutputTokens) / total.Seconds(), true
}
