// Package loadgen drives the demo's traffic: open-loop calls at a fixed rate
// against KServe v2 targets over gRPC or HTTP. Calls start on schedule
// whether or not earlier ones have finished, and latency counts from the
// scheduled start, so a slow server shows as latency instead of silently
// lowering the rate (no coordinated omission).
package loadgen

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
)

// Models a Target may name.
const (
	ModelMLP  = "mnist-mlp"
	ModelEcho = "echo"
)

// Protocols a Target may use.
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http"
)

// DefaultMaxInFlight bounds concurrent calls when Options.MaxInFlight is 0.
const DefaultMaxInFlight = 256

// Target is one endpoint and the request sent to it.
type Target struct {
	Protocol string // ProtocolGRPC or ProtocolHTTP
	Addr     string // host:port
	Model    string // ModelMLP, ModelEcho or ModelLLM
	// Payload is the echo tensor's size in bytes (0: a few bytes). The MLP
	// always gets one 1×784 FP32 image.
	Payload int
	// JSON sends HTTP requests as KServe v2 JSON instead of the binary
	// tensor data extension.
	JSON bool
}

// Options configures Run.
type Options struct {
	QPS float64 // calls per second, > 0
	// Duration is how long calls are scheduled; 0 means until ctx is done
	// or Stop closes.
	Duration time.Duration
	// Stop, when closed, ends the schedule as Duration does: no more calls
	// start, and those in flight finish (ctx's end cancels them instead).
	Stop <-chan struct{}
	// MaxInFlight bounds concurrent calls (default DefaultMaxInFlight). A
	// call due while the bound is reached is counted Late and not sent.
	MaxInFlight int
	// Targets receive calls in turn, round-robin.
	Targets []Target
	// OnResult, if set, sees each finished call. Calls to it are serialised
	// but run on the calls' goroutines, so it should be quick.
	OnResult func(Result)
	// OnLate, if set, is called for each due call counted Late, as it is
	// skipped, from the scheduling goroutine, so it should be quick.
	OnLate func()
}

// Result is one finished call.
type Result struct {
	Target  int           // index into Options.Targets
	Latency time.Duration // from the scheduled start to the end of the response
	Code    string        // gRPC code name ("OK", "UNAVAILABLE"), HTTP status ("200"), or "error"/"canceled" when HTTP got no response
	Err     error
}

// Summary totals a run. Percentiles are over successful calls.
type Summary struct {
	Sent, OK, Failed, Late int
	ByCode                 map[string]int
	P50, P90, P99, Max     time.Duration
	Throughput             float64 // successful calls per second, from start to the last completion
}

// Run sends calls until Duration has passed or ctx is done, waits for the
// calls in flight (cancelled if ctx is done), and summarises them. It fails
// on invalid options, and when calls were sent but none succeeded (the
// target is down), returning the summary as well.
func Run(ctx context.Context, o Options) (Summary, error) {
	if err := o.check(); err != nil {
		return Summary{}, err
	}
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = DefaultMaxInFlight
	}
	callers := make([]caller, 0, len(o.Targets))
	defer func() {
		for _, c := range callers {
			c.close()
		}
	}()
	for i, t := range o.Targets {
		c, err := newCaller(t, o.MaxInFlight)
		if err != nil {
			return Summary{}, fmt.Errorf("loadgen: target %d (%s %s): %w", i, t.Protocol, t.Addr, err)
		}
		callers = append(callers, c)
	}

	col := newCollector(o.OnResult)
	slots := make(chan struct{}, o.MaxInFlight)
	var wg sync.WaitGroup
	start := time.Now()
	col.start = start
	timer := time.NewTimer(0)
	defer timer.Stop()
schedule:
	for i := 0; ; i++ {
		// Each due time is computed from the start, not from the previous
		// one, so rounding and late wake-ups never drift the rate.
		offset := time.Duration(float64(i) * float64(time.Second) / o.QPS)
		if o.Duration > 0 && offset >= o.Duration {
			break
		}
		due := start.Add(offset)
		if wait := time.Until(due); wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				break schedule
			case <-o.Stop:
				break schedule
			case <-timer.C:
			}
		} else if ctx.Err() != nil {
			break
		}
		select {
		case <-o.Stop:
			break schedule
		default:
		}
		select {
		case slots <- struct{}{}:
		default:
			col.late()
			if o.OnLate != nil {
				o.OnLate()
			}
			continue
		}
		target := i % len(callers)
		col.sent()
		wg.Go(func() {
			defer func() { <-slots }()
			code, err := callers[target].call(ctx)
			col.add(Result{Target: target, Latency: time.Since(due), Code: code, Err: err})
		})
	}
	wg.Wait()

	s, firstErr := col.summary()
	if s.Sent > 0 && s.OK == 0 {
		return s, fmt.Errorf("loadgen: all %d calls failed, first: %w", s.Sent, firstErr)
	}
	return s, nil
}

func (o *Options) check() error {
	if !(o.QPS > 0) || math.IsInf(o.QPS, 0) {
		return fmt.Errorf("loadgen: QPS %v must be a positive number", o.QPS)
	}
	if o.Duration < 0 {
		return fmt.Errorf("loadgen: negative duration %v", o.Duration)
	}
	if len(o.Targets) == 0 {
		return errors.New("loadgen: no targets")
	}
	for i, t := range o.Targets {
		if t.Protocol != ProtocolGRPC && t.Protocol != ProtocolHTTP {
			return fmt.Errorf("loadgen: target %d: protocol %q is neither %q nor %q", i, t.Protocol, ProtocolGRPC, ProtocolHTTP)
		}
		if t.Model != ModelMLP && t.Model != ModelEcho && t.Model != ModelLLM {
			return fmt.Errorf("loadgen: target %d: model %q is none of %q, %q, %q", i, t.Model, ModelMLP, ModelEcho, ModelLLM)
		}
		if t.Addr == "" {
			return fmt.Errorf("loadgen: target %d: no address", i)
		}
		if t.Payload < 0 {
			return fmt.Errorf("loadgen: target %d: negative payload %d", i, t.Payload)
		}
	}
	return nil
}
