package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"time"

	"github.com/inferwatch/inferwatch/internal/cmdline"

	"github.com/inferwatch/inferwatch/demo/loadgen"
)

func runLoad(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8001", "target host:port")
	protocol := fs.String("protocol", "grpc", "grpc or http")
	model := fs.String("model", loadgen.ModelMLP, "mnist-mlp or echo")
	payload := fs.String("payload", "0", "echo tensor size, e.g. 1MiB (0: a few bytes)")
	asJSON := fs.Bool("json-body", false, "HTTP: KServe v2 JSON body instead of the binary extension")
	qps := fs.Float64("qps", 100, "calls per second (open loop)")
	duration := fs.Duration("duration", 10*time.Second, "how long to send; 0 until Ctrl-C")
	inflight := fs.Int("max-inflight", loadgen.DefaultMaxInFlight, "concurrent calls at most; calls due beyond it count as late")
	format := fs.String("format", "text", "text or json")
	if err := cmdline.Parse(fs, args); err != nil {
		return err
	}
	n, err := parseBytes(*payload)
	if err != nil {
		return fmt.Errorf("--payload: %w", err)
	}
	switch {
	case !(*qps > 0) || math.IsInf(*qps, 0):
		return fmt.Errorf("--qps %v: want calls per second above 0", *qps)
	case *duration < 0:
		return fmt.Errorf("--duration %v: must not be negative", *duration)
	case *protocol != loadgen.ProtocolGRPC && *protocol != loadgen.ProtocolHTTP:
		return fmt.Errorf("--protocol %q: want grpc or http", *protocol)
	case *model != loadgen.ModelMLP && *model != loadgen.ModelEcho && *model != loadgen.ModelLLM:
		return fmt.Errorf("--model %q: want %s, %s or %s", *model, loadgen.ModelMLP, loadgen.ModelEcho, loadgen.ModelLLM)
	case *format != "text" && *format != "json":
		return fmt.Errorf("--format %q: want text or json", *format)
	}
	// Ctrl-C ends the run as --duration would, calls in flight finishing,
	// and the summary is printed; a second one exits at once. SIGTERM
	// still kills: scripts/bench.sh's timeout tells a stalled run by it.
	stop := make(chan struct{})
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt)
	defer signal.Stop(sig)
	ran := make(chan struct{})
	defer close(ran)
	go func() {
		select {
		case <-sig:
			signal.Stop(sig)
			close(stop)
		case <-ran:
		}
	}()
	sum, err := loadgen.Run(context.Background(), loadgen.Options{
		QPS: *qps, Duration: *duration, MaxInFlight: *inflight, Stop: stop,
		Targets: []loadgen.Target{{Protocol: *protocol, Addr: *addr, Model: *model, Payload: int(n), JSON: *asJSON}},
	})
	if *format == "json" {
		enc := json.NewEncoder(out)
		enc.Encode(map[string]any{
			"sent": sum.Sent, "ok": sum.OK, "failed": sum.Failed, "late": sum.Late, "by_code": sum.ByCode,
			"p50_us": sum.P50.Microseconds(), "p90_us": sum.P90.Microseconds(), "p99_us": sum.P99.Microseconds(),
			"max_us": sum.Max.Microseconds(), "throughput": sum.Throughput,
		})
	} else {
		fmt.Fprintf(out, "sent %d ok %d failed %d late %d  p50 %v p90 %v p99 %v max %v  %.1f/s  codes %v\n",
			sum.Sent, sum.OK, sum.Failed, sum.Late, sum.P50, sum.P90, sum.P99, sum.Max, sum.Throughput, sum.ByCode)
	}
	return err
}
