// Package modelserver is the inference server `inferwatch demo` puts behind
// the sidecar: a small real model (and an echo model for large tensors)
// served over KServe v2 gRPC and HTTP, KServe v1 and an OpenAI-compatible API,
// with Triton's statistics and model repository extensions (a load builds
// the model's weights and warms them up), per-request Server-Timing stages
// and injectable faults. It exists so the demo and the tests have a server whose
// timings are measured, not invented.
package modelserver

import (
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/inferwatch/inferwatch/demo/model"
)

// MaxMessageBytes bounds one request or response: large enough for the echo
// model's 64+ MiB tensors with room to spare.
const MaxMessageBytes = 256 << 20

// Options configures a Server.
type Options struct {
	// Workers is how many executions run at once (default 2). A request
	// waiting for a worker slot is in the "queue" stage.
	Workers int
	// Seed fixes the model's weights.
	Seed   uint64
	Faults Faults
	// WarmupRows is how many rows each load of the MLP runs through the
	// new weights before it is ready (0: DefaultWarmupRows; < 0: none).
	WarmupRows int
}

// Faults are deliberate misbehaviours the demo turns on to show what the
// sidecar sees. The zero value injects nothing.
type Faults struct {
	// Every SpikeEvery, for SpikeFor, each inference sleeps SpikeExtra longer
	// in its infer stage: an injected latency spike.
	SpikeEvery, SpikeFor time.Duration
	SpikeExtra           time.Duration
	// LeakBytesPerSec of memory is allocated, touched and never freed while
	// the server runs, so the process RSS grows steadily.
	LeakBytesPerSec int64
	// NeighbourCPUs is how many cores' worth of CPU a noisy neighbour burns,
	// in duty-cycled busy loops started with the server.
	NeighbourCPUs float64
	// NeighbourCommand, when set, runs the neighbour as this child process
	// (argv; it must burn NeighbourCPUs itself, e.g. with BurnCPU, and exit
	// when its stdin closes), as a co-located job is: its threads then
	// compete with the server's in the kernel's run queue, where the
	// sidecar's scheduler probes see them. Unset, the neighbour is
	// goroutines in the server's process, which Go's scheduler shares out
	// among GOMAXPROCS threads: the server waits for a P, not for a CPU.
	NeighbourCommand []string
	// NeighbourAfter delays the neighbour's start by this long after the
	// server's, so that a run has a baseline before it; 0: from the start.
	NeighbourAfter time.Duration
}

// Server executes models and keeps their statistics. Serve it with
// RegisterGRPC and HTTPHandler; one Server may back both at once.
type Server struct {
	mlp        *model.MLP // the toy LLM's; each loaded MLP model has its own
	models     []*servedModel
	seed       uint64
	warmupRows int
	repo       sync.Mutex    // one load or unload at a time
	slots      chan struct{} // worker slots; waiting for one is the queue stage
	started    time.Time
	faults     Faults
	extra      atomic.Int64 // SetExtraLatency, in ns
	degrade    atomic.Int64 // SetDegradation: mean of an exponential extra delay, in ns
	seq        atomic.Uint64

	stop      chan struct{}
	stopOnce  sync.Once
	bg        sync.WaitGroup
	leak      leak
	neighbour neighbour
}

// New returns a Server with its models loaded and its faults running. Its
// repository API (Load, Unload, and Triton's repository extension over gRPC
// and REST) unloads and (re)loads them.
func New(o Options) *Server {
	if o.Workers <= 0 {
		o.Workers = 2
	}
	switch {
	case o.WarmupRows == 0:
		o.WarmupRows = DefaultWarmupRows
	case o.WarmupRows < 0:
		o.WarmupRows = 0
	}
	s := &Server{
		seed:       o.Seed,
		warmupRows: o.WarmupRows,
		mlp:        model.NewMLP(o.Seed),
		slots:      make(chan struct{}, o.Workers),
		started:    time.Now(),
		faults:     o.Faults,
		stop:       make(chan struct{}),
	}
	s.models = []*servedModel{
		{name: modelMLP, version: "1", platform: "inferwatch_go", kind: kindMLP,
			inputs:  []tensorMeta{{modelMLPInput, "FP32", []int64{-1, model.InputSize}}},
			outputs: []tensorMeta{{modelMLPOutput, "FP32", []int64{-1, model.OutputSize}}}},
		{name: modelEcho, version: "1", platform: "inferwatch_go", kind: kindEcho,
			inputs:  []tensorMeta{{"input", "UINT8", []int64{-1, -1}}},
			outputs: []tensorMeta{{"input", "UINT8", []int64{-1, -1}}}},
		{name: modelLLM, version: "1", platform: "inferwatch_toy_llm", kind: kindLLM},
	}
	for _, m := range s.models {
		m.loaded.p.Store(s.build(m))
	}
	s.startFaults()
	return s
}

// RegisterGRPC registers the KServe v2 GRPCInferenceService on g. Large echo
// tensors need g to be built with GRPCServerOptions.
func (s *Server) RegisterGRPC(g *grpc.Server) {
	registerGRPC(g, s)
}

// GRPCServerOptions are the options a grpc.Server needs to carry the
// largest messages this server accepts and sends.
func GRPCServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(MaxMessageBytes),
		grpc.MaxSendMsgSize(MaxMessageBytes),
	}
}

// SetExtraLatency adds d to every inference's infer stage from now on: a
// step change for tests and the demo. Zero removes it.
func (s *Server) SetExtraLatency(d time.Duration) {
	s.extra.Store(int64(d))
}

// SetDegradation makes every inference from now on take an extra delay
// drawn from an exponential distribution with mean d (in the infer stage):
// a degradation that raises the mean and the spread of latency together, as
// a contended device does. Zero removes it.
func (s *Server) SetDegradation(d time.Duration) {
	s.degrade.Store(int64(d))
}

// Close stops the faults and frees the leaked memory. It does not stop the
// gRPC or HTTP servers, which belong to the caller.
func (s *Server) Close() {
	s.stopOnce.Do(func() { close(s.stop) })
	s.bg.Wait()
	s.leak.release()
}

// lookup finds a model by name and version ("" means the latest, here "1").
func (s *Server) lookup(name, version string) *servedModel {
	for _, m := range s.models {
		if m.name == name && (version == "" || version == m.version) {
			return m
		}
	}
	return nil
}
