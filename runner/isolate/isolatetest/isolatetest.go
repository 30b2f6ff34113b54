// Package isolatetest gives tests of other packages a sandbox configured as in production: bubblewrap, a
// host uid of the sandbox's own when the test runs as root (as CI does), and a network of its own.
package isolatetest

import (
	"net"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"testing"

	"github.com/warren-mesh/warren/runner/isolate"
)

// Config returns the sandbox configuration for workspace ws, whose network forwards the loopback port of
// each URL in forward (e.g. a model server the sandboxed agent talks to). The workspace and each dir of
// owned are given to the sandbox's uid. The network is the default one (isolate.StackVeth). Everything is
// released when the test ends. Without bubblewrap the test fails (-short skips it).
func Config(t testing.TB, ws string, forward []string, owned ...string) isolate.Config {
	t.Helper()
	cfg := isolate.Config{Workspace: ws, Bwrap: Tool(t, "bwrap", "bubblewrap")}
	if os.Geteuid() != 0 {
		cfg.HostNetwork = true
		return cfg
	}
	lease, err := isolate.AllocateUID(isolate.DefaultUIDDir, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lease.Release)
	cfg.HostUID, cfg.HostGID = lease.UID, lease.UID
	for _, d := range append([]string{ws}, owned...) {
		if err := isolate.Chown(d, int(lease.UID), int(lease.UID)); err != nil {
			t.Fatal(err)
		}
	}
	var ports []uint16
	for _, f := range forward {
		u, err := url.Parse(f)
		if err != nil {
			t.Fatal(err)
		}
		_, p, err := net.SplitHostPort(u.Host)
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil {
			t.Fatal(err)
		}
		ports = append(ports, uint16(n))
	}
	n, err := isolate.NewNetwork(isolate.NetworkConfig{Nsenter: Tool(t, "nsenter", "util-linux"), ForwardTCP: ports})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	cfg.Network = n
	return cfg
}

// New returns a sandbox made from Config.
func New(t testing.TB, ws string, forward []string, owned ...string) *isolate.Sandbox {
	t.Helper()
	s, err := isolate.New(Config(t, ws, forward, owned...))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Tool finds a program the sandbox needs; the test fails without it (only -short skips).
func Tool(t testing.TB, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if testing.Short() {
			t.Skipf("%s not installed (skipped under -short)", name)
		}
		t.Fatalf("%s is required for the sandbox tests: install it (apt-get install %s, or make tools): %v", name, pkg, err)
	}
	return p
}
