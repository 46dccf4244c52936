package h2

// MaxUpstreamConns is maxUpstreamConns, for the tests outside the package.
const MaxUpstreamConns = maxUpstreamConns
