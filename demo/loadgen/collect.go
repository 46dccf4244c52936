package loadgen

import (
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// maxSamples bounds the latency samples kept; beyond it a uniform
// reservoir keeps percentiles exact for short runs and unbiased for long.
const maxSamples = 1_000_000

// collector tallies results from concurrent calls.
type collector struct {
	mu       sync.Mutex
	onResult func(Result)
	start    time.Time
	lastEnd  time.Time
	s        Summary
	samples  []time.Duration
	seen     int // successful calls offered to the reservoir
	rng      *rand.Rand
	firstErr error
}

func newCollector(onResult func(Result)) *collector {
	return &collector{
		onResult: onResult,
		s:        Summary{ByCode: map[string]int{}},
		rng:      rand.New(rand.NewPCG(1, 2)),
	}
}

func (c *collector) sent() {
	c.mu.Lock()
	c.s.Sent++
	c.mu.Unlock()
}

func (c *collector) late() {
	c.mu.Lock()
	c.s.Late++
	c.mu.Unlock()
}

func (c *collector) add(r Result) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.s.ByCode[r.Code]++
	if r.Err != nil {
		c.s.Failed++
		if c.firstErr == nil {
			c.firstErr = r.Err
		}
	} else {
		c.s.OK++
		c.lastEnd = time.Now()
		c.s.Max = max(c.s.Max, r.Latency)
		c.seen++
		if len(c.samples) < maxSamples {
			c.samples = append(c.samples, r.Latency)
		} else if j := c.rng.IntN(c.seen); j < maxSamples {
			c.samples[j] = r.Latency
		}
	}
	if c.onResult != nil {
		c.onResult(r)
	}
}

// summary computes the totals once all calls have finished.
func (c *collector) summary() (Summary, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.s
	slices.Sort(c.samples)
	s.P50 = percentile(c.samples, 0.50)
	s.P90 = percentile(c.samples, 0.90)
	s.P99 = percentile(c.samples, 0.99)
	if el := c.lastEnd.Sub(c.start); s.OK > 0 && el > 0 {
		s.Throughput = float64(s.OK) / el.Seconds()
	}
	return s, c.firstErr
}

// percentile is the nearest-rank percentile of sorted samples.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(rank, 0), len(sorted)-1)]
}
