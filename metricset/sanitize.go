package metricset

import "strings"

// MaxLabelValueLen is the most bytes a sanitised label value keeps.
const MaxLabelValueLen = 64

// Values that stand in for ones that cannot be shown.
const (
	// Other replaces values beyond a cap.
	Other = "other"
	// Unknown replaces empty values.
	Unknown = "unknown"
)

// SanitizeLabelValue makes a request-derived value safe as a label value:
// characters outside [A-Za-z0-9_.:/-] become '_' (one per rune), the result
// is cut to MaxLabelValueLen bytes, and an empty value becomes "unknown".
// A value that is already clean is returned as is, without allocating.
func SanitizeLabelValue(v string) string {
	if v == "" {
		return Unknown
	}
	if len(v) <= MaxLabelValueLen && isClean(v) {
		return v
	}
	var b strings.Builder
	b.Grow(min(len(v), MaxLabelValueLen))
	for _, r := range v {
		if b.Len() == MaxLabelValueLen {
			break
		}
		if r < 0x80 && allowed(byte(r)) {
			b.WriteByte(byte(r))
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

func isClean(v string) bool {
	for i := 0; i < len(v); i++ {
		if !allowed(v[i]) {
			return false
		}
	}
	return true
}

func allowed(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '_', '.', ':', '/', '-':
		return true
	}
	return false
}

// labelString renders name{k1="v1",k2="v2",...} from alternating keys and
// values. Values are sanitised already; escaping keeps it right regardless.
func labelString(name string, kv ...string) string {
	var b strings.Builder
	b.WriteString(name)
	b.WriteByte('{')
	for i := 0; i+1 < len(kv); i += 2 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(kv[i])
		b.WriteString(`="`)
		b.WriteString(EscapeLabelValue(kv[i+1]))
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

// EscapeLabelValue applies the text exposition format's only escapes: \\,
// \" and \n. (Go's %q is not that format: it writes a tab or a
// non-printable rune as \t or \u…, which a reader takes literally.)
func EscapeLabelValue(v string) string {
	if !strings.ContainsAny(v, "\\\"\n") {
		return v
	}
	return labelEscaper.Replace(v)
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
