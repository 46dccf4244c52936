package inject

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// fakeAPI stands in for the apiserver's events.k8s.io/v1 Events: it
// records each request as a line and answers the n-th with status[n], or
// with success.
type fakeAPI struct {
	t0     time.Time
	status map[int]int

	mu    sync.Mutex
	names map[string]string // Event name -> the label of the pod it is about
	reqs  []string
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(f.reqs)
	body, _ := io.ReadAll(r.Body)
	rest, ok := strings.CutPrefix(r.URL.Path, "/apis/events.k8s.io/v1/namespaces/")
	parts := strings.Split(rest, "/")
	if r.Header.Get("Authorization") != "Bearer tok" || !ok || len(parts) < 2 || parts[1] != "events" {
		f.reqs = append(f.reqs, fmt.Sprintf("bad request %s %s", r.Method, r.URL.Path))
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	var line string
	switch {
	case r.Method == http.MethodPost && len(parts) == 2 && r.Header.Get("Content-Type") == "application/json":
		var ev eventsv1.Event
		if err := json.Unmarshal(body, &ev); err != nil || ev.Namespace != parts[0] || ev.Series != nil {
			line = fmt.Sprintf("bad POST body %s: %v", body, err)
		} else {
			line = "POST " + f.names[ev.Name]
		}
	case r.Method == http.MethodPatch && len(parts) == 3 && r.Header.Get("Content-Type") == "application/merge-patch+json":
		// Exactly the series and nothing else.
		var p struct {
			Series *eventsv1.EventSeries `json:"series"`
		}
		dec := json.NewDecoder(strings.NewReader(string(body)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&p); err != nil || p.Series == nil {
			line = fmt.Sprintf("bad PATCH body %s: %v", body, err)
		} else {
			line = fmt.Sprintf("PATCH %s count=%d last=%v", f.names[parts[2]], p.Series.Count, p.Series.LastObservedTime.Sub(f.t0))
		}
	default:
		line = fmt.Sprintf("bad request %s %s %s", r.Method, r.URL.Path, r.Header.Get("Content-Type"))
	}
	f.reqs = append(f.reqs, line)
	status := f.status[n]
	switch {
	case status != 0:
	case r.Method == http.MethodPost:
		status = http.StatusCreated
	default:
		status = http.StatusOK
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(metav1.Status{Message: http.StatusText(status)})
}

func (f *fakeAPI) requests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.reqs...)
}

// startFakeAPI serves f over TLS and builds an Events posting to it.
func startFakeAPI(t *testing.T, f *fakeAPI, interval time.Duration) (*Events, *metrics.Set) {
	t.Helper()
	srv := httptest.NewTLSServer(f)
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	tok, ca := filepath.Join(dir, "token"), filepath.Join(dir, "ca.crt")
	os.WriteFile(tok, []byte("tok\n"), 0o600)
	os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600)
	set := metrics.NewSet()
	e, err := NewEvents(APIServer{URL: srv.URL, TokenFile: tok, CAFile: ca}, "iw-0", interval, set, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return e, set
}

// refusals the tests make: the pods (and why) by label.
var seriesPods = func() map[string]struct {
	ns     string
	pod    metav1.ObjectMeta
	reason string
} {
	ctrl := true
	owned := func(uid string) metav1.ObjectMeta {
		return metav1.ObjectMeta{GenerateName: "web-rs-", OwnerReferences: []metav1.OwnerReference{
			{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-rs", UID: types.UID(uid), Controller: &ctrl}}}
	}
	return map[string]struct {
		ns     string
		pod    metav1.ObjectMeta
		reason string
	}{
		"rs":          {"models", owned("u1"), "no ports"},
		"rs-reason":   {"models", owned("u1"), "bad annotation"},
		"rs-new-uid":  {"models", owned("u2"), "no ports"},
		"rs-other-ns": {"prod", owned("u1"), "no ports"},
		"named-a":     {"models", metav1.ObjectMeta{Name: "a"}, "no ports"},
		"named-b":     {"models", metav1.ObjectMeta{Name: "b"}, "no ports"},
	}
}()

// TestEventSeries drives the coalescing step by step on a clock of its own
// (the worker's parts, not Run): which requests reach the apiserver, with
// what series, and what is counted.
func TestEventSeries(t *testing.T) {
	type step struct {
		op  string // refuse (pod), create (POST what is queued), flush (PATCH what is due)
		pod string
		at  time.Duration
	}
	refuse := func(pod string, at time.Duration) step { return step{"refuse", pod, at} }
	create := func(at time.Duration) step { return step{"create", "", at} }
	flush := func(at time.Duration) step { return step{"flush", "", at} }
	for _, tc := range []struct {
		name    string
		max     int         // series remembered (0: seriesMax)
		status  map[int]int // the n-th request's answer (default: success)
		steps   []step
		want    []string
		results map[string]uint64 // inferwatch_injector_events_total by result
	}{
		{
			name:    "one refusal: one POST, nothing to patch",
			steps:   []step{refuse("rs", 0), create(0), flush(30 * time.Second), flush(10 * time.Minute)},
			want:    []string{"POST rs"},
			results: map[string]uint64{"posted": 1},
		},
		{
			name: "repeats are counted, patched once an interval",
			steps: []step{refuse("rs", 0), create(0), refuse("rs", time.Second), refuse("rs", 2*time.Second),
				flush(10 * time.Second), flush(30 * time.Second), flush(31 * time.Second),
				refuse("rs", 40*time.Second), flush(50 * time.Second), flush(60 * time.Second), flush(2 * time.Minute)},
			want:    []string{"POST rs", "PATCH rs count=3 last=2s", "PATCH rs count=4 last=40s"},
			results: map[string]uint64{"posted": 1, "coalesced": 3, "patched": 2},
		},
		{
			name:    "a repeat before the POST counts on it",
			steps:   []step{refuse("rs", 0), refuse("rs", time.Second), create(2 * time.Second), flush(3 * time.Second), flush(32 * time.Second)},
			want:    []string{"POST rs", "PATCH rs count=2 last=1s"},
			results: map[string]uint64{"posted": 1, "coalesced": 1, "patched": 1},
		},
		{
			name: "another reason, owner uid, namespace or pod name is another Event",
			steps: []step{refuse("rs", 0), refuse("rs-reason", 1), refuse("rs-new-uid", 2), refuse("rs-other-ns", 3),
				refuse("named-a", 4), refuse("named-b", 5), create(time.Second), flush(time.Minute)},
			want:    []string{"POST rs", "POST rs-reason", "POST rs-new-uid", "POST rs-other-ns", "POST named-a", "POST named-b"},
			results: map[string]uint64{"posted": 6},
		},
		{
			name:    "a series not seen for 30 minutes is forgotten",
			steps:   []step{refuse("rs", 0), create(0), refuse("rs", 30*time.Minute), create(30 * time.Minute), flush(31 * time.Minute)},
			want:    []string{"POST rs", "POST rs"},
			results: map[string]uint64{"posted": 2},
		},
		{
			name: "the series seen longest ago is pushed out",
			max:  2,
			steps: []step{refuse("named-a", 0), refuse("rs", 1), refuse("named-a", 2), refuse("named-b", 3), create(time.Second),
				refuse("named-a", 2*time.Second), refuse("rs", 3*time.Second), create(4 * time.Second), flush(time.Minute)},
			want:    []string{"POST named-a", "POST rs", "POST named-b", "POST rs", "PATCH named-a count=3 last=2s"},
			results: map[string]uint64{"posted": 4, "coalesced": 2, "patched": 1},
		},
		{
			name:    "a failed POST forgets the series",
			status:  map[int]int{0: http.StatusForbidden},
			steps:   []step{refuse("rs", 0), create(0), refuse("rs", time.Second), create(time.Second), flush(time.Minute)},
			want:    []string{"POST rs", "POST rs"},
			results: map[string]uint64{"posted": 1, "failed": 1},
		},
		{
			name:   "an Event gone (404) is posted anew at the next refusal",
			status: map[int]int{1: http.StatusNotFound},
			steps: []step{refuse("rs", 0), create(0), refuse("rs", time.Second), flush(30 * time.Second),
				refuse("rs", 40*time.Second), create(40 * time.Second), flush(2 * time.Minute)},
			want:    []string{"POST rs", "PATCH rs count=2 last=1s", "POST rs"},
			results: map[string]uint64{"posted": 2, "coalesced": 1, "failed": 1},
		},
		{
			name:   "another failed PATCH is tried again an interval later",
			status: map[int]int{1: http.StatusUnprocessableEntity},
			steps: []step{refuse("rs", 0), create(0), refuse("rs", time.Second), flush(30 * time.Second),
				flush(59 * time.Second), flush(60 * time.Second), flush(2 * time.Minute)},
			want:    []string{"POST rs", "PATCH rs count=2 last=1s", "PATCH rs count=2 last=1s"},
			results: map[string]uint64{"posted": 1, "coalesced": 1, "patched": 1, "failed": 1},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t0 := time.Date(2026, 12, 4, 2, 0, 0, 0, time.UTC)
			f := &fakeAPI{t0: t0, status: tc.status, names: map[string]string{}}
			e, set := startFakeAPI(t, f, 30*time.Second)
			if tc.max > 0 {
				e.maxSeries = tc.max
			}
			ctx := context.Background()
			for _, s := range tc.steps {
				now := t0.Add(s.at)
				switch s.op {
				case "refuse":
					p := seriesPods[s.pod]
					f.mu.Lock()
					f.names[refusedEvent(p.ns, &p.pod, p.reason, e.instance, now).Name] = s.pod
					f.mu.Unlock()
					e.Refused(p.ns, &p.pod, p.reason, now)
				case "create":
					for len(e.queue) > 0 {
						e.create(ctx, <-e.queue, now)
					}
				case "flush":
					e.flush(ctx, now)
				}
			}
			if got := f.requests(); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("requests\n got %q\nwant %q", got, tc.want)
			}
			for _, r := range []string{"posted", "coalesced", "patched", "failed", "dropped"} {
				if got := set.GetOrCreateCounter(`inferwatch_injector_events_total{result="` + r + `"}`).Get(); got != tc.results[r] {
					t.Errorf("events_total{result=%q} %d, want %d", r, got, tc.results[r])
				}
			}
		})
	}
}

// TestEventSeriesRun: the worker itself, on the real clock with a short
// interval, turns a burst of refusals into one POST and PATCHes whose last
// count is the burst's size.
func TestEventSeriesRun(t *testing.T) {
	const burst = 20
	f := &fakeAPI{t0: time.Now(), names: map[string]string{}}
	e, set := startFakeAPI(t, f, 50*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	p := seriesPods["rs"]
	for i := 0; i < burst; i++ {
		now := time.Now()
		f.mu.Lock()
		f.names[refusedEvent(p.ns, &p.pod, p.reason, e.instance, now).Name] = "rs"
		f.mu.Unlock()
		e.Refused(p.ns, &p.pod, p.reason, now)
		if i == burst/2 {
			time.Sleep(100 * time.Millisecond) // let some go out mid-burst
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	want := fmt.Sprintf("PATCH rs count=%d ", burst)
	for {
		reqs := f.requests()
		if n := len(reqs); n > 0 && strings.HasPrefix(reqs[n-1], want) {
			if reqs[0] != "POST rs" {
				t.Errorf("first request %q, want POST rs", reqs[0])
			}
			for _, r := range reqs[1:] {
				if !strings.HasPrefix(r, "PATCH rs count=") {
					t.Errorf("request %q, want only PATCHes of the one Event after its POST", r)
				}
			}
			if got := set.GetOrCreateCounter(`inferwatch_injector_events_total{result="coalesced"}`).Get(); got != burst-1 {
				t.Errorf("coalesced %d, want %d", got, burst-1)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q within 30 s; requests: %q", want, reqs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestEventSeriesFlushedAtShutdown: refusals counted since the last PATCH
// (here: since the POST, the interval being an hour) and an Event still
// queued go to the apiserver when the worker stops, not with the process.
func TestEventSeriesFlushedAtShutdown(t *testing.T) {
	const repeats = 7
	f := &fakeAPI{t0: time.Now(), names: map[string]string{}}
	e, _ := startFakeAPI(t, f, time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.Run(ctx); close(done) }()
	refuse := func(name string) {
		p := seriesPods[name]
		now := time.Now()
		f.mu.Lock()
		f.names[refusedEvent(p.ns, &p.pod, p.reason, e.instance, now).Name] = name
		f.mu.Unlock()
		e.Refused(p.ns, &p.pod, p.reason, now)
	}
	refuse("rs")
	for deadline := time.Now().Add(10 * time.Second); len(f.requests()) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first refusal was not posted within 10 s")
		}
	}
	for range repeats {
		refuse("rs")
	}
	refuse("named-a") // queued just before the stop: posted by the worker or by its drain
	cancel()
	<-done
	reqs := f.requests()
	want := fmt.Sprintf("PATCH rs count=%d ", repeats+1)
	if n := len(reqs); n != 3 || reqs[0] != "POST rs" ||
		!slices.ContainsFunc(reqs[1:], func(r string) bool { return strings.HasPrefix(r, want) }) ||
		!slices.Contains(reqs[1:], "POST named-a") {
		t.Fatalf("requests %q, want POST rs, then %q… and POST named-a", reqs, want)
	}
}
