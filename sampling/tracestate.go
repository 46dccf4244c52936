package sampling

import "strings"

// W3C tracestate limits (https://www.w3.org/TR/trace-context-2/#tracestate-header).
const (
	maxMembers     = 32
	maxValueLen    = 256
	maxKeyLen      = 256
	maxOTValueLen  = 256 // the whole ot value, per the OpenTelemetry tracestate handling spec
	maxTraceHeader = 16 << 10
)

// traceState is what the sampler reads from an incoming tracestate. It holds
// substrings of the header: parsing does not allocate.
type traceState struct {
	// valid: a W3C list (well-formed members, unique keys, at most 32).
	// A list that is not valid is dropped, as W3C lets a vendor do.
	valid bool
	// clean: valid, and every strict parser (OpenTelemetry Go's among them)
	// takes it verbatim: no whitespace-only members.
	clean bool

	hasOT bool
	ot    string // the ot member's value
	otOK  bool   // ot value is key:value;... with unique keys (OTel tracestate handling)

	thSet, thOK bool // th present / present and a valid threshold
	th          uint64
	rvSet, rvOK bool // rv present / present and valid
	rv          uint64
}

// parseTraceState reads a tracestate header value. It never panics and does
// not allocate.
func parseTraceState(s string) traceState {
	var ts traceState
	if len(s) > maxTraceHeader {
		return ts
	}
	var keys [maxMembers]string
	n := 0
	ts.clean = true
	for rest, more := s, true; more; {
		var m string
		m, rest, more = strings.Cut(rest, ",")
		member := trimOWS(m)
		if member == "" {
			if m != "" {
				ts.clean = false
			}
			continue
		}
		k, v, ok := strings.Cut(member, "=")
		if !ok || !validKey(k) || !validValue(v) {
			return traceState{}
		}
		for _, prev := range keys[:n] {
			if prev == k {
				return traceState{}
			}
		}
		if n == maxMembers {
			return traceState{}
		}
		keys[n] = k
		n++
		if k == "ot" {
			ts.hasOT, ts.ot = true, v
			ts.readOT(v)
		}
	}
	ts.valid = true
	return ts
}

// readOT reads the OpenTelemetry sub-keys: th (threshold) and rv (explicit
// randomness). Unknown sub-keys are kept when the entry is rewritten.
func (ts *traceState) readOT(v string) {
	if len(v) > maxOTValueLen {
		return
	}
	for start := 0; start <= len(v); {
		end := strings.IndexByte(v[start:], ';')
		if end < 0 {
			end = len(v)
		} else {
			end += start
		}
		k, val, ok := strings.Cut(v[start:end], ":")
		if !ok || !validOTKey(k) || !validOTValue(val) || otHasKey(v[:max(start-1, 0)], k) {
			ts.thSet, ts.thOK, ts.rvSet, ts.rvOK = false, false, false, false
			return
		}
		switch k {
		case "th":
			ts.thSet = true
			ts.th, ts.thOK = parseTH(val)
		case "rv":
			ts.rvSet = true
			ts.rv, ts.rvOK = parseRV(val)
		}
		start = end + 1
	}
	ts.otOK = true
}

// otHasKey reports whether the ot sub-key list s has key k.
func otHasKey(s, k string) bool {
	if s == "" {
		return false
	}
	for sub := range strings.SplitSeq(s, ";") {
		if sk, _, _ := strings.Cut(sub, ":"); sk == k {
			return true
		}
	}
	return false
}

// rewriteTraceState returns the valid tracestate s with its ot member's th
// set to th, or removed when th is "". Following W3C, the modified ot member
// moves to the front and other members keep their order; an ot value that
// does not parse is replaced whole (it cannot be edited safely), and an ot
// member left empty is dropped. Whitespace-only members go.
func rewriteTraceState(s string, ts *traceState, th string) string {
	ot := otValue(ts, th)
	var b strings.Builder
	b.Grow(len(s) + len(th) + len("ot=th:,"))
	if ot != "" {
		b.WriteString("ot=")
		b.WriteString(ot)
	}
	writeMembers(&b, s, true, ot != "")
	return b.String()
}

// otValue is the ot value with th set (or removed when th is ""), other
// sub-keys kept in order.
func otValue(ts *traceState, th string) string {
	var b strings.Builder
	if th != "" {
		b.WriteString("th:")
		b.WriteString(th)
	}
	if ts.hasOT && ts.otOK {
		for sub := range strings.SplitSeq(ts.ot, ";") {
			if k, _, _ := strings.Cut(sub, ":"); k == "th" {
				continue
			}
			if b.Len() > 0 {
				b.WriteByte(';')
			}
			b.WriteString(sub)
		}
	}
	if b.Len() > maxOTValueLen {
		// Only when adding th to a nearly full entry: the spec caps the
		// value at 256 and the threshold is what must travel.
		return "th:" + th
	}
	return b.String()
}

// canonicalTraceState returns the valid tracestate s without OWS and
// whitespace-only members, members in their order, nothing else changed.
func canonicalTraceState(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	writeMembers(&b, s, false, false)
	return b.String()
}

// writeMembers appends the members of the valid tracestate s, trimmed, to b,
// skipping ot when skipOT; counted is whether b already holds one member.
// It stops at maxMembers, dropping from the end as W3C asks when truncating.
func writeMembers(b *strings.Builder, s string, skipOT, counted bool) {
	n := 0
	if counted {
		n = 1
	}
	for rest, more := s, true; more && n < maxMembers; {
		var m string
		m, rest, more = strings.Cut(rest, ",")
		member := trimOWS(m)
		if member == "" {
			continue
		}
		if skipOT && strings.HasPrefix(member, "ot=") {
			continue
		}
		if n > 0 {
			b.WriteByte(',')
		}
		b.WriteString(member)
		n++
	}
}

// trimOWS removes the optional whitespace (space, tab) around a member.
func trimOWS(s string) string {
	return strings.Trim(s, " \t")
}

// validKey checks a list-member key with Trace Context Level 2's grammar
// (https://www.w3.org/TR/trace-context-2/#key):
//
//	key = ( lcalpha / DIGIT ) 0*255 ( keychar )
//	keychar = lcalpha / DIGIT / "_" / "-" / "*" / "/" / "@"
//
// It takes every Level 1 key (simple and tenant@system) and more: a key
// that starts with a digit, several '@', a longer tenant or system. Such a
// list is the client's and valid, so it is propagated; OpenTelemetry Go's
// parser is Level 1, so the sidecar's own spans then carry no tracestate.
func validKey(k string) bool {
	if k == "" || len(k) > maxKeyLen {
		return false
	}
	if c := k[0]; !isLower(c) && !isDigit(c) {
		return false
	}
	for i := 1; i < len(k); i++ {
		c := k[i]
		if !isLower(c) && !isDigit(c) && c != '_' && c != '-' && c != '*' && c != '/' && c != '@' {
			return false
		}
	}
	return true
}

// validValue checks a list-member value: 1 to 256 printable ASCII
// characters but ',' and '=', not ending in a space.
func validValue(v string) bool {
	if len(v) == 0 || len(v) > maxValueLen || v[len(v)-1] == ' ' {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c > 0x7e || c == ',' || c == '=' {
			return false
		}
	}
	return true
}

// validOTKey: lcalpha *(lcalpha / DIGIT).
func validOTKey(k string) bool {
	if k == "" || !isLower(k[0]) {
		return false
	}
	for i := 1; i < len(k); i++ {
		if !isLower(k[i]) && !isDigit(k[i]) {
			return false
		}
	}
	return true
}

// validOTValue: *(ALPHA / DIGIT / "." / "_" / "-").
func validOTValue(v string) bool {
	for i := 0; i < len(v); i++ {
		c := v[i]
		if !isLower(c) && !isDigit(c) && !('A' <= c && c <= 'Z') && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

func isLower(c byte) bool { return 'a' <= c && c <= 'z' }
func isDigit(c byte) bool { return '0' <= c && c <= '9' }
