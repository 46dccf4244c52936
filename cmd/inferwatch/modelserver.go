package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/inferwatch/inferwatch/internal/cmdline"

	"google.golang.org/grpc"

	"github.com/inferwatch/inferwatch/demo/modelserver"
)

// modelServer is a running demo model server.
type modelServer struct {
	*modelserver.Server
	grpcAddr, httpAddr string
	grpc               *grpc.Server
	http               *http.Server
}

func startModelServer(o modelserver.Options, grpcListen, httpListen string) (*modelServer, error) {
	gl, err := net.Listen("tcp", grpcListen)
	if err != nil {
		return nil, fmt.Errorf("model server gRPC listen %s: %w", grpcListen, err)
	}
	hl, err := net.Listen("tcp", httpListen)
	if err != nil {
		gl.Close()
		return nil, fmt.Errorf("model server HTTP listen %s: %w", httpListen, err)
	}
	ms := &modelServer{Server: modelserver.New(o), grpcAddr: gl.Addr().String(), httpAddr: hl.Addr().String()}
	ms.grpc = grpc.NewServer(modelserver.GRPCServerOptions()...)
	ms.RegisterGRPC(ms.grpc)
	ms.http = &http.Server{Handler: ms.HTTPHandler(), ReadHeaderTimeout: 10 * time.Second}
	go ms.grpc.Serve(gl)
	go ms.http.Serve(hl)
	return ms, nil
}

func (m *modelServer) stop() {
	m.grpc.Stop()
	m.http.Close()
	m.Close()
}

// faultFlags binds the fault-injection flags shared by demo and modelserver.
func faultFlags(fs *flag.FlagSet) func() (modelserver.Faults, error) {
	spike := fs.Duration("inject-spike", 0, "a latency spike every this often (e.g. 30s); 0 for none")
	spikeFor := fs.Duration("spike-for", 45*time.Second, "how long each spike lasts (P99OverBaseline needs 3 windows of it)")
	spikeExtra := fs.Duration("spike-extra", 50*time.Millisecond, "latency each inference gains during a spike")
	leak := fs.String("inject-leak", "", "memory leaked per second, e.g. 1MiB")
	neighbour := fs.Float64("inject-neighbour", 0, "cores' worth of CPU a noisy neighbour burns, e.g. 1")
	neighbourAfter := fs.Duration("neighbour-after", 0, "start the neighbour this long after the server (a baseline before it)")
	return func() (modelserver.Faults, error) {
		f := modelserver.Faults{SpikeEvery: *spike, SpikeFor: *spikeFor, SpikeExtra: *spikeExtra, NeighbourCPUs: *neighbour, NeighbourAfter: *neighbourAfter}
		if *neighbour < 0 {
			return f, errors.New("--inject-neighbour must not be negative")
		}
		if *neighbour > 0 {
			// A process of its own: a neighbour is another job on the host,
			// and only then does the kernel's run queue (what the sidecar
			// measures) see the competition.
			exe, err := os.Executable()
			if err != nil {
				return f, fmt.Errorf("--inject-neighbour: this binary's path: %w", err)
			}
			f.NeighbourCommand = []string{exe, neighbourCommand, "--cpus", strconv.FormatFloat(*neighbour, 'g', -1, 64)}
		}
		if *leak != "" {
			n, err := parseBytes(*leak)
			if err != nil {
				return f, fmt.Errorf("--inject-leak: %w", err)
			}
			f.LeakBytesPerSec = n
		}
		if *spike > 0 && *spikeFor >= *spike {
			return f, errors.New("--spike-for must be shorter than --inject-spike")
		}
		return f, nil
	}
}

// neighbourCommand is the hidden subcommand --inject-neighbour runs as a
// child process.
const neighbourCommand = "neighbour"

// runNeighbour burns --cpus cores until its stdin closes (its parent ended).
func runNeighbour(args []string) error {
	fs := flag.NewFlagSet(neighbourCommand, flag.ContinueOnError)
	cpus := fs.Float64("cpus", 1, "cores' worth of CPU to burn")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *cpus <= 0 {
		return errors.New("--cpus must be positive")
	}
	modelserver.BurnCPU(*cpus, modelserver.StopOnEOF(os.Stdin))
	return nil
}

// parseBytes reads "1048576", "100B", "512KiB", "1MiB", "2GiB": a whole
// number of bytes or binary units, nothing else.
func parseBytes(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}, {"", 1}}
	for _, u := range units {
		num, ok := strings.CutSuffix(s, u.suffix)
		if !ok || num == "" {
			continue
		}
		// Digits only: strconv also takes a sign, and fmt.Sscan stopped
		// at the first non-digit, reading 1MB or 1Mi as 1 byte.
		if strings.Trim(num, "0123456789") != "" {
			break
		}
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil || n > math.MaxInt64/u.mult {
			return 0, fmt.Errorf("%q is too large", s)
		}
		return n * u.mult, nil
	}
	return 0, fmt.Errorf("%q is not a byte size such as 1MiB (B, KiB, MiB, GiB)", s)
}

func runModelServer(args []string, logw io.Writer) error {
	fs := flag.NewFlagSet("modelserver", flag.ContinueOnError)
	grpcListen := fs.String("grpc-listen", "127.0.0.1:18001", "KServe v2 gRPC address")
	httpListen := fs.String("http-listen", "127.0.0.1:18000", "KServe v2 HTTP address")
	workers := fs.Int("workers", 2, "concurrent executions; waiting for one is the queue stage")
	seed := fs.Uint64("seed", 1, "model weights seed")
	warmup := fs.Int("warmup-rows", modelserver.DefaultWarmupRows, "rows each load of mnist-mlp runs through its new weights before it is ready (Triton's repository load/unload API reloads it); 0 for none")
	faults := faultFlags(fs)
	if err := cmdline.Parse(fs, args); err != nil {
		return err
	}
	f, err := faults()
	if err != nil {
		return err
	}
	rows := *warmup
	if rows == 0 {
		rows = -1 // Options: 0 is the default, < 0 none
	}
	ms, err := startModelServer(modelserver.Options{Workers: *workers, Seed: *seed, Faults: f, WarmupRows: rows}, *grpcListen, *httpListen)
	if err != nil {
		return err
	}
	logger := cmdline.Logger(logw, "info")
	logger.Info("model server", "grpc", ms.grpcAddr, "http", ms.httpAddr, "models", "mnist-mlp, echo, toy-llm")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	ms.stop()
	return nil
}
