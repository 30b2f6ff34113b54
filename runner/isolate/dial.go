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
	type result struct {
		c   net.Conn
		err error
	}
	done := make(chan result, 1)
	go func() {
		// The goroutine keeps its thread while the thread is in the sandbox's namespace; if the thread
		// cannot return to the runner's namespace, it stays locked and ends with the goroutine (the Go
		// runtime then discards it), so no other goroutine ever runs in the sandbox's namespace.
		runtime.LockOSThread()
		c, back, err := n.dialInside(ctx, port)
		if back {
			runtime.UnlockOSThread()
		}
		done <- result{c, err}
	}()
	r := <-done
	return r.c, r.err
}

// dialInside runs on a locked thread: it joins the namespace, connects, and returns to the thread's own
// namespace (back reports whether it did).
func (n *Network) dialInside(ctx context.Context, port int) (net.Conn, bool, error) {
	own, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return nil, true, fmt.Errorf("open own network namespace: %w", err)
	}
	defer own.Close()
	if err := unix.Setns(int(n.nsFile.Fd()), unix.CLONE_NEWNET); err != nil {
		return nil, true, fmt.Errorf("join the sandbox network namespace: %w", err)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		if c6, err6 := d.DialContext(ctx, "tcp6", net.JoinHostPort("::1", strconv.Itoa(port))); err6 == nil {
			c, err = c6, nil
		}
	}
	if serr := unix.Setns(int(own.Fd()), unix.CLONE_NEWNET); serr != nil {
		if c != nil {
			c.Close()
		}
		return nil, false, fmt.Errorf("return from the sandbox network namespace: %w", serr)
	}
	return c, true, err
}
