package proxy

import (
	"bufio"
	"strings"
	"testing"
)

func TestSniff(t *testing.T) {
	for _, tc := range []struct {
		in         string
		h2, http1  bool
		prefaceErr bool
	}{
		{in: clientPreface + "\x00\x00", h2: true},
		{in: "GET / HTTP/1.1\r\nHost: x\r\n\r\n", http1: true},
		{in: "GET / HTTP/1.0\r\n\r\n", http1: true},
		{in: "POST /v2/models/m/infer HTTP/1.1\r\n", http1: true},
		{in: "INVALID CONNECTION PREFACE\r\n\r\n"},
		{in: "PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n"},
		{in: "GET / HTTP/2.0\r\n"},
		{in: "GET /\r\n"},
		{in: "GET / HTTP/1.1", prefaceErr: false}, // no line end before EOF
	} {
		br := bufio.NewReaderSize(strings.NewReader(tc.in), 4096)
		h2, err := hasPreface(br)
		if err != nil {
			if !tc.prefaceErr && tc.h2 {
				t.Errorf("%q: preface: %v", tc.in, err)
			}
			continue
		}
		if h2 != tc.h2 {
			t.Errorf("%q: preface %v, want %v", tc.in, h2, tc.h2)
		}
		if h2 {
			continue
		}
		if got := http1RequestLine(br); got != tc.http1 {
			t.Errorf("%q: HTTP/1 request line %v, want %v", tc.in, got, tc.http1)
		}
		// Sniffing consumed nothing: the whole input is still there.
		if b, _ := br.Peek(len(tc.in)); string(b) != tc.in {
			t.Errorf("%q: sniffing consumed input, %q left", tc.in, b)
		}
	}
}
