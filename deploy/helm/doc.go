// Package helm holds no code: this directory carries the inferwatch Helm
// chart (inferwatch/), the sidecar injector's webhook, its certificates and
// RBAC, and optionally (monitoring.*) PodMonitors, the rules, the dashboards
// and inferwatch baseline. The package's Go tests run the real helm
// (bin/helm, built from the tools/helm module so helm never enters the
// project's go.mod): lint, render each value set compared to golden files,
// strict-decode every rendered object into its k8s.io/api or Prometheus
// Operator type, dry-run them all on a real kube-apiserver, and check that
// bad values fail on values.schema.json (docs/kubernetes.md). inferwatch/files
// holds copies of the rules and dashboards, refreshed by go generate (the
// test fails on a stale copy).
package helm

//go:generate cp ../rules/inferwatch-rules.yaml inferwatch/files/inferwatch-rules.yaml
//go:generate cp ../grafana/inferwatch.json inferwatch/files/inferwatch.json
//go:generate cp ../grafana/inferwatch-fleet.json inferwatch/files/inferwatch-fleet.json
