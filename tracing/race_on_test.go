//go:build race

package tracing

// raceEnabled: the race detector slows every call several times over, so
// the tests that measure rates under load run in the plain pass only.
const raceEnabled = true
