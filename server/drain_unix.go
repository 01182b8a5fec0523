//go:build unix

package server

import (
	"net"
	"syscall"
)

// readArrived reads into p what has arrived on c without waiting (0 when
// nothing has, or c is not a socket).
func readArrived(c net.Conn, p []byte) int {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return 0
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0
	}
	n := 0
	rc.Control(func(fd uintptr) { // the socket does not block: EAGAIN when nothing has arrived
		if m, err := syscall.Read(int(fd), p); err == nil {
			n = m
		}
	})
	return n
}
