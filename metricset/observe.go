package metricset

import (
	"github.com/VictoriaMetrics/metrics"
	"github.com/inferwatch/inferwatch/record"
)

// handles are the metrics one call updates, found under the read lock and
// updated after it is released. A nil handle means "not updated by this call".
type handles struct {
	x          *series
	requests   *metrics.Counter
	phases     [len(record.Phases)]*metrics.PrometheusHistogram
	batch      *metrics.PrometheusHistogram
	tensorsIn  *metrics.Counter
	tensorsOut *metrics.Counter
	errKind    *metrics.Counter
	decodeFail *metrics.Counter
}

// stageChunk is how many server stages are resolved per lock round; more
// stages in one call are handled in further rounds.
const stageChunk = 8

// Observe updates the metrics from one finished call. Handles are looked up
// under the read lock; only a call with a label tuple not seen before takes
// the write lock to make them, so the steady state does not allocate.
func (s *Set) Observe(c *record.Call) {
	var h handles
	s.mu.RLock()
	ok := s.resolve(c, &h, false)
	s.mu.RUnlock()
	if !ok {
		s.mu.Lock()
		s.resolve(c, &h, true)
		s.mu.Unlock()
	}
	h.update(c)
	if c.LLM != nil {
		s.observeLLM(h.x, c)
	}
	if len(c.StreamRequests) > 0 {
		s.observeStreamRequests(h.x, c.StreamRequests)
	}

	for rest := c.Stages; len(rest) > 0; {
		n := min(len(rest), stageChunk)
		s.observeStages(h.x, rest[:n])
		rest = rest[n:]
	}
	if c.ClientRTT > 0 {
		s.clientRTT.Update(c.ClientRTT.Seconds())
	}
	if c.UpstreamRTT > 0 {
		s.upstreamRTT.Update(c.UpstreamRTT.Seconds())
	}
}

// resolve fills h for c. Without create it reports false as soon as a label
// or handle is missing; with create (write lock held) it makes what is missing.
func (s *Set) resolve(c *record.Call, h *handles, create bool) bool {
	proto, ok1 := s.protocols.get(c.Protocol, create)
	api, ok2 := s.apis.get(c.API, create)
	model, version := c.Model, c.Version
	if c.Control() {
		// A load's seconds are the model's load time (modelload), not its
		// latency: counted as before the repository extension was
		// recognised, under model "unknown".
		model, version = "", ""
	}
	mv, ok3 := s.models.get(modelVersion{model, version}, create)
	method, ok4 := s.methods.get(c.Method, create)
	code, ok5 := s.codes.get(c.Code, create)
	if !(ok1 && ok2 && ok3 && ok4 && ok5) {
		return false
	}
	key := seriesKey{proto, api, mv.model, mv.version}
	x := s.series[key]
	if x == nil {
		if !create {
			return false
		}
		x = newSeries(s.set, key)
		s.series[key] = x
	}
	h.x = x
	ms := s.set

	if h.requests = x.request(ms, methodCode{method, code}, create); h.requests == nil {
		return false
	}
	for i, name := range record.Phases {
		if _, measured := c.Phase(name); measured {
			if h.phases[i] = x.phase(ms, i, create); h.phases[i] == nil {
				return false
			}
		}
	}
	if c.BatchSize > 0 {
		if h.batch = x.batchSize(ms, create); h.batch == nil {
			return false
		}
	}
	if c.InputCount > 0 {
		if h.tensorsIn = x.tensors(ms, false, create); h.tensorsIn == nil {
			return false
		}
	}
	if c.OutputCount > 0 {
		if h.tensorsOut = x.tensors(ms, true, create); h.tensorsOut == nil {
			return false
		}
	}
	if c.ErrorKind != record.ErrNone {
		kind, ok := s.kinds.get(string(c.ErrorKind), create)
		if !ok {
			return false
		}
		if h.errKind = x.errorCounter(ms, kind, create); h.errKind == nil {
			return false
		}
	}
	// A decode failure already named by ErrorKind is counted once.
	if c.DecodeFail && c.ErrorKind != record.ErrDecode {
		kind, ok := s.kinds.get(string(record.ErrDecode), create)
		if !ok {
			return false
		}
		if h.decodeFail = x.errorCounter(ms, kind, create); h.decodeFail == nil {
			return false
		}
	}
	return true
}

func (h *handles) update(c *record.Call) {
	h.requests.Inc()
	if c.End > 0 {
		h.x.duration.Update(c.Total().Seconds())
	}
	for i, name := range record.Phases {
		if h.phases[i] != nil {
			d, _ := c.Phase(name)
			h.phases[i].Update(d.Seconds())
		}
	}
	if c.RequestBytes > 0 {
		h.x.reqBytes.AddInt64(c.RequestBytes)
	}
	if c.ResponseBytes > 0 {
		h.x.respBytes.AddInt64(c.ResponseBytes)
	}
	if h.batch != nil {
		h.batch.Update(float64(c.BatchSize))
	}
	if h.tensorsIn != nil {
		h.tensorsIn.Add(c.InputCount)
	}
	if h.tensorsOut != nil {
		h.tensorsOut.Add(c.OutputCount)
	}
	if h.errKind != nil {
		h.errKind.Inc()
	}
	if h.decodeFail != nil {
		h.decodeFail.Inc()
	}
}

// observeStages records up to stageChunk server-reported stages of x.
func (s *Set) observeStages(x *series, stages []record.Stage) {
	var hs [stageChunk]*metrics.PrometheusHistogram
	s.mu.RLock()
	ok := s.resolveStages(x, stages, &hs, false)
	s.mu.RUnlock()
	if !ok {
		s.mu.Lock()
		s.resolveStages(x, stages, &hs, true)
		s.mu.Unlock()
	}
	for i, st := range stages {
		hs[i].Update(st.Duration.Seconds()) // negative durations are ignored
	}
}

func (s *Set) resolveStages(x *series, stages []record.Stage, hs *[stageChunk]*metrics.PrometheusHistogram, create bool) bool {
	for i, st := range stages {
		name, ok := s.stages.get(st.Name, create)
		if !ok {
			return false
		}
		if hs[i] = x.stage(s.set, name, create); hs[i] == nil {
			return false
		}
	}
	return true
}
