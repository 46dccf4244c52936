// Package rules holds no code: this directory carries the Prometheus /
// vmalert rules over the sidecar's histograms (inferwatch-rules.yaml) and
// their promtool unit tests (inferwatch-rules.test.yaml). The package's Go
// tests check both with promtool and vmalert, keep the alert names in step
// with package alerting, load the rules into a real Prometheus scraping a
// real metric set, and evaluate the namespace joins in a real
// VictoriaMetrics (docs/rules.md).
package rules
