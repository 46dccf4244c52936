package record

// Sink consumes finished call records. Observe runs on the pipeline's own
// goroutine, never on the data path, and must not keep c after it returns:
// copy what it needs.
type Sink interface {
	Observe(c *Call)
}

// SinkFunc adapts a function to Sink.
type SinkFunc func(c *Call)

// Observe calls f(c).
func (f SinkFunc) Observe(c *Call) { f(c) }

// Sinks fans a record out to several sinks in order.
type Sinks []Sink

// Observe passes c to every sink.
func (s Sinks) Observe(c *Call) {
	for _, k := range s {
		k.Observe(c)
	}
}
