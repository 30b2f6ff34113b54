package runner_test

import (
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"testing"

	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner"
)

// The preview relay reaches the sandbox's own loopback and nothing else: a listener on the runner's
// (host's) loopback is not reachable through it, the runner's own port is refused, ports outside 1..65535
// and junk are refused, and the route needs the runner's key.
func TestPreviewRelayReachesOnlyTheSandbox(t *testing.T) {
	h := startRunner(t)
	hostPort := hostListener(t)
	u, _ := url.Parse(h.url)
	cases := []struct {
		path    string
		headers []string
		code    wire.Code
	}{
		{"/v1/preview/" + hostPort + "/", nil, wire.Unavailable},      // the host's listener is not the sandbox's
		{"/v1/preview/" + u.Port() + "/", nil, wire.PermissionDenied}, // the runner's own API
		{"/v1/preview/0/", nil, wire.InvalidArgument},
		{"/v1/preview/65536/", nil, wire.InvalidArgument},
		{"/v1/preview/080/", nil, wire.InvalidArgument},
		{"/v1/preview/x/", nil, wire.InvalidArgument},
		{"/v1/preview/" + hostPort + "/", []string{"Authorization", ""}, wire.Unauthenticated},
	}
	for _, c := range cases {
		resp := h.do(t, http.MethodGet, c.path, nil, c.headers...)
		body, _ := io.ReadAll(resp.Body)
		if got := wire.CodeOf(wire.ReadHTTPError(resp.StatusCode, body)); resp.StatusCode == http.StatusOK || got != c.code {
			t.Errorf("%s %v: %d %s, want %s", c.path, c.headers, resp.StatusCode, body, c.code)
		}
	}
}

// A runner whose sandbox shares the host's network (or has no bubblewrap) refuses previews unless told it
// is a development machine: there a preview's dial on "the sandbox's loopback" is the host's, and would put
// the host's loopback services (Nomad, Consul, neighbours' runners) on the internet.
func TestPreviewRefusedOnTheHostsNetwork(t *testing.T) {
	hostPort := hostListener(t)
	for _, allow := range []bool{false, true} {
		h := startRunner(t, func(c *runner.Config) { c.HostNetwork = true; c.PreviewHostLoopback = allow })
		resp := h.do(t, http.MethodGet, "/v1/preview/"+hostPort+"/", nil)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !allow && (resp.StatusCode == http.StatusOK || wire.CodeOf(wire.ReadHTTPError(resp.StatusCode, body)) != wire.Unavailable) {
			t.Errorf("host network without -preview-host-loopback: %d %s, want unavailable", resp.StatusCode, body)
		}
		if allow && (resp.StatusCode != http.StatusOK || string(body) != "HOST") {
			t.Errorf("host network with -preview-host-loopback: %d %s, want the host's listener", resp.StatusCode, body)
		}
	}
}

// hostListener is a server on the host's (the runner's) loopback answering every connection "HOST"; its
// port.
func hostListener(t *testing.T) string {
	t.Helper()
	host, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { host.Close() })
	go func() {
		for {
			c, err := host.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\nConnection: close\r\n\r\nHOST")
			c.Close()
		}
	}()
	return strconv.Itoa(host.Addr().(*net.TCPAddr).Port)
}
