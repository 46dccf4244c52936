package metricset

import (
	"math"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/inferwatch/inferwatch/record"
)

// llmBuckets run like durationBuckets (50 µs · 2^(i/3)) but to about 11
// minutes: inter-token gaps are sub-millisecond on a fast server, a whole
// generation can take minutes.
var llmBuckets = func() []float64 {
	b := make([]float64, 72)
	for i := range b {
		b[i] = round3(50e-6 * math.Pow(2, float64(i)/3))
	}
	return b
}()

// rateBuckets are output tokens per second: 1 to about 16 000, four per
// doubling.
var rateBuckets = func() []float64 {
	b := make([]float64, 57)
	for i := range b {
		b[i] = round3(math.Pow(2, float64(i)/4))
	}
	return b
}()

// finishReasons are the finish_reason values kept as label values; any
// other is "other" (the value comes from the server and must stay bounded).
// "error" is a generation that failed mid-stream (record.LLM.Error), as
// for a ModelStreamInfer request answered with error_message (or a
// TorchServe one with a failed status).
var finishReasons = map[string]bool{"stop": true, "length": true, "tool_calls": true, "content_filter": true, "function_call": true, "error": true}

// llmSeries are the LLM metrics of one model and version, made on the first
// generative call. Counters keyed by a label value come from the Set's
// GetOrCreate, which is safe without the Set's lock.
type llmSeries struct {
	model, version string
	ttft           *metrics.PrometheusHistogram
	ttftUpstream   *metrics.PrometheusHistogram
	itl            *metrics.PrometheusHistogram
	tpot           *metrics.PrometheusHistogram
	e2e            *metrics.PrometheusHistogram
	rate           *metrics.PrometheusHistogram
	queue          *metrics.PrometheusHistogram
	prefill        *metrics.PrometheusHistogram
	decode         *metrics.PrometheusHistogram
	promptTokens   *metrics.Counter
	outUsage       *metrics.Counter
	outCounted     *metrics.Counter
	disconnects    *metrics.Counter
}

func newLLMSeries(ms *metrics.Set, model, version string) *llmSeries {
	h := func(name string, buckets []float64, kv ...string) *metrics.PrometheusHistogram {
		return ms.GetOrCreatePrometheusHistogramExt(labelString(name, append([]string{"model", model, "version", version}, kv...)...), buckets)
	}
	c := func(name string, kv ...string) *metrics.Counter {
		return ms.GetOrCreateCounter(labelString(name, append([]string{"model", model, "version", version}, kv...)...))
	}
	return &llmSeries{
		model: model, version: version,
		ttft:         h("inferwatch_llm_time_to_first_token_seconds", llmBuckets),
		ttftUpstream: h("inferwatch_llm_time_to_first_token_upstream_seconds", llmBuckets),
		itl:          h("inferwatch_llm_inter_token_latency_seconds", llmBuckets),
		tpot:         h("inferwatch_llm_time_per_output_token_seconds", llmBuckets),
		e2e:          h("inferwatch_llm_e2e_seconds", llmBuckets),
		rate:         h("inferwatch_llm_output_tokens_per_second", rateBuckets),
		queue:        h("inferwatch_llm_stage_duration_seconds", llmBuckets, "stage", "queue"),
		prefill:      h("inferwatch_llm_stage_duration_seconds", llmBuckets, "stage", "prefill"),
		decode:       h("inferwatch_llm_stage_duration_seconds", llmBuckets, "stage", "decode"),
		promptTokens: c("inferwatch_llm_prompt_tokens_total"),
		outUsage:     c("inferwatch_llm_output_tokens_total", "source", "usage"),
		outCounted:   c("inferwatch_llm_output_tokens_total", "source", "events"),
		disconnects:  c("inferwatch_llm_client_disconnects_total"),
	}
}

// llmOf returns x's LLM metrics, making them on first use.
func (s *Set) llmOf(x *series) *llmSeries {
	s.mu.RLock()
	l := x.llm
	s.mu.RUnlock()
	if l == nil {
		s.mu.Lock()
		if x.llm == nil {
			x.llm = newLLMSeries(s.set, x.key.model, x.key.version)
		}
		l = x.llm
		s.mu.Unlock()
	}
	return l
}

// observeStreamRequests updates the LLM metrics from the requests of a
// ModelStreamInfer or TorchServe StreamPredictions stream, each a
// generation of its own: its first response is its first token (counted
// from the request's arrival), the gaps between its responses the
// inter-token latency, its responses the output tokens (source="events": a
// decoupled model may put several tokens in one response).
func (s *Set) observeStreamRequests(x *series, reqs []record.StreamRequest) {
	l := s.llmOf(x)
	for i := range reqs {
		r := &reqs[i]
		if r.Error {
			// A response carried error_message (TorchServe: a failed
			// status): the generation failed, though the stream (and so
			// the call's code) went on.
			s.set.GetOrCreateCounter(labelString("inferwatch_llm_finish_total", "model", l.model, "version", l.version, "reason", "error")).Inc()
		}
		if r.Responses == 0 {
			continue
		}
		l.ttft.Update((r.FirstResponse - r.Arrived).Seconds())
		observeGaps(l.itl, &r.Gaps)
		if r.Responses > 1 {
			l.tpot.Update((r.LastResponse - r.FirstResponse).Seconds() / float64(r.Responses-1))
			l.decode.Update((r.LastResponse - r.FirstResponse).Seconds())
		}
		l.e2e.Update((r.LastResponse - r.Arrived).Seconds())
		l.outCounted.Add(r.Responses)
	}
}

// observeLLM updates the LLM metrics of x's model from c.LLM.
func (s *Set) observeLLM(x *series, c *record.Call) {
	l := s.llmOf(x)
	m := c.LLM
	if d, ok := m.TTFT(); ok {
		l.ttft.Update(d.Seconds())
	}
	up, upOK := m.TTFTUpstream(c)
	if upOK {
		l.ttftUpstream.Update(up.Seconds())
	}
	observeGaps(l.itl, &m.Gaps)
	if d, ok := m.TPOT(); ok {
		l.tpot.Update(d.Seconds())
	}
	l.e2e.Update(c.End.Seconds())
	if r, ok := m.TokensPerSecond(c.End); ok {
		l.rate.Update(r)
	}
	// Stages: the server's queue report where it sent one; prefill is the
	// upstream share of the TTFT less that queue; decode is first to last
	// output event.
	var queue time.Duration
	for _, st := range c.Stages {
		if st.Name == "queue" {
			queue = st.Duration
			l.queue.Update(queue.Seconds())
			break
		}
	}
	if upOK && up >= queue {
		l.prefill.Update((up - queue).Seconds())
	}
	if m.Streamed && m.ContentEvents > 1 {
		l.decode.Update((m.LastToken - m.FirstToken).Seconds())
	}
	if m.PromptTokens > 0 {
		l.promptTokens.Add(m.PromptTokens)
	}
	if m.OutputTokens > 0 {
		if m.TokensEstimated {
			l.outCounted.Add(m.OutputTokens)
		} else {
			l.outUsage.Add(m.OutputTokens)
		}
	}
	if m.FinishReason != "" {
		reason := m.FinishReason
		if !finishReasons[reason] {
			reason = "other"
		}
		s.set.GetOrCreateCounter(labelString("inferwatch_llm_finish_total", "model", l.model, "version", l.version, "reason", reason)).Inc()
	}
	if m.Disconnected {
		l.disconnects.Inc()
	}
}

// observeGaps puts every inter-token gap into h: those the record kept one
// by one, the rest (past record.MaxGaps) as their mean.
func observeGaps(h *metrics.PrometheusHistogram, g *record.Gaps) {
	var kept time.Duration
	for _, d := range g.Kept {
		h.Update(d.Seconds())
		kept += d
	}
	if rest := g.Count - len(g.Kept); rest > 0 {
		mean := (g.Sum - kept).Seconds() / float64(rest)
		for range rest {
			h.Update(mean)
		}
	}
}
