// Command inferwatch is the sidecar and its tools in one binary:
//
//	inferwatch proxy  --grpc-listen :8001 --grpc-upstream 127.0.0.1:18001 ...
//	inferwatch extproc --listen 127.0.0.1:9911  (Envoy ext_proc server, observe only)
//	inferwatch demo   (model server + sidecar + load + live table)
//	inferwatch modelserver  (the demo's model server alone)
//	inferwatch load   (open-loop load generator)
//	inferwatch inject --tls-cert ... --tls-key ...  (Kubernetes sidecar injector webhook)
//
// extproc and inject are binaries of their own (cmd/inferwatch-extproc,
// cmd/inferwatch-inject; see sibling.go), run in place of this one.
package main

import (
	"fmt"
	"os"

	"github.com/inferwatch/inferwatch/internal/cmdline"
)

var version = "dev"

const usage = `inferwatch — measures every inference call on its way to the model server.

Usage:
  inferwatch proxy [flags]        run the sidecar in front of an inference server
  inferwatch extproc [flags]      measure behind Envoy: an ext_proc server that observes only
  inferwatch demo [flags]         model server + sidecar + live load + live figures
  inferwatch modelserver [flags]  run the demo's KServe v2 model server alone
  inferwatch load [flags]         drive open-loop load at an address
  inferwatch traces [flags]       print the last kept traces of a running sidecar as trees
  inferwatch diagnose [flags]     rank the causes of a latency move or an alert from a running sidecar
  inferwatch detect [flags] FILE  run the baseline's anomaly detectors over a NAB-format CSV
  inferwatch baseline [flags]     fit every model's baseline from a query API, write bands back
  inferwatch inject [flags]       serve the Kubernetes sidecar injector (mutating admission webhook)
  inferwatch version

extproc and inject run the binaries inferwatch-extproc and inferwatch-inject,
found beside inferwatch or on PATH (go build -o DIR ./cmd/...).
Run 'inferwatch COMMAND -h' for a command's flags.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	args := os.Args[2:]
	switch os.Args[1] {
	case "proxy":
		err = runProxy(args, os.Stderr)
	case "extproc":
		err = execSibling("inferwatch-extproc", args)
	case "demo":
		err = runDemo(args, os.Stdout, os.Stderr)
	case "modelserver":
		err = runModelServer(args, os.Stderr)
	case "load":
		err = runLoad(args, os.Stdout)
	case "traces":
		err = runTraces(args, os.Stdout)
	case "diagnose":
		err = runDiagnose(args, os.Stdout, os.Stderr)
	case "detect":
		err = runDetect(args, os.Stdout, os.Stderr)
	case "baseline":
		err = runBaseline(args, os.Stderr)
	case "inject":
		err = execSibling("inferwatch-inject", args)
	case neighbourCommand: // not in usage: the demo's --inject-neighbour child
		err = runNeighbour(args)
	case "version", "-version", "--version":
		fmt.Println("inferwatch", version)
	case "help", "-h", "--help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "inferwatch: unknown command %q\n\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	cmdline.Exit("inferwatch", err)
}
