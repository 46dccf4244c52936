package proxy

import (
	"time"

	"github.com/inferwatch/inferwatch/inferapi"
	"github.com/inferwatch/inferwatch/record"
)

// sseTrack times an OpenAI-compatible event stream as it passes: each
// chunk's events are classified when the chunk is read from the upstream
// (the event-stream scanner and a small JSON walk per event, no copy of the
// stream) and their times at the client taken when the chunk has been
// flushed to it. The stream itself is never held: relay writes each chunk
// as it came.
type sseTrack struct {
	scan   inferapi.SSEScanner
	llm    record.LLM
	usage  bool                    // some event carried usage
	server inferapi.ServerLLMTimes // the last per-request metrics the server sent

	chunkContent int           // content events completed by the chunk in hand
	lastOut      time.Duration // when the previous content event reached the client
}

// read classifies the events the chunk completes; at is its arrival.
func (t *sseTrack) read(p []byte, at time.Duration) {
	t.chunkContent = 0
	t.scan.Feed(p, func(data []byte, cut bool) {
		ev, err := inferapi.ParseOpenAIEvent(data)
		if err != nil && !cut {
			return // not a chunk we know; it still went through
		}
		if ev.Content || (cut && err != nil) {
			// A cut event is an oversized output chunk.
			t.chunkContent++
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
		if ev.Server != (inferapi.ServerLLMTimes{}) {
			t.server = ev.Server
		}
	})
}

// written takes the client-side times of the chunk's content events: all
// reached the client together, at out.
func (t *sseTrack) written(out time.Duration) {
	for range t.chunkContent {
		if t.llm.ContentEvents == 0 {
			t.llm.FirstToken = out
		} else {
			t.llm.Gaps.Add(out - t.lastOut)
		}
		t.llm.ContentEvents++
		t.lastOut = out
	}
	if t.chunkContent > 0 {
		t.llm.LastToken = out
	}
	t.chunkContent = 0
}

// finish puts the timing into the record.
func (t *sseTrack) finish(c *record.Call, disconnected bool) {
	l := t.llm
	l.Streamed = true
	l.Disconnected = disconnected
	if !t.usage {
		l.OutputTokens, l.TokensEstimated = l.ContentEvents, true
	}
	c.LLM = &l
	c.Stages = t.server.Stages(c.Stages, inferapi.StageSourceVLLM)
}
