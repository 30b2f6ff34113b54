package isolate

import (
	"crypto/rand"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
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
// them: a host beyond a gateway that translates those addresses. It returns the namespace's path.
func testHost6(t *testing.T, addrs []string, port int, banner string) string {
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
	return "/run/netns/" + name
}

// TestIsolationNetworkFlowsBounded: what a veth sandbox opens through the host is tracked in the host's
// connection table, which every sandbox, the runner and the edge share. The attack: a loop of UDP
// datagrams, each from a fresh socket (a new tracked flow each), fills it (262144 entries here, 30 s each)
// and the host's new connections are dropped. The host's table of the pair drops a sandbox's new flows
// beyond vethMaxFlows at once (lowered here): of 40 flows to a host beyond the gateway, at most that many
// arrive, while an established flow still works. Before the fix all 40 arrived.
func TestIsolationNetworkFlowsBounded(t *testing.T) {
	requireRoot(t)
	toolPath(t, "ip", "iproute2")
	defer func(n uint32) { vethMaxFlows = n }(vethMaxFlows)
	vethMaxFlows = 16
	public := "64:ff9b::cb00:720b" // 203.0.114.11
	ns := testHost6(t, []string{public}, 8083, "flows")
	var pc net.PacketConn
	socketIn(t, ns, func() (err error) { pc, err = net.ListenPacket("udp6", net.JoinHostPort(public, "8084")); return err })
	t.Cleanup(func() { pc.Close() })
	got := make(chan string, 64)
	go func() {
		buf := make([]byte, 64)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			m := strings.TrimSpace(string(buf[:n]))
			if m == "first" {
				_, _ = pc.WriteTo([]byte("ok\n"), from) // a flow with a reply: established
			}
			got <- m
		}
	}()
	s := vethSandbox(t, NetworkConfig{})
	res, o := sh(t, s, fmt.Sprintf(`bash -c 'exec 3<>/dev/udp/%[1]s/8084 || exit 3; echo first >&3; read -t 10 -N 1 r <&3 || exit 4
for i in $(seq 2 40); do echo flow 2>/dev/null >/dev/udp/%[1]s/8084; done; echo end >&3'`, public))
	if res.ExitCode != 0 {
		t.Fatalf("%+v %q", res, o.stderr.String())
	}
	flows := 0
	for deadline := time.After(30 * time.Second); ; {
		select {
		case m := <-got:
			if m != "end" {
				flows++
				continue
			}
		case <-deadline:
			t.Fatalf("no end on the first flow (%d flows arrived)", flows)
		}
		break
	}
	if flows < 1 || flows > int(vethMaxFlows) {
		t.Fatalf("%d of 40 flows arrived, want 1 to %d", flows, vethMaxFlows)
	}
}

// TestIsolationNetworkSourceIsOwn: what leaves a veth pair carries its sandbox's own address. The attack,
// by a sandbox that could choose its source (the test, as root in the namespace, adds a second address, the
// next slot's): a datagram from that address to a host beyond the gateway never arrives, while one from the
// sandbox's own address does. The host table's own6 set pairs each host end with its sandbox's address.
func TestIsolationNetworkSourceIsOwn(t *testing.T) {
	requireRoot(t)
	toolPath(t, "ip", "iproute2")
	public := "64:ff9b::cb00:720c" // 203.0.114.12
	ns := testHost6(t, []string{public}, 8085, "source")
	var pc net.PacketConn
	socketIn(t, ns, func() (err error) { pc, err = net.ListenPacket("udp6", net.JoinHostPort(public, "8086")); return err })
	t.Cleanup(func() { pc.Close() })
	got := make(chan string, 64)
	go func() {
		buf := make([]byte, 64)
		for {
			n, _, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			got <- string(buf[:n])
		}
	}()
	n := testNetwork(t, NetworkConfig{})
	if !n.veth.peer6.IsValid() {
		t.Fatal("the host has no IPv6: the test shows nothing")
	}
	other := n.veth.peer6.Next().Next() // the next slot's sandbox
	send := func(from netip.Addr, msg string) {
		t.Helper()
		if err := n.inside(func() error {
			c, err := net.DialUDP("udp6", net.UDPAddrFromAddrPort(netip.AddrPortFrom(from, 0)),
				net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr(public), 8086)))
			if err != nil {
				return err
			}
			defer c.Close()
			_, err = c.Write([]byte(msg))
			return err
		}); err != nil {
			t.Fatalf("send from %s: %v", from, err)
		}
	}
	if err := n.inside(func() error {
		eth, err := netlink.LinkByName(sandboxIf)
		if err != nil {
			return err
		}
		return netlink.AddrAdd(eth, &netlink.Addr{IPNet: &net.IPNet{IP: other.AsSlice(), Mask: net.CIDRMask(128, 128)}, Flags: unix.IFA_F_NODAD})
	}); err != nil {
		t.Fatal(err)
	}
	// The first from the sandbox's own address resolves the gateway (a neighbour solicitation from another
	// source would be answered to that source, off the pair).
	for i := range 4 {
		if i > 0 {
			send(other, "spoofed")
		}
		send(n.veth.peer6, "own"+strconv.Itoa(i))
		select {
		case m := <-got:
			if m != "own"+strconv.Itoa(i) {
				t.Fatalf("got %q from the sandbox, want own%d: a datagram from another sandbox's address left the pair", m, i)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("nothing from the sandbox's own address %s arrived", n.veth.peer6)
		}
	}
}
