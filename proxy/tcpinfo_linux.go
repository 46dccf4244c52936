package proxy

import (
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

func readRTT(c net.Conn) (time.Duration, bool) {
	c = netConn(c)
	if cn, ok := c.(*closeNotifyConn); ok {
		c = cn.Conn
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return 0, false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0, false
	}
	var rtt time.Duration
	var got bool
	_ = raw.Control(func(fd uintptr) {
		info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		if err == nil {
			rtt, got = time.Duration(info.Rtt)*time.Microsecond, true
		}
	})
	return rtt, got
}
