package testenv

import (
	"testing"
	"time"
)

// StartVictoriaMetrics runs a single-node VictoriaMetrics (the binary
// bin) on a free loopback port with its data in a temporary directory,
// waits until it is healthy, and returns its base URL. Samples are
// searchable as soon as they are flushed (no latency offset, no cache) and
// kept 30 days, so tests can import weeks-old history.
func StartVictoriaMetrics(t testing.TB, bin string) string {
	t.Helper()
	addr := FreeAddr(t)
	p := Start(t, bin,
		"-httpListenAddr="+addr,
		"-storageDataPath="+t.TempDir(),
		"-retentionPeriod=30d",
		"-search.latencyOffset=0s",
		"-search.disableCache",
		"-loggerLevel=ERROR",
	)
	WaitHTTP(t, p, "http://"+addr+"/health", 15*time.Second)
	return "http://" + addr
}
