//go:build unix

package edge

import (
	"net"
	"syscall"
)

// alive reports whether an idle connection is still open: a peek that does not wait sees nothing to read
// (a closed connection reads its end; an idle one must have nothing pending).
func alive(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	ok = false
	err = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		_, _, rerr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		ok = rerr == syscall.EAGAIN || rerr == syscall.EWOULDBLOCK
		return true // never wait
	})
	return err == nil && ok
}
