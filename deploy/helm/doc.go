// Package helm holds no code: this directory carries the inferwatch Helm
// chart (inferwatch/), the sidecar injector's webhook, its certificates and
// RBAC. The package's Go tests run the real helm (bin/helm, built from the
// tools/helm module so helm never enters the project's go.mod): lint, render
// with default and cert-manager values compared to golden files, strict-decode
// every rendered object into its k8s.io/api type, and check that bad values
// fail on values.schema.json (docs/kubernetes.md). With monitoring.* enabled
// the chart also ships the rules and the dashboard; inferwatch/files holds
// copies of them, refreshed by go generate (the test fails on a stale copy).
package helm

//go:generate cp ../rules/inferwatch-rules.yaml inferwatch/files/inferwatch-rules.yaml
//go:generate cp ../grafana/inferwatch.json inferwatch/files/inferwatch.json
//go:generate cp ../grafana/inferwatch-fleet.json inferwatch/files/inferwatch-fleet.json
