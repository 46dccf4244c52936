//go:build !linux

package proxy

import "net"

// newRawConn is the identity where raw socket I/O is not implemented.
func newRawConn(c net.Conn) net.Conn { return c }

// idleClosed cannot tell here: ok is false.
func idleClosed(net.Conn) (closed, ok bool) { return false, false }
