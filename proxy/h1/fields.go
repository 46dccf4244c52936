package h1

import (
	"bytes"
	"net/http"
	"strings"
)

// field is one header line of a head: its name is [start, colon), its
// value (colon, end).
type field struct{ start, colon, end int }

// checkField validates one header line, canonicalises its name in place
// and returns its colon's offset, or what is wrong with it.
func checkField(line []byte) (colon int, problem string) {
	if line[0] == ' ' || line[0] == '\t' {
		return 0, "obsolete line folding in header"
	}
	colon = bytes.IndexByte(line, ':')
	switch {
	case colon <= 0:
		return 0, "malformed header line"
	case !validToken(line[:colon]):
		return 0, "invalid header field name"
	case !validValue(line[colon+1:]):
		return 0, "invalid header field value"
	}
	canonicalize(line[:colon])
	return colon, ""
}

// header builds a head's fields from the one string of its bytes, all:
// every name and value is cut from it, and the values share one slice.
func header(all string, fields []field) http.Header {
	hdr := make(http.Header, len(fields))
	vals := make([]string, len(fields))
	for i, f := range fields {
		k := all[f.start:f.colon]
		vals[i] = strings.Trim(all[f.colon+1:f.end], " \t")
		if vv, ok := hdr[k]; ok {
			hdr[k] = append(vv, vals[i])
		} else {
			hdr[k] = vals[i : i+1 : i+1]
		}
	}
	return hdr
}
