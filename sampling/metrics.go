package sampling

import (
	"sync"

	"github.com/VictoriaMetrics/metrics"
	"github.com/inferwatch/inferwatch/metricset"
)

// samplerMetrics are the sampler's inferwatch_traces_* series. Counters are
// GetOrCreate so that samplers sharing a set (a reload) share them.
type samplerMetrics struct {
	set             *metrics.Set
	considered      *metrics.Counter
	headKept        *metrics.Counter
	tailKept        [numReasons]*metrics.Counter
	budgetExhausted *metrics.Counter

	mu     sync.Mutex
	gauges map[string]bool // probability gauges this sampler registered
}

func newSamplerMetrics(set *metrics.Set) *samplerMetrics {
	m := &samplerMetrics{
		set:             set,
		considered:      set.GetOrCreateCounter("inferwatch_traces_considered_total"),
		headKept:        set.GetOrCreateCounter("inferwatch_traces_head_kept_total"),
		budgetExhausted: set.GetOrCreateCounter("inferwatch_traces_tail_budget_exhausted_total"),
		gauges:          make(map[string]bool),
	}
	for r, name := range reasonNames {
		m.tailKept[r] = set.GetOrCreateCounter(`inferwatch_traces_tail_kept_total{reason="` + name + `"}`)
	}
	return m
}

// addGauge registers c's probability gauge and returns its name, or "" when
// another key already shows under the same sanitised labels (the first one
// keeps the series).
func (m *samplerMetrics) addGauge(c *controller) string {
	// Sanitised values hold only [A-Za-z0-9_.:/-]: nothing to escape.
	name := `inferwatch_traces_probability{route="` + metricset.SanitizeLabelValue(c.key.Route) +
		`",model="` + metricset.SanitizeLabelValue(c.key.Model) + `"}`
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.gauges[name] {
		return ""
	}
	m.gauges[name] = true
	m.set.GetOrCreateGauge(name, func() float64 { return c.state.Load().p })
	return name
}

func (m *samplerMetrics) removeGauge(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.gauges, name)
	m.set.UnregisterMetric(name)
}
