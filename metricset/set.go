package metricset

import (
	"sync"

	"github.com/VictoriaMetrics/metrics"
	"github.com/inferwatch/inferwatch/record"
)

// Options bounds the label values a Set admits.
type Options struct {
	MaxModels  int // distinct (model, version) label pairs kept; beyond it they become model="other",version="other". Default 100.
	MaxStages  int // distinct server-stage names; overflow "other". Default 16.
	MaxMethods int // distinct method names (request-derived for unknown APIs); overflow "other". Default 32.
}

// Caps on label values that come from the fronts' own constants: they are
// small sets, capped only so that a bug cannot become a cardinality blow-up.
const (
	maxProtocols = 8
	maxAPIs      = 16
	maxCodes     = 64 // gRPC's 17 codes, or the HTTP statuses an upstream uses
	maxKinds     = 16
)

func (o Options) withDefaults() Options {
	if o.MaxModels <= 0 {
		o.MaxModels = 100
	}
	if o.MaxStages <= 0 {
		o.MaxStages = 16
	}
	if o.MaxMethods <= 0 {
		o.MaxMethods = 32
	}
	return o
}

// Set is the sidecar's metric set: a record.Sink that keeps the
// inferwatch_* series up to date. It is safe for concurrent use.
type Set struct {
	set  *metrics.Set
	help helpTable

	// mu guards the cappers, the series map and the lazily created handles
	// inside each series: read-locked to find handles, write-locked to make
	// them.
	mu        sync.RWMutex
	protocols capper[string]
	apis      capper[string]
	models    capper[modelVersion]
	methods   capper[string]
	codes     capper[string]
	kinds     capper[string]
	stages    capper[string]
	series    map[seriesKey]*series

	dropped     *metrics.Counter
	clientRTT   *metrics.PrometheusHistogram
	upstreamRTT *metrics.PrometheusHistogram
}

var _ record.Sink = (*Set)(nil)

// New returns an empty Set. It switches on the library's # HELP/# TYPE
// exposition, which VictoriaMetrics/metrics keeps as a process-wide switch.
func New(o Options) *Set {
	o = o.withDefaults()
	metrics.ExposeMetadata(true)
	ms := metrics.NewSet()
	return &Set{
		set:         ms,
		protocols:   newStringCapper(maxProtocols),
		apis:        newStringCapper(maxAPIs),
		models:      newModelCapper(o.MaxModels),
		methods:     newStringCapper(o.MaxMethods),
		codes:       newStringCapper(maxCodes),
		kinds:       newStringCapper(maxKinds),
		stages:      newStringCapper(o.MaxStages),
		series:      make(map[seriesKey]*series),
		dropped:     ms.NewCounter("inferwatch_records_dropped_total"),
		clientRTT:   ms.NewPrometheusHistogramExt(labelString("inferwatch_network_rtt_seconds", "side", "client"), durationBuckets),
		upstreamRTT: ms.NewPrometheusHistogramExt(labelString("inferwatch_network_rtt_seconds", "side", "upstream"), durationBuckets),
	}
}

// Metrics returns the underlying set, for other packages to register their
// own metrics so that they are scraped and pushed together with these.
func (s *Set) Metrics() *metrics.Set { return s.set }

// RecordDropped counts a call record the pipeline dropped.
func (s *Set) RecordDropped() { s.dropped.Inc() }

// ModelLabels returns the label values of a (model, version) pair as the
// call metrics have them: sanitised, and folded into other/other beyond
// Options.MaxModels. Other packages that label series by model use it, so
// one model has one label value everywhere and shares one cap.
func (s *Set) ModelLabels(model, version string) (string, string) {
	s.mu.RLock()
	mv, ok := s.models.get(modelVersion{model, version}, false)
	s.mu.RUnlock()
	if !ok {
		s.mu.Lock()
		mv, _ = s.models.get(modelVersion{model, version}, true)
		s.mu.Unlock()
	}
	return mv.model, mv.version
}

// DurationBuckets returns the bucket bounds of the call duration histograms,
// for other packages' duration histograms: one set of bounds aggregates
// across families and pods.
func DurationBuckets() []float64 { return append([]float64(nil), durationBuckets...) }
