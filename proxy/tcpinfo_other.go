//go:build !linux

package proxy

import (
	"net"
	"time"
)

// readRTT has no kernel source outside Linux.
func readRTT(net.Conn) (time.Duration, bool) { return 0, false }
