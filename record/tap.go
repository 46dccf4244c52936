package record

import "time"

// ResponseTap watches one call's response body as it passes through a front,
// for measurements that need each chunk's timing (LLM token events, streamed
// gRPC responses). The front calls it on the data path, so every method must
// be cheap, must not block and must not keep p after it returns.
type ResponseTap interface {
	// Arrived is called with each chunk of response body read from the
	// upstream, at its offset from Call.Start.
	Arrived(p []byte, at time.Duration)
	// Sent is called when everything passed to Arrived so far has been
	// written (and, for streams, flushed) to the client, at its offset.
	Sent(at time.Duration)
	// Finish is called once when the call ends, before the record is
	// submitted, to fill the record from what the tap saw.
	Finish(c *Call)
}
