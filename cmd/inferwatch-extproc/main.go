// Command inferwatch-extproc is the Envoy ext_proc server (see extproc/):
// Envoy proxies, it observes. It is a binary of its own so that
// go-control-plane's generated packages, linked and initialised in every
// process that imports them, stay out of the sidecar: `inferwatch extproc`
// runs this binary when it lies beside inferwatch or on PATH.
package main

import (
	"os"

	"github.com/inferwatch/inferwatch/internal/cmdline"
)

func main() {
	cmdline.Exit("inferwatch extproc", runExtproc(os.Args[1:], os.Stderr))
}
