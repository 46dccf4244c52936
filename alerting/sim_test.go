package alerting

import (
	"context"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/inferwatch/inferwatch/record"
)

// t0 is on a minute boundary: window k spans t0+10k s .. t0+10(k+1) s.
var t0 = time.Unix(1_700_000_040, 0)

const window = 10 * time.Second

// shape is one call's phases.
type shape struct {
	ingress, upstream, transfer, egress time.Duration
	stages                              []record.Stage
}

func (s shape) call(model string, end time.Time) *record.Call {
	c := &record.Call{
		Model:    model,
		Version:  "1",
		Protocol: record.ProtocolGRPC,
		Code:     "OK",
		Stages:   s.stages,
	}
	c.RequestEnd = s.ingress
	c.UpstreamSent = s.ingress
	c.FirstByte = c.UpstreamSent + s.upstream
	c.ResponseEnd = c.FirstByte + s.transfer
	c.End = c.ResponseEnd + s.egress + 10*time.Microsecond
	c.Egress = s.egress
	c.Start = end.Add(-c.End)
	return c
}

func lognormal(r *rand.Rand, median time.Duration, sigma float64) time.Duration {
	return time.Duration(float64(median) * math.Exp(sigma*r.NormFloat64()))
}

// recorder is a Notifier that keeps what it was sent, by window.
type recorder struct {
	mu   sync.Mutex
	k    int
	sent []sent
}

type sent struct {
	window int
	alert  Alert
}

func (r *recorder) Notify(_ context.Context, alerts []Alert) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, a := range alerts {
		r.sent = append(r.sent, sent{r.k, a})
	}
}

// of returns the notifications of one rule as (window, state) pairs.
func (r *recorder) of(rule string) []sent {
	var out []sent
	for _, s := range r.sent {
		if s.alert.Labels["alertname"] == rule {
			out = append(out, s)
		}
	}
	return out
}

// sim drives an engine window by window on simulated time.
type sim struct {
	t     *testing.T
	e     *Engine
	rec   *recorder
	r     *rand.Rand
	k     int                // next window
	state map[string][]State // per rule, the state after each window ("" inactive)
}

func newSim(t *testing.T, o Options) *sim {
	t.Helper()
	rec := &recorder{}
	o.Notifiers = append(o.Notifiers, rec)
	e, err := NewEngine(o)
	if err != nil {
		t.Fatal(err)
	}
	return &sim{t: t, e: e, rec: rec, r: rand.New(rand.NewPCG(42, 1)), state: map[string][]State{}}
}

// window feeds n calls spread over the next window, shaped by gen, for each
// model, then ticks at the window's end.
func (s *sim) window(n int, gen func(r *rand.Rand, i int) shape, models ...string) {
	if len(models) == 0 {
		models = []string{"m"}
	}
	start := t0.Add(time.Duration(s.k) * window)
	for i := range n {
		end := start.Add(time.Duration(i) * window / time.Duration(n))
		sh := gen(s.r, i)
		for _, m := range models {
			s.e.Observe(sh.call(m, end))
		}
	}
	s.tick(start.Add(window), models[0])
}

// tick ends window s.k at `at` and notes the rules' states for model.
func (s *sim) tick(at time.Time, model string) {
	s.rec.k = s.k
	s.e.Tick(context.Background(), at)
	cur := map[string]State{}
	for _, a := range s.e.Alerts() {
		if a.State != StateResolved && a.Labels["model"] == model {
			cur[a.Labels["alertname"]] = a.State
		}
	}
	for _, r := range ruleNames {
		s.state[r] = append(s.state[r], cur[r])
	}
	s.k++
}

// firstState returns the first window where rule reached st, or -1.
func (s *sim) firstState(rule string, st State, from int) int {
	for k := from; k < len(s.state[rule]); k++ {
		if s.state[rule][k] == st {
			return k
		}
	}
	return -1
}

// steady is the stationary stream: phases around 1 ms + 20 ms + 1 ms.
func steady(r *rand.Rand, _ int) shape {
	return shape{
		ingress:  lognormal(r, time.Millisecond, 0.2),
		upstream: lognormal(r, 20*time.Millisecond, 0.25),
		transfer: lognormal(r, time.Millisecond, 0.2),
	}
}

// tailSpike is steady with 3% of calls 250 ms slower upstream: a P99 spike
// that leaves the mean nearly where it was.
func tailSpike(r *rand.Rand, i int) shape {
	sh := steady(r, i)
	if r.Float64() < 0.03 {
		sh.upstream += 250 * time.Millisecond
	}
	return sh
}
