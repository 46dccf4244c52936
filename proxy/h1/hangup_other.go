//go:build !linux

package h1

import "syscall"

// hangups has no poller of its own here: every watch is a one-byte read.
type hangups struct{}

var hangupPoller hangups

func (hangups) register(*conn) bool { return false }
func (hangups) forget(uint64)       {}

func peerLeft(syscall.RawConn) (left, nothing bool) { return false, false }
