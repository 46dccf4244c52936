//go:build !race

package proxy

const soakCalls = 100_000
