// Package metricset is the metrics sink of the call pipeline: it turns each
// finished record.Call into Prometheus-format counters and classic `le`
// histograms, served on /metrics and optionally pushed to VictoriaMetrics.
//
// Fronts fill a record.Call, the record.Pipeline hands it to the sinks off the
// data path, and Set.Observe is one of those sinks. Request-derived label
// values are sanitised and capped so that a client cannot blow up the number
// of series, and metric handles are cached per label tuple so that Observe
// does not allocate once a tuple has been seen. Other packages register their
// own metrics (in-flight gauges, upstream readiness, Triton statistics) in
// the same metrics.Set, obtained from Set.Metrics, so that one scrape or push
// carries everything.
package metricset
