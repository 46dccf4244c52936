//go:build !linux

package h1

func hangupsWatching() int { return 0 }
