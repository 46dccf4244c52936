package proxy

import (
	"net/http"

	"github.com/inferwatch/inferwatch/record"
)

// TraceContext is the trace hook of a Handler (package tracing implements
// it). Start runs once per call on the data path, after the call's route is
// recognised and before the upstream request is built: it reads the client's
// trace context from h, makes the head sampling decision keyed on route and
// c.Model, fills c's trace fields and rewrites h's traceparent and tracestate
// for the upstream. It must be quick and must not block.
type TraceContext interface {
	Start(c *record.Call, route string, h http.Header)
}
