package modelserver

import (
	"sync"
	"time"

	"github.com/inferwatch/inferwatch/proto/inference"
)

// stats is one model's cumulative Triton-style statistics since start.
type stats struct {
	mu                             sync.Mutex
	lastInference                  time.Time
	inferenceCount, executionCount uint64
	success, fail                  duration
	stage                          [numStages]duration
}

// duration is a Triton StatisticDuration: a count and its total time.
type duration struct {
	Count uint64 `json:"count"`
	NS    uint64 `json:"ns"`
}

func (d *duration) add(v time.Duration) {
	d.Count++
	d.NS += uint64(max(v, 0))
}

// record adds one finished request: total is its whole time in the server
// core, t its stage times, batch its batch size. As in Triton, stage times
// and counts accrue for successful requests only.
func (st *stats) record(end time.Time, total time.Duration, t timing, batch int, ok bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.lastInference = end
	if !ok {
		st.fail.add(total)
		return
	}
	st.success.add(total)
	for i := range st.stage {
		st.stage[i].add(t.d[i])
	}
	st.inferenceCount += uint64(max(batch, 0))
	st.executionCount++
}

// modelStatsJSON is the Triton HTTP statistics shape of one model.
type modelStatsJSON struct {
	Name           string             `json:"name"`
	Version        string             `json:"version"`
	LastInference  uint64             `json:"last_inference"`
	InferenceCount uint64             `json:"inference_count"`
	ExecutionCount uint64             `json:"execution_count"`
	InferenceStats inferenceStatsJSON `json:"inference_stats"`
}

type inferenceStatsJSON struct {
	Success       duration `json:"success"`
	Fail          duration `json:"fail"`
	Queue         duration `json:"queue"`
	ComputeInput  duration `json:"compute_input"`
	ComputeInfer  duration `json:"compute_infer"`
	ComputeOutput duration `json:"compute_output"`
	CacheHit      duration `json:"cache_hit"`
	CacheMiss     duration `json:"cache_miss"`
}

func (m *servedModel) statsJSON() modelStatsJSON {
	st := &m.stats
	st.mu.Lock()
	defer st.mu.Unlock()
	var last uint64
	if !st.lastInference.IsZero() {
		last = uint64(st.lastInference.UnixMilli())
	}
	return modelStatsJSON{
		Name: m.name, Version: m.version,
		LastInference:  last,
		InferenceCount: st.inferenceCount,
		ExecutionCount: st.executionCount,
		InferenceStats: inferenceStatsJSON{
			Success:       st.success,
			Fail:          st.fail,
			Queue:         st.stage[stageQueue],
			ComputeInput:  st.stage[stagePreprocess],
			ComputeInfer:  st.stage[stageInfer],
			ComputeOutput: st.stage[stagePostprocess],
		},
	}
}

func (m *servedModel) statsProto() *inference.ModelStatistics {
	j := m.statsJSON()
	d := func(v duration) *inference.StatisticDuration {
		return &inference.StatisticDuration{Count: v.Count, Ns: v.NS}
	}
	s := j.InferenceStats
	return &inference.ModelStatistics{
		Name: j.Name, Version: j.Version,
		LastInference:  j.LastInference,
		InferenceCount: j.InferenceCount,
		ExecutionCount: j.ExecutionCount,
		InferenceStats: &inference.InferStatistics{
			Success: d(s.Success), Fail: d(s.Fail), Queue: d(s.Queue),
			ComputeInput: d(s.ComputeInput), ComputeInfer: d(s.ComputeInfer), ComputeOutput: d(s.ComputeOutput),
			CacheHit: d(s.CacheHit), CacheMiss: d(s.CacheMiss),
		},
	}
}

// statsFor returns the statistics of one model, or of all when name is "".
func (s *Server) statsFor(name, version string) ([]*servedModel, error) {
	if name == "" {
		return s.models, nil
	}
	m, err := s.findAny(name, version)
	if err != nil {
		return nil, err
	}
	return []*servedModel{m}, nil
}
