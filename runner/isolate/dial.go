package isolate

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// DialLoopback connects to port on the loopback of the sandbox's network namespace (127.0.0.1, then ::1):
// a listener of the sandbox's, for a preview URL (docs/ARCHITECTURE.md#previews). The socket is made inside
// the namespace by a thread that joins it for the socket call only, so the connection can reach nothing
// but the namespace's own addresses; the caller chooses the port, never the address.
func (n *Network) DialLoopback(ctx context.Context, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("%w: port %d out of range", ErrConfig, port)
	}
	var c net.Conn
	err := n.inside(func() error {
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, "tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			if c6, err6 := d.DialContext(ctx, "tcp6", net.JoinHostPort("::1", strconv.Itoa(port))); err6 == nil {
				c, err = c6, nil
			}
		}
		return err
	})
	if err != nil {
		if c != nil {
			c.Close()
		}
		return nil, err
	}
	return c, nil
}

// inside runs f on a thread that joined the sandbox's network namespace for f's call only: the sockets f
// makes belong to the namespace, and can be used from any thread afterwards.
func (n *Network) inside(f func() error) error {
	done := make(chan error, 1)
	go func() {
		// The goroutine keeps its thread while the thread is in the sandbox's namespace; if the thread
		// cannot return to the runner's namespace, it stays locked and ends with the goroutine (the Go
		// runtime then discards it), so no other goroutine ever runs in the sandbox's namespace.
		runtime.LockOSThread()
		back, err := n.insideLocked(f)
		if back {
			runtime.UnlockOSThread()
		}
		done <- err
	}()
	return <-done
}

// insideLocked runs on a locked thread: it joins the namespace, runs f, and returns to the thread's own
// namespace (back reports whether it did). When it could not return, what f made is of no use: f's error
// is replaced, and the caller must close what f opened.
func (n *Network) insideLocked(f func() error) (back bool, err error) {
	own, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return true, fmt.Errorf("open own network namespace: %w", err)
	}
	defer own.Close()
	if err := unix.Setns(int(n.nsFile.Fd()), unix.CLONE_NEWNET); err != nil {
		return true, fmt.Errorf("join the sandbox network namespace: %w", err)
	}
	err = f()
	if serr := unix.Setns(int(own.Fd()), unix.CLONE_NEWNET); serr != nil {
		return false, fmt.Errorf("return from the sandbox network namespace: %w", serr)
	}
	return true, err
}
