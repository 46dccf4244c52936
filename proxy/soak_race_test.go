//go:build race

package proxy

// Under the race detector the soak is ten times shorter: the same mix, at a
// tenth of the calls, keeps the race pass within minutes.
const soakCalls = 10_000
