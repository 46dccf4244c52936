// Package grafana holds no code: this directory carries the Grafana
// dashboard over the sidecars' metrics (inferwatch.json). The package's test
// checks it is a Grafana dashboard, that every query is valid PromQL (parsed
// by the real Prometheus parser, through promtool check rules) and that it
// names only metrics the docs list (docs/metrics.md and the pages it
// delegates to: docs/gpu.md, docs/bpf.md).
package grafana
