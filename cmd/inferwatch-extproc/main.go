// Command inferwatch-extproc is the Envoy ext_proc server (see extproc/):
// Envoy proxies, it observes. It is a binary of its own so that
// go-control-plane's generated packages, linked and initialised in every
// process that imports them, stay out of the sidecar: `inferwatch extproc`
// runs this binary when it lies beside inferwatch or on PATH.
package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
)

func main() {
	if err := runExtproc(os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "inferwatch extproc:", err)
		os.Exit(1)
	}
}

func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l}))
}

// labelFlags collects a repeated name=value flag.
type labelFlags map[string]string

func (l labelFlags) String() string { return fmt.Sprint(map[string]string(l)) }
func (l labelFlags) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("want name=value, got %q", v)
	}
	l[k] = val
	return nil
}
