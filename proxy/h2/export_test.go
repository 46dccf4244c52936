package h2

import "time"

// MaxUpstreamConns is maxUpstreamConns, for the tests outside the package.
const MaxUpstreamConns = maxUpstreamConns

// UpstreamIdle sets how long an upstream connection other than the oldest
// may carry no stream before it is closed.
func UpstreamIdle(d time.Duration) func(*Options) {
	return func(o *Options) { o.upstreamIdle = d }
}
