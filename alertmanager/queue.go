package alertmanager

import (
	"sync"

	"github.com/inferwatch/inferwatch/alerting"
)

// queue is one destination's bounded FIFO of alerts waiting to be sent.
// An alert whose fingerprint is already queued replaces the queued one in
// place: only the latest state of an alert is worth sending. When the queue
// is full the oldest alert goes. It is safe for concurrent use.
type queue struct {
	limit int
	ready chan struct{} // signalled (never closed) when alerts arrive

	mu     sync.Mutex
	items  []*entry
	byFP   map[string]*entry
	closed bool
}

type entry struct {
	fp    string
	alert alerting.Alert
}

func newQueue(limit int) *queue {
	return &queue{
		limit: limit,
		ready: make(chan struct{}, 1),
		byFP:  make(map[string]*entry),
	}
}

// push queues alerts and reports how many were dropped: the oldest ones
// evicted to make room, or all of them if the queue is closed.
func (q *queue) push(alerts []keyed) (dropped int) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return len(alerts)
	}
	for _, k := range alerts {
		if e, ok := q.byFP[k.fp]; ok {
			e.alert = k.alert
			continue
		}
		if len(q.items) >= q.limit {
			old := q.items[0]
			q.items[0] = nil
			q.items = q.items[1:]
			delete(q.byFP, old.fp)
			dropped++
		}
		e := &entry{fp: k.fp, alert: k.alert}
		q.items = append(q.items, e)
		q.byFP[k.fp] = e
	}
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
	return dropped
}

// take removes and returns up to n alerts from the front, oldest first.
func (q *queue) take(n int) []alerting.Alert {
	q.mu.Lock()
	defer q.mu.Unlock()
	n = min(n, len(q.items))
	if n == 0 {
		return nil
	}
	out := make([]alerting.Alert, n)
	for i, e := range q.items[:n] {
		out[i] = e.alert
		delete(q.byFP, e.fp)
		q.items[i] = nil
	}
	q.items = q.items[n:]
	if len(q.items) == 0 {
		q.items = nil // let the backing array go
	}
	return out
}

// close empties the queue, refuses later pushes and returns how many alerts
// were still queued.
func (q *queue) close() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := len(q.items)
	q.items, q.byFP, q.closed = nil, nil, true
	return n
}

// keyed is an alert with its fingerprint, computed once per Notify.
type keyed struct {
	fp    string
	alert alerting.Alert
}
