package modelload

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/inferwatch/inferwatch/metricset"
)

// TestReadIndexCutIsNoMissingIndex: an index answer cut short (past the
// read bound, or by the connection) failed to arrive; only an answer that
// is no array of entries says the upstream has no index, which ends
// polling for good.
func TestReadIndexCutIsNoMissingIndex(t *testing.T) {
	tr := New(metricset.New(metricset.Options{}))
	tr.known["llama"] = "llama"
	full := `[{"name":"bert","state":"READY"},{"name":"llama","version":"1","state":"UNAVAILABLE","reason":"unloaded"}]`
	for _, tc := range []struct {
		name, body string
		n          int64 // the read bound
		noIndex    bool
		err        bool
	}{
		{"whole", full, 1 << 20, false, false},
		{"past the bound", full, 40, false, true},
		{"cut by the connection", full[:50], 1 << 20, false, true},
		{"not json", "hello", 1 << 20, true, true},
		{"empty", "", 1 << 20, true, true},
		{"an object", `{"models":[]}`, 1 << 20, true, true},
		{"not entries", `[1,2]`, 1 << 20, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tr.readIndex(&io.LimitedReader{R: strings.NewReader(tc.body), N: tc.n})
			if (err != nil) != tc.err || errors.Is(err, errNoIndex) != tc.noIndex {
				t.Fatalf("error %v; want error %v, no index %v", err, tc.err, tc.noIndex)
			}
			if err == nil && (len(got) != 1 || got["llama"]) {
				t.Fatalf("index %v, want llama only, not ready", got)
			}
		})
	}
}
