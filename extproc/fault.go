package extproc

import (
	"maps"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// kind is a counted error of the ext_proc path, the kind label of
// inferwatch_extproc_errors_total.
type kind int

const (
	kindBodyBeforeHeaders kind = iota // a body or trailers before the headers of their direction
	kindOutOfOrder                    // headers twice, a message after its direction ended
	kindUnknownFields                 // fields our API version does not know (still answered)
	kindUnknownMessage                // a message kind we cannot answer (stream closed cleanly)
	kindOversizeMessage               // a ProcessingRequest over the receive limit
	kindOversizeBody                  // a gRPC message in a body over max_message_bytes (scan stops)
	kindStream                        // the stream failed otherwise
	numKinds
)

var kindNames = [numKinds]string{
	"body_before_headers", "out_of_order", "unknown_fields", "unknown_message",
	"oversize_message", "oversize_body", "stream_error",
}

// fault counts one kind and logs it at most once a second.
type fault struct {
	counter    *metrics.Counter
	lastLog    atomic.Int64 // unix nanos of the last line
	suppressed atomic.Int64 // occurrences not logged since
}

// fault counts an error of kind k and logs a line unless one was logged for
// k within the last second.
func (s *Server) fault(k kind, msg string, args ...any) {
	f := &s.faults[k]
	f.counter.Inc()
	now := time.Now().UnixNano()
	last := f.lastLog.Load()
	if now-last < int64(time.Second) || !f.lastLog.CompareAndSwap(last, now) {
		f.suppressed.Add(1)
		return
	}
	args = append(args, "kind", kindNames[k], "route", s.o.Route)
	if n := f.suppressed.Swap(0); n > 0 {
		args = append(args, "suppressed_since_last_line", n)
	}
	s.o.Logger.Warn("extproc: "+msg, args...)
}

var help = map[string]string{
	"inferwatch_extproc_errors_total": "Malformed or failed ext_proc streams by kind; the call was still answered or its stream closed cleanly.",
}

// MetricHelp returns the # HELP texts of the metrics this package registers.
func MetricHelp() map[string]string { return maps.Clone(help) }
