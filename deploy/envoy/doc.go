// Package envoy holds the example Envoy configs that put inferwatch's
// ext_proc server (package extproc, `inferwatch extproc`) behind Envoy:
// envoy.yaml, a Bootstrap fronting a KServe v2 server, and
// istio-envoyfilter.yaml, the same filter as an Istio EnvoyFilter. Its test
// validates both against Envoy's API with protojson and go-control-plane's
// generated rules; no Envoy binary runs in the tests.
package envoy
