package isolate

import (
	"crypto/rand"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// TestIsolationNetworkIPv4InIPv6: the IPv6 forms of IPv4 addresses a gateway may translate (IPv4-compatible
// ::/96, 6to4, NAT64 of a private address) are refused by the sandbox's filter, the same list the webhook
// checker refuses (internal/netdeny), while the NAT64 form of a public address is reached. Each address
// is served by a network namespace the test makes, routed from the host as a translating gateway would.
func TestIsolationNetworkIPv4InIPv6(t *testing.T) {
	requireRoot(t)
	toolPath(t, "ip", "iproute2")
	refused := []string{"::127.0.0.1", "::a9fe:a9fe", "::a00:1", "2002:7f00:1::1", "64:ff9b::a9fe:a9fe"}
	public := "64:ff9b::cb00:720a" // 203.0.114.10
	testHost6(t, append([]string{public}, refused...), 8082, "translated")
	s, err := New(secureConfig(t, t.TempDir(), nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Run("public through NAT64", func(t *testing.T) {
		if got, e := reach(t, s, public, 8082); got != "translated" {
			t.Fatalf("%s: %q (%s)", public, got, e)
		}
	})
	for _, a := range refused {
		t.Run(a, func(t *testing.T) {
			got, e := reach(t, s, a, 8082)
			if got != "" || !strings.Contains(e, "Permission denied") {
				t.Fatalf("%s: reached %q (%s); want the filter's refusal (permission denied)", a, got, e)
			}
		})
	}
}

// testHost6 makes a network namespace holding addrs (IPv6) on its loopback, reached from the test's own
// through a veth pair on a ULA /64 of its own, routes each of addrs there, and listens on port of all of
// them: a host beyond a gateway that translates those addresses.
func testHost6(t *testing.T, addrs []string, port int, banner string) {
	t.Helper()
	name, ip := vethNamespace(t)
	var b [2]byte
	_, _ = rand.Read(b[:])
	link := fmt.Sprintf("fd7e:%x%x::", b[0], b[1])
	ip("addr", "add", link+"1/64", "dev", name+"a", "nodad")
	ip("link", "set", name+"a", "up")
	ip("-n", name, "addr", "add", link+"2/64", "dev", name+"b", "nodad")
	ip("-n", name, "link", "set", name+"b", "up")
	ip("-n", name, "link", "set", "lo", "up")
	for _, a := range addrs {
		ip("-n", name, "addr", "add", a+"/128", "dev", "lo")
		ip("route", "add", a+"/128", "via", link+"2")
		t.Cleanup(func() { _ = exec.Command("ip", "route", "del", a+"/128").Run() })
	}
	listenIn(t, "/run/netns/"+name, net.JoinHostPort("::", strconv.Itoa(port)), banner)
	for _, a := range addrs {
		dialFromHost(t, net.JoinHostPort(a, strconv.Itoa(port)))
	}
}
