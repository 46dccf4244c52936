// Command inferwatch-inject serves the Kubernetes sidecar injector, a
// mutating admission webhook (see inject/). It is a binary of its own so
// that k8s.io/api's packages, linked and initialised in every process that
// imports them, stay out of the sidecar: `inferwatch inject` runs this
// binary when it lies beside inferwatch or on PATH.
package main

import (
	"os"

	"github.com/inferwatch/inferwatch/internal/cmdline"
)

func main() {
	cmdline.Exit("inferwatch inject", runInject(os.Args[1:], os.Stderr))
}
