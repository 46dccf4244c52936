package windowstats

import (
	"math"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/record"
)

// TestLLMParts: a streamed generation's TTFT and gaps, and each
// ModelStreamInfer request's first response and gaps, become the llm_ttft
// and llm_itl parts of the window.
func TestLLMParts(t *testing.T) {
	s := mustNew(t, Options{})
	c := endingAt("llm", t0.Add(time.Second), 500*time.Millisecond)
	c.LLM = &record.LLM{Streamed: true, FirstToken: 40 * time.Millisecond, ContentEvents: 3}
	c.LLM.Gaps.Add(10 * time.Millisecond)
	c.LLM.Gaps.Add(20 * time.Millisecond)
	s.Observe(c)
	g := endingAt("llm", t0.Add(2*time.Second), 300*time.Millisecond)
	r := record.StreamRequest{Arrived: 10 * time.Millisecond, FirstResponse: 70 * time.Millisecond, Responses: 2}
	r.Gaps.Add(30 * time.Millisecond)
	g.StreamRequests = []record.StreamRequest{r, {Arrived: time.Millisecond}} // the second never answered
	s.Observe(g)
	parts := map[string]PartView{}
	for _, p := range only(t, s).Current.Stages {
		parts[p.Name] = p
	}
	ttft, itl := parts[PartTTFT], parts[PartITL]
	if ttft.Count != 2 || math.Abs(ttft.Mean-0.050) > 1e-9 {
		t.Errorf("llm_ttft %+v, want 2 of mean 50ms", ttft)
	}
	if itl.Count != 3 || math.Abs(itl.Mean-0.020) > 1e-9 {
		t.Errorf("llm_itl %+v, want 3 of mean 20ms", itl)
	}
}

// TestLLMPartsKeepTheirSlots: a server that reports as many stage names as
// the cap allows (or names one llm_ttft) must not fold the sidecar's own
// TTFT into "other", where the TTFT SLO rule would no longer see it.
func TestLLMPartsKeepTheirSlots(t *testing.T) {
	s := mustNew(t, Options{MaxStages: 4})
	c := endingAt("llm", t0.Add(time.Second), 500*time.Millisecond)
	for _, n := range []string{"queue", "tokenize", "prefill", "decode", "detok", "llm_ttft"} {
		c.Stages = append(c.Stages, record.Stage{Name: n, Duration: time.Second})
	}
	s.Observe(c)
	g := endingAt("llm", t0.Add(2*time.Second), 300*time.Millisecond)
	g.LLM = &record.LLM{Streamed: true, FirstToken: 40 * time.Millisecond, ContentEvents: 3}
	g.LLM.Gaps.Add(10 * time.Millisecond)
	s.Observe(g)
	parts := map[string]PartView{}
	for _, p := range only(t, s).Current.Stages {
		parts[p.Name] = p
	}
	if ttft := parts[PartTTFT]; ttft.Count != 1 || math.Abs(ttft.Mean-0.040) > 1e-9 {
		t.Errorf("llm_ttft %+v, want the one generation's 40ms (parts %v)", ttft, parts)
	}
	if itl := parts[PartITL]; itl.Count != 1 {
		t.Errorf("llm_itl %+v, want one gap", itl)
	}
}
