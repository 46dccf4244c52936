//go:build race

package proxy

// Under the race detector the soak is twenty times shorter — the same mix
// from the same 16 workers — and scripts/test.sh's race pass runs this
// package on both data planes, so each plane's forwarding is raced against
// itself within a minute or two.
const soakCalls = 5_000
