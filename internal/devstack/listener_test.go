package devstack_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/devstack"
	"github.com/warren-mesh/warren/internal/httpx"
)

// TestEdgeClosesIdleConnections: the dev stack's edge listener is built like every role's (internal/httpx),
// so an unauthenticated client cannot hold connections open: one that sent nothing is closed after the
// header timeout, one that made a request (refused for want of a token) and went quiet after the idle
// timeout. Short timeouts are configured for the test; the production defaults are httpx's.
func TestEdgeClosesIdleConnections(t *testing.T) {
	const timeout = 300 * time.Millisecond
	st := startStack(t, func(c *devstack.Config) {
		c.NoWebTransport = true
		c.HTTP = httpx.Config{ReadHeaderTimeout: timeout, IdleTimeout: timeout}
	})
	addr := strings.TrimPrefix(st.URL(), "http://")

	silent := dial(t, addr)
	idle := dial(t, addr)
	if _, err := io.WriteString(idle, "GET /v1/sessions HTTP/1.1\r\nHost: "+addr+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(idle)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || resp.Close {
		t.Fatalf("GET /v1/sessions without a token: %d, close %v; want 401 on a kept-alive connection", resp.StatusCode, resp.Close)
	}
	for name, c := range map[string]struct {
		conn net.Conn
		r    io.Reader
	}{"silent": {silent, silent}, "idle after a request": {idle, br}} {
		if err := waitClosed(c.conn, c.r); err != nil {
			t.Errorf("%s connection: %v", name, err)
		}
	}
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// waitClosed reads r (c's data) until the server closes c, within a deadline far past the test's timeouts:
// a server that keeps the connection fails here.
func waitClosed(c net.Conn, r io.Reader) error {
	if err := c.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
		return err
	}
	n, err := io.Copy(io.Discard, r)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return errors.New("still open after 30s")
	}
	if n > 0 {
		return fmt.Errorf("%d unexpected bytes before the close", n)
	}
	return nil
}
