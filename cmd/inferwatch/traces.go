package main

import (
	"flag"
	"io"

	"github.com/inferwatch/inferwatch/internal/cmdline"

	"github.com/inferwatch/inferwatch/config"
	"github.com/inferwatch/inferwatch/tracing"
)

// runTraces prints the last kept traces of a running sidecar as trees.
func runTraces(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("traces", flag.ContinueOnError)
	admin := fs.String("admin", "http://"+config.DefaultAdminListen, "the sidecar's admin URL")
	limit := fs.Int("limit", 10, "how many traces, newest first")
	if err := cmdline.Parse(fs, args); err != nil {
		return err
	}
	return tracing.FetchAndRender(*admin, out, *limit)
}
