package pids

import (
	"encoding/binary"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// Reading /proc/net/tcp makes the kernel walk its whole established-socket
// hash table, however few sockets there are: 6 ms a read on the development
// VM, 1.4% of a core for a sidecar that looks for its upstream every
// second. The sock_diag netlink interface, asked for listening sockets
// only, walks the listening table alone.

// Sizes and offsets of the kernel's inet_diag structures
// (linux/inet_diag.h): inet_diag_sockid is 48 bytes, inet_diag_req_v2 is 8
// bytes and a sockid, inet_diag_msg is 4 bytes, a sockid and 5 u32.
const (
	nlmsgHdrLen     = 16
	diagReqLen      = 56
	diagMsgLen      = 72
	diagMsgSport    = 4  // id.idiag_sport, big-endian
	diagMsgInode    = 68 // idiag_inode
	tcpListenState  = 10 // TCP_LISTEN
	diagRecvBufSize = 32 << 10
)

// listenInodesDiag adds to inodes the inodes of the TCP sockets (IPv4 and
// IPv6) listening on port in this network namespace, as sock_diag reports
// them.
func listenInodesDiag(port int, inodes map[uint64]bool) error {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return fmt.Errorf("sock_diag socket: %w", err)
	}
	defer unix.Close(fd)
	buf := make([]byte, diagRecvBufSize)
	for seq, family := range []uint8{unix.AF_INET, unix.AF_INET6} {
		if err := diagDump(fd, uint32(seq+1), family, buf, func(msg []byte) {
			if int(binary.BigEndian.Uint16(msg[diagMsgSport:])) == port {
				if ino := binary.NativeEndian.Uint32(msg[diagMsgInode:]); ino != 0 {
					inodes[uint64(ino)] = true
				}
			}
		}); err != nil {
			return err
		}
	}
	return nil
}

// diagDump asks for family's listening TCP sockets and calls fn with each
// inet_diag_msg.
func diagDump(fd int, seq uint32, family uint8, buf []byte, fn func(msg []byte)) error {
	req := make([]byte, nlmsgHdrLen+diagReqLen)
	binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:], unix.SOCK_DIAG_BY_FAMILY)
	binary.NativeEndian.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	binary.NativeEndian.PutUint32(req[8:], seq)
	r := req[nlmsgHdrLen:]
	r[0], r[1] = family, unix.IPPROTO_TCP
	binary.NativeEndian.PutUint32(r[4:], 1<<tcpListenState)
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("sock_diag request: %w", err)
	}
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return fmt.Errorf("sock_diag answer: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return fmt.Errorf("sock_diag answer: %w", err)
		}
		for _, m := range msgs {
			if m.Header.Seq != seq {
				continue
			}
			switch m.Header.Type {
			case unix.NLMSG_DONE:
				return nil
			case unix.NLMSG_ERROR:
				if len(m.Data) >= 4 {
					if errno := int32(binary.NativeEndian.Uint32(m.Data)); errno != 0 {
						return fmt.Errorf("sock_diag: %w", syscall.Errno(-errno))
					}
				}
				return nil
			case unix.SOCK_DIAG_BY_FAMILY:
				if len(m.Data) >= diagMsgLen {
					fn(m.Data)
				}
			}
		}
	}
}
