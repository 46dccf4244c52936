package tracing

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Drop reasons, the `reason` label of inferwatch_traces_dropped_total.
const (
	dropQueueFull    = "queue_full"    // the export queue was full: the backend is slow or down
	dropExportFailed = "export_failed" // the backend refused the batch, or did not answer in time
	dropShutdown     = "shutdown"      // still queued when Close ran out of time
)

// exportQueue batches kept traces to an exporter on its own goroutine. The
// queue holds at most cap traces; enqueue never blocks, a full queue drops
// and counts. Batches never split a trace.
type exportQueue struct {
	exp           sdktrace.SpanExporter
	ch            chan *callSpans
	res           *resource.Resource
	batchSpans    int
	batchTimeout  time.Duration
	exportTimeout time.Duration
	log           *slog.Logger

	base    context.Context // ends when Close gives up
	cancel  context.CancelFunc
	done    chan struct{}
	closing chan struct{} // closed by close: stop backing off
	mu      sync.RWMutex  // Close holds it for writing to close ch
	closed  bool

	// backoff is the pause after a failed export, doubling from minBackoff
	// to maxBackoff while failures repeat; reset by a success. While paused
	// the worker takes nothing from the queue, so a backend that is down
	// costs no marshalling: the queue fills and further traces are dropped
	// as queue_full at the cost of a channel send.
	backoff time.Duration

	exported, exportedSpans            *metrics.Counter
	droppedFull, droppedFail, droppedX *metrics.Counter
	lastLog                            atomic.Int64 // unix nanos of the last export error logged
}

func newExportQueue(exp sdktrace.SpanExporter, c Config, res *resource.Resource, set *metrics.Set, log *slog.Logger) *exportQueue {
	size := c.QueueSize
	if size <= 0 {
		size = DefaultQueueSize
	}
	q := &exportQueue{
		exp:           exp,
		res:           res,
		ch:            make(chan *callSpans, size),
		batchSpans:    c.BatchSize,
		batchTimeout:  c.BatchTimeout,
		exportTimeout: c.ExportTimeout,
		log:           log,
		done:          make(chan struct{}),
		closing:       make(chan struct{}),
		exported:      set.GetOrCreateCounter("inferwatch_traces_exported_total"),
		exportedSpans: set.GetOrCreateCounter("inferwatch_trace_spans_exported_total"),
		droppedFull:   set.GetOrCreateCounter(`inferwatch_traces_dropped_total{reason="` + dropQueueFull + `"}`),
		droppedFail:   set.GetOrCreateCounter(`inferwatch_traces_dropped_total{reason="` + dropExportFailed + `"}`),
		droppedX:      set.GetOrCreateCounter(`inferwatch_traces_dropped_total{reason="` + dropShutdown + `"}`),
	}
	if q.batchSpans <= 0 {
		q.batchSpans = DefaultBatchSize
	}
	if q.batchTimeout <= 0 {
		q.batchTimeout = DefaultBatchTimeout
	}
	if q.exportTimeout <= 0 {
		q.exportTimeout = DefaultExportTimeout
	}
	set.GetOrCreateGauge("inferwatch_traces_export_queue", func() float64 { return float64(len(q.ch)) })
	q.base, q.cancel = context.WithCancel(context.Background())
	go q.run()
	return q
}

// enqueue hands a trace to the queue without waiting; it reports false when
// the trace was dropped.
func (q *exportQueue) enqueue(cs *callSpans) bool {
	q.mu.RLock()
	defer q.mu.RUnlock()
	if q.closed {
		q.droppedX.Inc()
		return false
	}
	select {
	case q.ch <- cs:
		return true
	default:
		q.droppedFull.Inc()
		return false
	}
}

func (q *exportQueue) run() {
	defer close(q.done)
	timer := time.NewTimer(q.batchTimeout)
	timer.Stop()
	var batch []sdktrace.ReadOnlySpan
	traces := 0
	flush := func() {
		timer.Stop()
		if len(batch) == 0 {
			return
		}
		ok := q.export(batch, traces)
		clear(batch)
		batch, traces = batch[:0], 0
		q.pause(ok)
	}
	for {
		select {
		case cs, ok := <-q.ch:
			if !ok {
				flush()
				return
			}
			if q.base.Err() != nil {
				q.droppedX.Inc()
				continue
			}
			if len(batch) == 0 {
				timer.Reset(q.batchTimeout)
			}
			for i := range cs.spans {
				batch = append(batch, readOnly{cs: cs, s: &cs.spans[i], res: q.res})
			}
			traces++
			if len(batch) >= q.batchSpans {
				flush()
			}
		case <-timer.C:
			flush()
		}
	}
}

// Pauses after failed exports.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
)

// pause waits after a failed export, longer each time failures repeat,
// until close asks to flush.
func (q *exportQueue) pause(ok bool) {
	if ok {
		q.backoff = 0
		return
	}
	q.backoff = min(max(2*q.backoff, minBackoff), maxBackoff)
	t := time.NewTimer(q.backoff)
	defer t.Stop()
	select {
	case <-t.C:
	case <-q.closing:
	}
}

// export sends one batch, bounded by the export timeout; a failed batch is
// dropped and counted, and logged at most once a minute. It reports whether
// the backend took the batch.
func (q *exportQueue) export(batch []sdktrace.ReadOnlySpan, traces int) bool {
	if q.base.Err() != nil {
		q.droppedX.Add(traces)
		return true
	}
	ctx, cancel := context.WithTimeout(q.base, q.exportTimeout)
	err := q.exp.ExportSpans(ctx, batch)
	cancel()
	if err != nil {
		q.droppedFail.Add(traces)
		now := time.Now().UnixNano()
		if last := q.lastLog.Load(); now-last > int64(time.Minute) && q.lastLog.CompareAndSwap(last, now) {
			q.log.Warn("trace export failed; dropping the batch and pausing exports (logged once a minute)",
				"traces", traces, "spans", len(batch), "err", err)
		}
		return false
	}
	q.exported.Add(traces)
	q.exportedSpans.Add(len(batch))
	return true
}

// close stops accepting, exports what is queued until ctx ends (then drops
// the rest), and shuts the exporter down.
func (q *exportQueue) close(ctx context.Context) error {
	q.mu.Lock()
	if !q.closed {
		q.closed = true
		close(q.ch)
		close(q.closing)
	}
	q.mu.Unlock()
	select {
	case <-q.done:
	case <-ctx.Done():
		q.cancel()
		<-q.done
	}
	q.cancel()
	if err := q.exp.Shutdown(ctx); err != nil {
		return fmt.Errorf("tracing: shut the exporter down: %w", err)
	}
	return nil
}
