package inferapi

import (
	"strings"
	"sync"
	"time"

	"github.com/inferwatch/inferwatch/record"
)

// StreamTracker follows the requests of an inference stream and matches
// each response to its request by id: KServe's ModelStreamInfer (Triton's
// decoupled models: any number of responses per request, several requests
// in flight on one stream) and TorchServe's StreamPredictions (one request,
// its answer streamed) and StreamPredictions2 (a stream of requests, each
// answered by one or more responses). Every front follows streams with it:
// the proxy on both planes and ext_proc hand it the first headBytes of
// every message as the message ends, on the forwarding path (it reads a
// few protobuf fields there and keeps times, nothing else); the gRPC
// interceptors, which see decoded messages, feed it by hand.
type StreamTracker struct {
	start time.Time
	// noFinal: responses carry no final flag (TorchServe), so no request
	// is ever closed and match places responses without an id otherwise.
	noFinal bool

	mu      sync.Mutex // the request and response sides run on different goroutines on the stdlib plane
	reqs    []record.StreamRequest
	dropped int
}

// headBytes is how much of each stream message is read for its id, error
// and final flag: KServe's precede the tensors.
const headBytes = 1024

// streamReading is how a followed stream's messages are read.
type streamReading struct {
	req, resp func([]byte) StreamHead
	// reqFields, respFields: when not 0, the head is these top-level
	// fields only (GRPCScanner.HeadFields), not the first headBytes:
	// TorchServe's ids follow the request's input and the response's
	// prediction, which may be any size.
	reqFields, respFields uint64
	noFinal               bool
}

// streamHeads says whether a route's stream is followed (req not nil) and
// how its messages' heads are read: the one place that decides it for
// every front.
func streamHeads(r Route) streamReading {
	switch r.Method {
	case MethodStreamInfer:
		return streamReading{req: InferRequestHead, resp: StreamResponseHead}
	case MethodStreamPredict:
		return streamReading{req: PredictionsRequestHead, resp: PredictionResponseHead,
			reqFields: 1 << fTSRequestSeqID, respFields: 1<<fTSResponseSeqID | 1<<fTSStatus, noFinal: true}
	}
	return streamReading{}
}

// TracksStream says whether the route's requests and responses are
// followed message by message (NewStreamTracker, WatchStream).
func (r Route) TracksStream() bool { return streamHeads(r).req != nil }

// WatchStream attaches a tracker to a stream call's scanners, when the
// route is one that is followed (nil otherwise); start is the call's,
// which its times count from.
func WatchStream(r Route, start time.Time, req, resp *GRPCScanner) *StreamTracker {
	sr := streamHeads(r)
	if sr.req == nil {
		return nil
	}
	t := &StreamTracker{start: start, noFinal: sr.noFinal}
	heads := func(s *GRPCScanner, fields uint64, fn func(head []byte, whole bool)) {
		if fields != 0 {
			s.HeadFields(fields, headBytes, fn)
		} else {
			s.Heads(headBytes, fn)
		}
	}
	heads(req, sr.reqFields, func(head []byte, _ bool) { t.Request(sr.req(head).ID) })
	heads(resp, sr.respFields, func(head []byte, _ bool) {
		h := sr.resp(head)
		t.Response(h.ID, h.Final, h.Error)
	})
	return t
}

// NewStreamTracker is a tracker fed by hand, by a front that sees the
// decoded messages (the gRPC interceptors), for a route that is followed
// (nil otherwise); start is the call's.
func NewStreamTracker(r Route, start time.Time) *StreamTracker {
	if !r.TracksStream() {
		return nil
	}
	return &StreamTracker{start: start, noFinal: streamHeads(r).noFinal}
}

// Request notes a request message with its id, arrived now. The id is kept
// to its first maxID bytes, as InferRequestHead reads it, whoever calls:
// a front that hands over decoded messages passes the caller's id whole.
func (t *StreamTracker) Request(id string) {
	at := time.Since(t.start)
	id = clipIDString(id)
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.reqs) >= record.MaxStreamRequests {
		t.dropped++
		return
	}
	t.reqs = append(t.reqs, record.StreamRequest{ID: id, Arrived: at})
}

// Response notes a response message, arrived now: the request id it
// answers, whether it is that request's final one (triton_final_response)
// and whether it carries an error (ModelStreamInfer's error_message, a
// TorchServe status other than OK: then it marks the request failed and is
// not counted as one of its responses).
func (t *StreamTracker) Response(id string, final, failed bool) {
	at := time.Since(t.start)
	id = clipIDString(id) // compared with the requests' clipped ids
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.match(id)
	if r == nil {
		return // a request past the bound, or a response to nothing
	}
	if failed {
		// An error is no output: it fails the request, and the
		// request's latencies and token count keep to what it generated,
		// as an event stream's error event is no token either.
		r.Error, r.Final = true, r.Final || final
		return
	}
	if r.Responses == 0 {
		r.FirstResponse = at
	} else {
		r.Gaps.Add(at - r.LastResponse)
	}
	r.Responses++
	r.LastResponse = at
	r.Final = r.Final || final
}

// match finds the request a response belongs to: the newest request with
// its id that has not had its final response; without an id (or an id no
// request had: an error answer, say), the oldest one still open. Without
// final flags (noFinal) every request stays open, so an id-less response
// goes to the oldest request not answered yet (requests sent ahead are
// answered in turn), else to the newest (in the usual send, read the
// answer, send the next pattern, the one still being answered).
func (t *StreamTracker) match(id string) *record.StreamRequest {
	if id != "" {
		for i := len(t.reqs) - 1; i >= 0; i-- {
			if r := &t.reqs[i]; r.ID == id && !r.Final {
				return r
			}
		}
	}
	if t.noFinal {
		var newest *record.StreamRequest
		for i := range t.reqs {
			r := &t.reqs[i]
			if id != "" && r.ID != "" {
				continue // another request's answer
			}
			if r.Responses == 0 && !r.Error {
				return r
			}
			newest = r
		}
		return newest
	}
	for i := range t.reqs {
		if r := &t.reqs[i]; !r.Final && (id == "" || r.ID == "" || r.Responses == 0) {
			return r
		}
	}
	return nil
}

// Fill puts the stream's requests into the record.
func (t *StreamTracker) Fill(c *record.Call) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c.StreamRequests, c.StreamRequestsDropped = t.reqs, t.dropped
}

// clipIDString is clipID for an id read from a decoded message: a copy, so
// that the record does not hold the message's whole string.
func clipIDString(id string) string {
	if len(id) > maxID {
		return strings.Clone(id[:maxID])
	}
	return id
}
