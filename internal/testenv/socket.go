package testenv

import (
	"net"
	"syscall"
	"testing"
)

// DialReceiveBuffer dials addr with a receive buffer (SO_RCVBUF) of size
// bytes, so that a large answer waits in the peer's send queue while the
// test reads it slowly: what a slow client over a long path looks like.
func DialReceiveBuffer(t testing.TB, addr string, size int) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, size)
		}); err != nil {
			return err
		}
		return serr
	}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
