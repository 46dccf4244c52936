package main

import "testing"

// TestParseBytes: --inject-leak and --payload take a whole number of bytes,
// KiB, MiB or GiB. Anything else is refused: fmt.Sscan stopped at the first
// character that was no digit, so 1MB and 1Mi (the proxy's own
// --upstream-memory-limit spelling) were 1 byte and 1.5MiB was 1 MiB, and
// the demo leaked 1 B/s with no word.
func TestParseBytes(t *testing.T) {
	for s, want := range map[string]int64{"0": 0, "1048576": 1 << 20, "512KiB": 512 << 10, "1MiB": 1 << 20, "2GiB": 2 << 30, "100B": 100} {
		if got, err := parseBytes(s); err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"1MB", "1Mi", "1.5MiB", "1 MiB", "1e6", "-1KiB", "MiB", "", "0x10", "9999999999GiB"} {
		if got, err := parseBytes(s); err == nil {
			t.Errorf("parseBytes(%q) = %d, want an error", s, got)
		}
	}
}
