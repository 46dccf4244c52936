package inferapi

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/inferwatch/inferwatch/record"
)

// Bounds on what a Server-Timing header contributes: its names become metric
// labels and its values come from the upstream, so both are kept small.
const (
	maxStages    = 16
	maxStageName = 32
	maxStageMs   = 1e12 // about 31 years: anything longer is garbage, and overflows a Duration soon after
)

// StageSourceServerTiming is the Source of stages read from Server-Timing.
const StageSourceServerTiming = "server-timing"

// ParseServerTiming appends to dst a stage for each W3C Server-Timing entry
// (`name;dur=12.3;desc="x", other;dur=4`) in the header values, until dst
// holds 16 Server-Timing stages: the bound is the record's, whether a front
// passes all values at once or calls once per header field (the HTTP/2
// plane), or for headers and then trailers (gRPC).
// Durations are milliseconds; entries without a usable dur are skipped, as is
// anything malformed. Names are cut to 32 bytes of [A-Za-z0-9_.-], other
// bytes becoming '_'.
func ParseServerTiming(values []string, dst []record.Stage) []record.Stage {
	added := 0
	for _, st := range dst {
		if st.Source == StageSourceServerTiming {
			added++
		}
	}
	for _, v := range values {
		for len(v) > 0 && added < maxStages {
			var entry string
			entry, v = cutOutsideQuotes(v, ',')
			name, dur, ok := serverTimingEntry(entry)
			if !ok {
				continue
			}
			dst = append(dst, record.Stage{Name: name, Duration: dur, Source: StageSourceServerTiming})
			added++
		}
	}
	return dst
}

// serverTimingEntry reads one `name *(;param)` entry; ok says it had a name
// and a dur.
func serverTimingEntry(entry string) (name string, dur time.Duration, ok bool) {
	name, params := cutOutsideQuotes(entry, ';')
	name = stageName(strings.TrimSpace(name))
	if name == "" {
		return "", 0, false
	}
	for len(params) > 0 {
		var param string
		param, params = cutOutsideQuotes(params, ';')
		key, val, _ := strings.Cut(param, "=")
		if !strings.EqualFold(strings.TrimSpace(key), "dur") {
			continue
		}
		// Only the first dur counts, as the specification says.
		dur, ok = milliseconds(unquote(strings.TrimSpace(val)))
		return name, dur, ok
	}
	return "", 0, false
}

// milliseconds converts a dur value; negative, non-finite or absurd values are
// unusable.
func milliseconds(s string) (time.Duration, bool) {
	ms, err := strconv.ParseFloat(s, 64)
	if err != nil || ms < 0 || math.IsNaN(ms) || ms > maxStageMs {
		return 0, false
	}
	return time.Duration(ms * float64(time.Millisecond)), true
}

// cutOutsideQuotes splits s at the first sep that is not inside a quoted
// string; an unterminated quote runs to the end.
func cutOutsideQuotes(s string, sep byte) (before, after string) {
	quoted := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case quoted && c == '\\':
			i++
		case c == '"':
			quoted = !quoted
		case !quoted && c == sep:
			return s[:i], s[i+1:]
		}
	}
	return s, ""
}

// unquote strips a quoted-string's quotes and escapes; a token is returned
// as it is.
func unquote(s string) string {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return s
	}
	s = s[1 : len(s)-1]
	if strings.IndexByte(s, '\\') < 0 {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// stageName makes a name safe as a metric label: at most maxStageName bytes,
// each in [A-Za-z0-9_.-]. It allocates only when it changes the name.
func stageName(s string) string {
	s = s[:min(len(s), maxStageName)]
	clean := true
	for i := 0; i < len(s) && clean; i++ {
		clean = labelByte(s[i])
	}
	if clean {
		return s
	}
	b := []byte(s)
	for i, c := range b {
		if !labelByte(c) {
			b[i] = '_'
		}
	}
	return string(b)
}

func labelByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-'
}

// StageSourceTGI is the Source of stages read from Text Generation
// Inference's x-*-time response headers.
const StageSourceTGI = "tgi"

// tgiStages maps TGI's timing headers (whole milliseconds) to stage names:
// queue as Server-Timing and the LLM metrics name it.
var tgiStages = [...]struct{ header, stage string }{
	{"x-validation-time", "validation"},
	{"x-queue-time", "queue"},
	{"x-inference-time", "inference"},
}

// ParseTGITimes appends to dst the stages Hugging Face TGI reports in its
// x-validation-time, x-queue-time and x-inference-time headers (sent on
// answers that were not streamed), as every front reads them on an
// OpenAI-compatible route. get looks a header up by its lower-case name,
// as HTTP/2 and Envoy spell it (http.Header.Get takes that too). Values
// that are not a non-negative number of milliseconds are skipped.
func ParseTGITimes(get func(name string) string, dst []record.Stage) []record.Stage {
	for _, t := range tgiStages {
		v := get(t.header)
		if v == "" {
			continue
		}
		ms, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || ms < 0 || ms > 1e9 {
			continue
		}
		dst = append(dst, record.Stage{Name: t.stage, Duration: time.Duration(ms * float64(time.Millisecond)), Source: StageSourceTGI})
	}
	return dst
}
