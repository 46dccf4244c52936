package tritonstats

import (
	"sort"
	"time"
)

// ModelStats is one model version's activity over the last poll interval,
// for a live table.
type ModelStats struct {
	Model, Version string        // as the upstream names them (not sanitised)
	Interval       time.Duration // between the two polls the view spans
	Reset          bool          // counters went backwards: the upstream restarted, so the view covers less
	Inferences     uint64        // inferences, each request of a batch counted
	Executions     uint64        // model executions (batches)
	Stages         [numStages]StageStats
}

// StageStats is one statistics kind over the interval.
type StageStats struct {
	Name  string
	Count uint64
	Total time.Duration
	Mean  time.Duration // Total/Count, 0 without counts
}

func newModelStats(k modelKey, interval time.Duration, d counters, reset bool) ModelStats {
	ms := ModelStats{
		Model: k.name, Version: k.version, Interval: interval, Reset: reset,
		Inferences: d.inferences, Executions: d.executions,
	}
	for i, s := range d.stages {
		st := StageStats{Name: Stages[i], Count: s.count, Total: time.Duration(s.ns)}
		if s.count > 0 {
			st.Mean = time.Duration(s.ns / s.count)
		}
		ms.Stages[i] = st
	}
	return ms
}

func sortStats(s []ModelStats) {
	sort.Slice(s, func(i, j int) bool {
		if s[i].Model != s[j].Model {
			return s[i].Model < s[j].Model
		}
		return s[i].Version < s[j].Version
	})
}
