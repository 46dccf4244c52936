//go:build !linux

package proxy

import "net"

// newRawConn is the identity where raw socket I/O is not implemented.
func newRawConn(c net.Conn) net.Conn { return c }
