package metricset

import (
	"bytes"
	"io"
	"maps"
	"sync"
)

// help is the # HELP text of each family this package owns. The library
// writes bare "# HELP name" lines; WritePrometheus fills in these texts.
var help = map[string]string{
	"inferwatch_requests_total":                           "Inference calls seen by the sidecar, by method and status code.",
	"inferwatch_request_duration_seconds":                 "Call duration from request headers received to response complete, as the client connection sees it at the sidecar.",
	"inferwatch_phase_duration_seconds":                   "Duration of each phase of a call (ingress, decode, upstream, transfer, egress), when measured.",
	"inferwatch_server_stage_duration_seconds":            "Durations the server reported for its own stages (Server-Timing).",
	"inferwatch_request_bytes_total":                      "Request body bytes read from clients.",
	"inferwatch_response_bytes_total":                     "Response body bytes read from the upstream.",
	"inferwatch_batch_size":                               "Leading dimension of the first input tensor, when known.",
	"inferwatch_tensors_total":                            "Input and output tensors carried by calls.",
	"inferwatch_errors_total":                             "Sidecar-observed failures by kind, plus payloads that did not decode.",
	"inferwatch_network_rtt_seconds":                      "Kernel-smoothed TCP round-trip time of the client and upstream connections.",
	"inferwatch_records_dropped_total":                    "Call records dropped because the pipeline queue was full.",
	"inferwatch_llm_time_to_first_token_seconds":          "Streamed generations: request headers received until the first output event was flushed to the client (TTFT).",
	"inferwatch_llm_time_to_first_token_upstream_seconds": "Streamed generations: the upstream's share of the TTFT, request handed over until the first output event arrived from it.",
	"inferwatch_llm_inter_token_latency_seconds":          "Streamed generations: each gap between consecutive output events as flushed to the client (ITL).",
	"inferwatch_llm_time_per_output_token_seconds":        "Time per output token after the first (TPOT): first to last output event over the tokens between; for an answer not streamed, upstream time over its tokens.",
	"inferwatch_llm_e2e_seconds":                          "Generative calls end to end: request headers received until the response was complete to the client.",
	"inferwatch_llm_output_tokens_per_second":             "Output tokens over the call's end-to-end time.",
	"inferwatch_llm_stage_duration_seconds":               "Generation stages: queue (server-reported), prefill (upstream share of the TTFT less that queue), decode (first to last output event).",
	"inferwatch_llm_prompt_tokens_total":                  "Prompt tokens the server reported in usage.",
	"inferwatch_llm_output_tokens_total":                  "Output tokens: source=usage as the server reported them, source=events counted from output events where it sent no usage (an estimate).",
	"inferwatch_llm_finish_total":                         "Generations by finish_reason (stop, length, tool_calls, content_filter, function_call, other).",
	"inferwatch_llm_client_disconnects_total":             "Streamed generations the client left before the end.",
}

// helpTable holds the # HELP texts of the families other packages register
// in a Set: each package keeps its texts beside its metrics (a MetricHelp
// function) and the assembly hands them over with AddHelp.
type helpTable struct {
	mu    sync.RWMutex
	texts map[string]string
}

// AddHelp adds # HELP texts for families other packages register in the
// set, keyed by family name. A family this package owns keeps its own text.
func (s *Set) AddHelp(texts map[string]string) {
	s.help.mu.Lock()
	defer s.help.mu.Unlock()
	if s.help.texts == nil {
		s.help.texts = make(map[string]string, len(texts))
	}
	maps.Copy(s.help.texts, texts)
}

func (s *Set) helpText(name string) (string, bool) {
	if text, ok := help[name]; ok {
		return text, true
	}
	s.help.mu.RLock()
	defer s.help.mu.RUnlock()
	text, ok := s.help.texts[name]
	return text, ok
}

// WritePrometheus writes every metric of the set, including those other
// packages registered, in the Prometheus text format with # HELP and # TYPE.
func (s *Set) WritePrometheus(w io.Writer) {
	var in, out bytes.Buffer
	s.set.WritePrometheus(&in)
	out.Grow(in.Len() + 2048)
	for rest := in.Bytes(); len(rest) > 0; {
		var line []byte
		line, rest, _ = bytes.Cut(rest, []byte("\n"))
		out.Write(line)
		if name, ok := bytes.CutPrefix(line, []byte("# HELP ")); ok {
			if text, known := s.helpText(string(name)); known {
				out.WriteByte(' ')
				out.WriteString(text)
			}
		}
		out.WriteByte('\n')
	}
	w.Write(out.Bytes()) //nolint:errcheck // a scrape that fails to write has gone away
}
