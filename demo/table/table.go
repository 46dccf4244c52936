// Package table is the demo's live terminal view: a record.Sink that folds
// finished call records into per-model, per-second rows (rate, latency
// percentiles, mean phases and server stages, errors) and prints them as an
// aligned plain-text table on every tick.
package table

import (
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/inferwatch/inferwatch/record"
)

// Bounds that keep memory flat whatever the traffic.
const (
	maxSamples  = 100_000 // latency samples per model per second
	maxModels   = 64      // distinct model rows; the rest share otherModel
	maxStages   = 8       // distinct server stage columns
	keepSeconds = 4       // seconds of buckets kept per model
	otherModel  = "(other)"
	noModel     = "unknown"
)

// Table aggregates call records per model and second. Observe is safe for
// concurrent use.
type Table struct {
	w io.Writer

	mu       sync.Mutex
	models   map[string]*[keepSeconds]bucket // ring indexed by second
	stages   []string                        // stage columns, in first-seen order
	rng      *rand.Rand
	sections []section
	llm      bool // some generative call was seen: TTFT and ITL columns
}

type section struct {
	name string
	f    func() []string
}

// bucket is one model's calls that completed within one second.
type bucket struct {
	sec      int64 // Unix second; buckets of other seconds are stale
	count    int
	errors   int
	totals   []time.Duration // at most maxSamples, a uniform reservoir
	phaseSum [len(record.Phases)]time.Duration
	phaseN   [len(record.Phases)]int
	stageSum map[string]time.Duration
	stageN   map[string]int
	ttft     []time.Duration // generative calls: time to first token, at most maxSamples
	itl      []time.Duration // and inter-token gaps
}

// New returns a Table that Run prints to w.
func New(w io.Writer) *Table {
	return &Table{
		w:      w,
		models: map[string]*[keepSeconds]bucket{},
		rng:    rand.New(rand.NewPCG(1, 2)),
	}
}

// AddSection appends a named block of lines, produced by f at each render,
// below the table: room for later sources such as Triton statistics or
// run-queue delay. f runs without the table's lock held.
func (t *Table) AddSection(name string, f func() []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sections = append(t.sections, section{name: name, f: f})
}

// Observe adds a finished call to the second it completed in. It copies
// what it needs and keeps nothing of c.
func (t *Table) Observe(c *record.Call) {
	end := time.Now()
	if !c.Start.IsZero() {
		end = c.Start.Add(c.End)
	}
	sec := end.Unix()
	name := c.Model
	if name == "" {
		name = noModel
	}

	t.mu.Lock()
	defer t.mu.Unlock()
	ring, ok := t.models[name]
	if !ok {
		if len(t.models) >= maxModels {
			name = otherModel
			ring = t.models[name]
		}
		if ring == nil {
			ring = new([keepSeconds]bucket)
			t.models[name] = ring
		}
	}
	b := &ring[int(sec%keepSeconds+keepSeconds)%keepSeconds]
	if b.sec != sec {
		if sec < b.sec {
			return // older than the ring remembers
		}
		*b = bucket{sec: sec, stageSum: map[string]time.Duration{}, stageN: map[string]int{}}
	}

	b.count++
	if c.Failed() || c.DecodeFail {
		b.errors++
	}
	if total := c.Total(); len(b.totals) < maxSamples {
		b.totals = append(b.totals, total)
	} else if j := t.rng.IntN(b.count); j < maxSamples {
		b.totals[j] = total
	}
	for i, p := range record.Phases {
		if d, ok := c.Phase(p); ok {
			b.phaseSum[i] += d
			b.phaseN[i]++
		}
	}
	if c.LLM != nil {
		if d, ok := c.LLM.TTFT(); ok {
			t.llm = true
			b.ttft = appendBounded(b.ttft, d)
		}
		for _, g := range c.LLM.Gaps.Kept {
			b.itl = appendBounded(b.itl, g)
		}
	}
	for _, r := range c.StreamRequests {
		if r.Responses > 0 {
			t.llm = true
			b.ttft = appendBounded(b.ttft, r.FirstResponse-r.Arrived)
			for _, g := range r.Gaps.Kept {
				b.itl = appendBounded(b.itl, g)
			}
		}
	}
	for _, s := range c.Stages {
		if !t.knownStage(s.Name) {
			continue
		}
		b.stageSum[s.Name] += s.Duration
		b.stageN[s.Name]++
	}
}

// knownStage reports whether name has a column, adding one while there is
// room. The caller holds t.mu.
func (t *Table) knownStage(name string) bool {
	for _, s := range t.stages {
		if s == name {
			return true
		}
	}
	if len(t.stages) >= maxStages || name == "" {
		return false
	}
	t.stages = append(t.stages, name)
	return true
}

func appendBounded(s []time.Duration, d time.Duration) []time.Duration {
	if len(s) < maxSamples {
		s = append(s, d)
	}
	return s
}
