// Package examples holds no code: this directory carries the fronting
// examples (triton/, tfserving/, kserve/ and the older hand-wired
// manifests). The package's test decodes them into their k8s.io/api types
// and runs the Triton and TF Serving pod templates through the injector
// (package inject).
package examples
