package inject

import (
	"container/list"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Event series: the same refusal again (one Event per replica of a
// Deployment the injector does not understand) is counted on the Event
// already posted, as client-go's events recorder does, not posted anew. The
// first occurrence is POSTed; repeats only count in memory, and the Event's
// series {count, lastObservedTime} is PATCHed at most once per interval for
// each series.
const (
	// DefaultSeriesInterval is the least time between two writes (the
	// POST, then PATCHes) of one series.
	DefaultSeriesInterval = 30 * time.Second
	// seriesExpiry forgets a series not seen again for this long: a later
	// repeat posts a new Event.
	seriesExpiry = 30 * time.Minute
	// seriesMax bounds the series remembered; the one seen longest ago is
	// forgotten first.
	seriesMax = 1024
)

// seriesKey is what makes two refusals the same Event: the namespace, what
// the Event regards (the pod, or its controller for a pod a controller
// creates), the reason and the note (which names the pod, or its
// generateName). client-go calls such Events isomorphic.
type seriesKey struct {
	namespace string
	regarding corev1.ObjectReference
	reason    string
	note      string
}

func keyOf(ev *eventsv1.Event) seriesKey {
	return seriesKey{namespace: ev.Namespace, regarding: ev.Regarding, reason: ev.Reason, note: ev.Note}
}

// series is one Event and the refusals counted on it.
type series struct {
	key          seriesKey
	name         string    // the Event's name (chosen before its POST)
	posted       bool      // the POST succeeded: PATCHes may follow
	count        int32     // refusals seen, the first included
	sent         int32     // the count the apiserver has
	lastObserved time.Time // the latest refusal
	lastWrite    time.Time // the latest POST or PATCH attempt
	elem         *list.Element
}

// observe records a refusal whose Event is ev. It reports whether the
// refusal was counted on a known series; if not, a new series is started
// when queue accepts ev (a full queue: neither).
func (e *Events) observe(ev eventsv1.Event, now time.Time, queue func(eventsv1.Event) bool) (coalesced, queued bool) {
	k := keyOf(&ev)
	e.mu.Lock()
	defer e.mu.Unlock()
	if s, ok := e.series[k]; ok {
		if now.Sub(s.lastObserved) < e.expiry {
			s.count++
			if now.After(s.lastObserved) {
				s.lastObserved = now
			}
			e.lru.MoveToFront(s.elem)
			return true, false
		}
		e.forget(s)
	}
	if !queue(ev) {
		return false, false
	}
	s := &series{key: k, name: ev.Name, count: 1, lastObserved: now}
	s.elem = e.lru.PushFront(s)
	e.series[k] = s
	for len(e.series) > e.maxSeries {
		e.forget(e.lru.Back().Value.(*series))
	}
	return false, true
}

// forget drops s; e.mu is held.
func (e *Events) forget(s *series) {
	e.lru.Remove(s.elem)
	delete(e.series, s.key)
}

// created records the outcome of ev's POST at now: a failed one forgets
// the series, so the next refusal posts again.
func (e *Events) created(ev *eventsv1.Event, ok bool, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.series[keyOf(ev)]
	if s == nil || s.name != ev.Name {
		return // forgotten (expired or pushed out) meanwhile
	}
	if !ok {
		e.forget(s)
		return
	}
	s.posted, s.sent, s.lastWrite = true, 1, now
}

// seriesPatch is one PATCH to send: the Event and its new series.
type seriesPatch struct {
	key       seriesKey
	name      string
	namespace string
	series    eventsv1.EventSeries
}

// due takes the series to PATCH at now (posted, with refusals the
// apiserver has not been told of, last written an interval ago or more),
// marks them written, forgets expired ones, and says when the next series
// falls due (zero: none waits).
func (e *Events) due(now time.Time) (patches []seriesPatch, next time.Time) {
	return e.pending(now, false)
}

// dueAll takes every series with refusals the apiserver has not been told
// of, however recently written: the last flush, at shutdown.
func (e *Events) dueAll(now time.Time) []seriesPatch {
	patches, _ := e.pending(now, true)
	return patches
}

func (e *Events) pending(now time.Time, all bool) (patches []seriesPatch, next time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for el := e.lru.Back(); el != nil; {
		s := el.Value.(*series)
		el = el.Prev()
		if now.Sub(s.lastObserved) >= e.expiry {
			e.forget(s)
		}
	}
	for _, s := range e.series {
		if !s.posted || s.count <= s.sent {
			continue
		}
		at := s.lastWrite.Add(e.interval)
		if at.After(now) && !all {
			if next.IsZero() || at.Before(next) {
				next = at
			}
			continue
		}
		s.lastWrite = now
		patches = append(patches, seriesPatch{key: s.key, name: s.name, namespace: s.key.namespace,
			series: eventsv1.EventSeries{Count: s.count, LastObservedTime: metav1.NewMicroTime(s.lastObserved)}})
	}
	return patches, next
}

// patched records the outcome of p: the apiserver now has its count, or
// the Event is gone (deleted, or past the apiserver's --event-ttl) and
// the series is forgotten so that the next refusal posts a new Event. Any
// other failure is tried again an interval later.
func (e *Events) patched(p seriesPatch, ok, gone bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.series[p.key]
	if s == nil || s.name != p.name {
		return
	}
	switch {
	case ok && p.series.Count > s.sent:
		s.sent = p.series.Count
	case gone:
		e.forget(s)
	}
}

// patch sends p as a JSON merge patch (RFC 7386), which the apiserver
// takes for every built-in type; it returns the apiserver's last status.
func (e *Events) patch(ctx context.Context, p seriesPatch) (int, error) {
	body, err := json.Marshal(map[string]any{"series": p.series})
	if err != nil {
		return 0, fmt.Errorf("encode series: %w", err)
	}
	return e.sendRetrying(ctx, http.MethodPatch, p.namespace, p.name, "application/merge-patch+json", body, http.StatusOK)
}

// flush PATCHes the series due at now and says when the next falls due.
func (e *Events) flush(ctx context.Context, now time.Time) time.Time {
	patches, next := e.due(now)
	e.sendPatches(ctx, patches)
	return next
}

// sendPatches PATCHes each series and records the outcome.
func (e *Events) sendPatches(ctx context.Context, patches []seriesPatch) {
	for _, p := range patches {
		status, err := e.patch(ctx, p)
		e.patched(p, err == nil, status == http.StatusNotFound)
		if err != nil {
			e.counter("failed").Inc()
			e.logger.Warn("inject: update Event series", "namespace", p.namespace, "event", p.name, "count", p.series.Count, "err", err)
			continue
		}
		e.counter("patched").Inc()
	}
}
