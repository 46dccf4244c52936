package inject

import (
	"bytes"
	"container/list"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Where a pod's service account token and the cluster's CA are mounted.
const (
	inClusterTokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"
	inClusterCAFile    = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
)

// Event fields the injector writes.
const (
	EventReason     = "InferwatchNotInjected"
	eventAction     = "Inject"
	eventController = "inferwatch.io/injector"
	// eventQueue bounds the Events waiting to be posted; more are dropped
	// (and counted) rather than held.
	eventQueue = 64
	// eventTimeout bounds one POST.
	eventTimeout = 5 * time.Second
	// noteLimit is the apiserver's limit on an Event's note.
	noteLimit = 1024
)

// APIServer says how to reach the Kubernetes API: the only call the
// injector makes is creating an Event.
type APIServer struct {
	URL       string // https://host:port
	TokenFile string // bearer token, re-read for every call (projected tokens rotate)
	CAFile    string // PEM CA bundle that signed the apiserver's certificate
}

// InClusterAPIServer is the API as a pod sees it: KUBERNETES_SERVICE_HOST
// and _PORT, the mounted service account token and CA. ok is false outside
// a cluster.
func InClusterAPIServer() (api APIServer, ok bool) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return APIServer{}, false
	}
	return APIServer{URL: "https://" + net.JoinHostPort(host, port), TokenFile: inClusterTokenFile, CAFile: inClusterCAFile}, true
}

// Events posts a Warning Event (events.k8s.io/v1) for every pod the injector
// refused, from one background worker: Refused never blocks, so an
// admission answer never waits on the API, and a full queue drops the Event
// (inferwatch_injector_events_total{result="dropped"}). The same refusal
// again is counted on the Event already posted (series.go).
type Events struct {
	api      APIServer
	client   *http.Client
	instance string
	queue    chan eventsv1.Event
	wake     chan struct{} // a refusal was counted on a series
	logger   *slog.Logger
	metrics  *metrics.Set

	interval  time.Duration // between two writes of one series
	expiry    time.Duration
	maxSeries int

	mu     sync.Mutex
	series map[seriesKey]*series
	lru    *list.List // of *series, the latest seen in front
}

// NewEvents checks api and builds the poster; Run must be started for
// anything to be sent. instance names this replica (reportingInstance);
// interval is the least time between two writes of one Event's series
// (0: DefaultSeriesInterval).
func NewEvents(api APIServer, instance string, interval time.Duration, set *metrics.Set, logger *slog.Logger) (*Events, error) {
	u, err := url.Parse(api.URL)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("inject: kube-api: %q: want https://host:port", api.URL)
	}
	if api.TokenFile == "" {
		return nil, fmt.Errorf("inject: kube-token-file: must be set with kube-api")
	}
	if _, err := os.Stat(api.TokenFile); err != nil {
		return nil, fmt.Errorf("inject: kube-token-file: %w", err)
	}
	if interval < 0 {
		return nil, fmt.Errorf("inject: event series interval %v: must not be negative", interval)
	}
	if interval == 0 {
		interval = DefaultSeriesInterval
	}
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if api.CAFile != "" {
		pem, err := os.ReadFile(api.CAFile)
		if err != nil {
			return nil, fmt.Errorf("inject: kube-ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("inject: kube-ca-file %s: no PEM certificate", api.CAFile)
		}
		tlsCfg.RootCAs = pool
	}
	if len(instance) > 128 { // the apiserver's limit on reportingInstance
		instance = instance[:128]
	}
	e := &Events{
		api:       api,
		client:    &http.Client{Timeout: eventTimeout, Transport: &http.Transport{TLSClientConfig: tlsCfg, MaxIdleConns: 2, IdleConnTimeout: time.Minute}},
		instance:  instance,
		queue:     make(chan eventsv1.Event, eventQueue),
		wake:      make(chan struct{}, 1),
		logger:    logger,
		metrics:   set,
		interval:  interval,
		expiry:    seriesExpiry,
		maxSeries: seriesMax,
		series:    map[seriesKey]*series{},
		lru:       list.New(),
	}
	for _, r := range []string{"posted", "coalesced", "patched", "failed", "dropped"} {
		e.counter(r)
	}
	return e, nil
}

func (e *Events) counter(result string) *metrics.Counter {
	return e.metrics.GetOrCreateCounter(`inferwatch_injector_events_total{result="` + result + `"}`)
}

// Refused queues an Event saying why pod (in namespace ns) runs without
// the sidecar. A pod created by a controller has no name yet at admission;
// the Event then regards its controlling owner (a ReplicaSet, a Job, ...).
// The same refusal again is counted on the Event already queued or posted
// (series.go) rather than queued.
func (e *Events) Refused(ns string, pod *metav1.ObjectMeta, reason string, now time.Time) {
	ev := refusedEvent(ns, pod, reason, e.instance, now)
	coalesced, queued := e.observe(ev, now, func(ev eventsv1.Event) bool {
		select {
		case e.queue <- ev:
			return true
		default:
			return false
		}
	})
	switch {
	case coalesced:
		e.counter("coalesced").Inc()
		select {
		case e.wake <- struct{}{}:
		default:
		}
	case !queued:
		e.counter("dropped").Inc()
	}
}

func refusedEvent(ns string, pod *metav1.ObjectMeta, reason, instance string, now time.Time) eventsv1.Event {
	ref := corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: ns, Name: pod.Name}
	if pod.Name == "" {
		for _, o := range pod.OwnerReferences {
			if o.Controller != nil && *o.Controller {
				ref = corev1.ObjectReference{APIVersion: o.APIVersion, Kind: o.Kind, Namespace: ns, Name: o.Name, UID: o.UID}
				break
			}
		}
	}
	base := pod.Name
	if base == "" {
		base = strings.TrimRight(pod.GenerateName, "-.")
	}
	if base == "" {
		base = "pod"
	}
	// client-go's recorder names Events the same way; the name must stay
	// a DNS subdomain (253 characters), so a long base is cut.
	if len(base) > 200 {
		base = strings.TrimRight(base[:200], "-.")
	}
	note := "inferwatch sidecar not injected into pod "
	if pod.Name != "" {
		note += pod.Name
	} else {
		note += pod.GenerateName + "*"
	}
	note += ": " + reason
	if len(note) > noteLimit {
		// Cut on a rune boundary: a reason can quote a pod's own strings.
		note = strings.ToValidUTF8(note[:noteLimit-3], "") + "..."
	}
	return eventsv1.Event{
		TypeMeta:            metav1.TypeMeta{APIVersion: "events.k8s.io/v1", Kind: "Event"},
		ObjectMeta:          metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", base, now.UnixNano()), Namespace: ns},
		EventTime:           metav1.NewMicroTime(now),
		ReportingController: eventController,
		ReportingInstance:   instance,
		Action:              eventAction,
		Reason:              EventReason,
		Regarding:           ref,
		Note:                note,
		Type:                corev1.EventTypeWarning,
	}
}

// Run posts queued Events and updates their series until ctx ends.
func (e *Events) Run(ctx context.Context) {
	timer := time.NewTimer(e.interval)
	defer timer.Stop()
	// Requests outlive ctx by up to shutdownFlush, so that one in flight
	// when the injector stops still completes instead of being cut off.
	work, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWork()
	defer context.AfterFunc(ctx, func() { time.AfterFunc(shutdownFlush, stopWork) })()
	for {
		select {
		case <-ctx.Done():
			e.drain(ctx)
			return
		case ev := <-e.queue:
			if ctx.Err() != nil { // both were ready: select chose at random
				e.drain(ctx, ev)
				return
			}
			e.create(work, ev, time.Now())
		case <-e.wake:
		case <-timer.C:
		}
		// Whatever woke the worker, the series due now go, and it sleeps
		// until the next falls due (or an interval, to forget old ones).
		now := time.Now()
		wait := e.interval
		if next := e.flush(work, now); !next.IsZero() {
			wait = next.Sub(now)
		}
		timer.Reset(wait)
	}
}

// shutdownFlush bounds what Run spends at its end on Events and counts
// that would otherwise go with the process.
const shutdownFlush = 5 * time.Second

// drain posts the Events still queued and PATCHes every series with
// refusals the apiserver has not been told of, interval or not: a rolling
// update of the injector must not lose the counts of the last interval.
// first are Events already taken from the queue.
func (e *Events) drain(ctx context.Context, first ...eventsv1.Event) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownFlush)
	defer cancel()
	for _, ev := range first {
		e.create(ctx, ev, time.Now())
	}
	for drained := false; !drained && ctx.Err() == nil; {
		select {
		case ev := <-e.queue:
			e.create(ctx, ev, time.Now())
		default:
			drained = true
		}
	}
	e.sendPatches(ctx, e.dueAll(time.Now()))
}

// create POSTs ev, the first of its series, at now.
func (e *Events) create(ctx context.Context, ev eventsv1.Event, now time.Time) {
	body, err := json.Marshal(ev)
	if err == nil {
		_, err = e.sendRetrying(ctx, http.MethodPost, ev.Namespace, "", "application/json", body, http.StatusCreated)
	} else {
		err = fmt.Errorf("encode Event: %w", err)
	}
	e.created(&ev, err == nil, now)
	if err != nil {
		e.counter("failed").Inc()
		e.logger.Warn("inject: post Event", "namespace", ev.Namespace, "regarding", ev.Regarding.Kind+"/"+ev.Regarding.Name, "err", err)
		return
	}
	e.counter("posted").Inc()
}

// sendRetrying tries a request up to three times while the failure is the
// network's or the apiserver's (5xx, 429), not the request's. status is the
// last answer's (0: none).
func (e *Events) sendRetrying(ctx context.Context, method, ns, name, contentType string, body []byte, want int) (status int, err error) {
	for attempt, wait := 0, 500*time.Millisecond; attempt < 3; attempt, wait = attempt+1, wait*2 {
		var retry bool
		if status, retry, err = e.send(ctx, method, ns, name, contentType, body, want); err == nil || !retry {
			return status, err
		}
		select {
		case <-ctx.Done():
			return status, err
		case <-time.After(wait):
		}
	}
	return status, err
}

// send makes one request on the events of ns (name: one Event); want is
// the status of success.
func (e *Events) send(ctx context.Context, method, ns, name, contentType string, body []byte, want int) (status int, retry bool, err error) {
	token, err := os.ReadFile(e.api.TokenFile)
	if err != nil {
		return 0, true, fmt.Errorf("read token: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, eventTimeout)
	defer cancel()
	u := strings.TrimRight(e.api.URL, "/") + "/apis/events.k8s.io/v1/namespaces/" + url.PathEscape(ns) + "/events"
	if name != "" {
		u += "/" + url.PathEscape(name)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return 0, false, fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	resp, err := e.client.Do(req)
	if err != nil {
		return 0, true, fmt.Errorf("%s %s: %w", method, u, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != want {
		retry = resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests
		var st metav1.Status
		if json.Unmarshal(msg, &st) == nil && st.Message != "" {
			return resp.StatusCode, retry, fmt.Errorf("%s %s: %s: %s", method, u, resp.Status, st.Message)
		}
		return resp.StatusCode, retry, fmt.Errorf("%s %s: %s", method, u, resp.Status)
	}
	return resp.StatusCode, false, nil
}
