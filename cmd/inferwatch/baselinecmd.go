package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/inferwatch/inferwatch/internal/cmdline"

	"github.com/inferwatch/inferwatch/baseline/fleet"
)

// runBaseline is the baseline command: the fleet-wide fit on a schedule.
func runBaseline(args []string, stderr io.Writer) error {
	o, every, once, err := baselineOptions(args, stderr)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var runErr error
	run := func() bool {
		res, err := fleet.Run(ctx, o, time.Now())
		runErr = err
		ok := err == nil
		if err != nil && !once {
			fmt.Fprintln(stderr, "baseline:", err)
		}
		for _, r := range res {
			if r.Err != nil { // too little history: a retry would not help
				fmt.Fprintf(stderr, "baseline: %s: %d points: %v\n", r.Name(), r.Points, r.Err)
				continue
			}
			fmt.Fprintf(stderr, "baseline: %s: %d points, %s model, bands written for %v\n", r.Name(), r.Points, r.Kind, o.Horizon)
		}
		return ok
	}
	if once {
		run()
		return runErr
	}
	schedule(ctx, every, baselineRetry, run)
	return nil
}

// baselineRetry is the first wait before a failed run is tried again.
const baselineRetry = 30 * time.Second

// schedule calls run every period until ctx ends. A run that fails is
// tried again after retry, doubling up to period: the bands written last
// reach only --horizon ahead (by default one period), so waiting a whole
// period after a query API restart let them run out, and the rules on them
// went silent, for up to an hour.
func schedule(ctx context.Context, period, retry time.Duration, run func() bool) {
	wait := retry
	for {
		next := period
		if !run() {
			next, wait = min(wait, period), min(2*wait, period)
		} else {
			wait = retry
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(next):
		}
	}
}

// baselineOptions parses and checks the baseline command's flags.
func baselineOptions(args []string, stderr io.Writer) (o fleet.Options, every time.Duration, once bool, err error) {
	fs := flag.NewFlagSet("baseline", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.QueryURL, "url", "", "query API base URL (VictoriaMetrics or Prometheus), e.g. http://vm:8428")
	fs.StringVar(&o.ImportURL, "import-url", "", "VictoriaMetrics base URL the bands are imported into (default: --url)")
	fs.StringVar(&o.Latency, "latency", "", "PromQL of each model's latency in seconds (default: P99 of inferwatch_request_duration_seconds)")
	fs.StringVar(&o.Load, "load", "", "PromQL of each model's request rate ('-': none)")
	fs.StringVar(&o.Label, "label", "model", "the label naming the model")
	group := fs.String("group", "namespace", "labels, comma-separated, that split a model's calls into fleets fitted apart ('-': one fleet per model)")
	fs.DurationVar(&o.Lookback, "lookback", 14*24*time.Hour, "history fitted")
	fs.DurationVar(&o.Step, "step", time.Minute, "resolution of history and bands")
	fs.DurationVar(&o.Horizon, "horizon", time.Hour, "bands written ahead; at least --every")
	fs.DurationVar(&every, "every", time.Hour, "how often to refit and write")
	fs.BoolVar(&once, "once", false, "fit and write once, then exit")
	if err := cmdline.Parse(fs, args); err != nil {
		return o, 0, false, err
	}
	o.Group = fleet.NoGroup
	if *group != "-" && *group != "" {
		o.Group = strings.Split(*group, ",")
	}
	if o.QueryURL == "" {
		return o, 0, false, errors.New("baseline: --url is required")
	}
	if err := o.Validate(); err != nil {
		return o, 0, false, fmt.Errorf("baseline: %w", err)
	}
	if !once && (every <= 0 || every > o.Horizon) {
		return o, 0, false, fmt.Errorf("baseline: every %v: must be positive and at most horizon %v, or bands run out between runs", every, o.Horizon)
	}
	return o, every, once, nil
}
