//go:build !linux

package h1

import "syscall"

// hangups has no poller of its own here: every watch is a one-byte read.
type hangups struct{}

var hangupPoller hangups

func (hangups) add(*watcher, syscall.RawConn) bool { return false }
func (hangups) remove(*watcher)                    {}
func (hangups) rearm(*watcher)                     {}

func peerLeft(syscall.RawConn) (left, spurious bool) { return false, false }

func hangupsWatching() int { return 0 }
