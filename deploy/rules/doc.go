// Package rules holds no code: this directory carries the Prometheus /
// vmalert rules over the sidecar's histograms (inferwatch-rules.yaml) and
// their promtool unit tests (inferwatch-rules.test.yaml). The package's Go
// tests check both with promtool and vmalert, keep the alert names in step
// with package alerting, and load the rules into a real Prometheus scraping
// a real metric set (docs/rules.md).
package rules
