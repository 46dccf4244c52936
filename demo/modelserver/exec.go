package modelserver

import (
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/status"
)

// Stages of one execution, in order. They are reported to clients as
// Server-Timing and accumulated into Triton statistics as queue,
// compute_input, compute_infer and compute_output.
const (
	stageQueue = iota
	stagePreprocess
	stageInfer
	stagePostprocess
	numStages
)

var stageNames = [numStages]string{"queue", "preprocess", "infer", "postprocess"}

// timing holds the measured stage durations of one execution (or the sum
// over a stream); ran says how many stages started.
type timing struct {
	d   [numStages]time.Duration
	ran int
}

func (t *timing) add(o timing) {
	for i := range t.d {
		t.d[i] += o.d[i]
	}
	t.ran = max(t.ran, o.ran)
}

// serverTiming formats the stages that ran in W3C Server-Timing syntax,
// durations in milliseconds: "queue;dur=0.012, preprocess;dur=0.050, ...".
func (t timing) serverTiming() string {
	var b strings.Builder
	for i := range t.ran {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(stageNames[i])
		b.WriteString(";dur=")
		b.WriteString(strconv.FormatFloat(float64(t.d[i])/float64(time.Millisecond), 'f', 3, 64))
	}
	return b.String()
}

// job is one request's work, stage by stage.
type job struct {
	preprocess func() (batch int, err error)
	// infer runs the model. sofar holds the queue and preprocess times, for
	// a response that must send headers before it starts. It returns the
	// time it spent writing output as it went (streamed tokens), which
	// counts as postprocess rather than infer.
	infer       func(ctx context.Context, sofar timing) (emitted time.Duration, err error)
	postprocess func() error
}

// execute runs j for m through queue, preprocess, infer and postprocess,
// timing each stage and recording the outcome in m's statistics. Errors are
// gRPC status errors.
func (s *Server) execute(ctx context.Context, m *servedModel, j job) (timing, error) {
	start := time.Now()
	t, batch, err := s.stages(ctx, j)
	m.stats.record(time.Now(), time.Since(start), t, batch, err == nil)
	return t, err
}

func (s *Server) stages(ctx context.Context, j job) (t timing, batch int, err error) {
	mark := time.Now()
	lap := func(stage int) {
		now := time.Now()
		t.d[stage] += now.Sub(mark)
		mark = now
	}

	t.ran = stageQueue + 1
	select {
	case s.slots <- struct{}{}:
	case <-ctx.Done():
		lap(stageQueue)
		return t, 0, status.FromContextError(ctx.Err()).Err()
	}
	defer func() { <-s.slots }()
	lap(stageQueue)

	t.ran = stagePreprocess + 1
	batch, err = j.preprocess()
	lap(stagePreprocess)
	if err != nil {
		return t, batch, err
	}

	t.ran = stageInfer + 1
	err = s.injectFaults(ctx)
	var emitted time.Duration
	if err == nil {
		sofar := t
		sofar.ran = stagePreprocess + 1
		emitted, err = j.infer(ctx, sofar)
	}
	lap(stageInfer)
	t.d[stageInfer] -= emitted
	t.d[stagePostprocess] += emitted
	if err != nil {
		return t, batch, err
	}

	t.ran = stagePostprocess + 1
	if j.postprocess != nil {
		err = j.postprocess()
	}
	lap(stagePostprocess)
	return t, batch, err
}

// injectFaults sleeps in the infer stage for an active latency spike and
// for SetExtraLatency: injected delay, documented as such, not model work.
func (s *Server) injectFaults(ctx context.Context) error {
	d := time.Duration(s.extra.Load())
	if m := s.degrade.Load(); m > 0 {
		d += time.Duration(rand.ExpFloat64() * float64(m))
	}
	if s.faults.spikeAt(time.Since(s.started)) {
		d += s.faults.SpikeExtra
	}
	if d <= 0 {
		return nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}
