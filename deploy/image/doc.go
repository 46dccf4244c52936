// Package image holds the container image's recipe (Containerfile): the
// image the chart's injector and baseline Deployments and every injected
// sidecar run, so where the call pipeline is deployed by Kubernetes it
// starts from here. scripts/image.sh builds it; this package's test builds
// it the same way and runs it with the container specs the injector writes
// and the chart renders, under their security contexts, in front of a model
// server sharing its network namespace as a pod's containers do.
package image
