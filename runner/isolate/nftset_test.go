package isolate

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/warren-mesh/warren/internal/netdeny"
)

// TestMergeRanges: nested, overlapping and adjacent prefixes become one range; the families stay apart; a
// range reaching the family's last address swallows what follows.
func TestMergeRanges(t *testing.T) {
	r := func(a, b string) addrRange { return addrRange{netip.MustParseAddr(a), netip.MustParseAddr(b)} }
	ps := func(ss ...string) []netip.Prefix {
		var out []netip.Prefix
		for _, s := range ss {
			out = append(out, netip.MustParsePrefix(s))
		}
		return out
	}
	v4, v6 := mergeRanges(ps("10.0.0.0/8", "fd00::/8", "10.213.0.4/31", "11.0.0.0/8", "192.168.1.7/32",
		"240.0.0.0/4", "255.255.255.255/32", "0.0.0.0/8", "fe80::/10", "fe80::1/128", "ffff::/16"))
	if want := []addrRange{r("0.0.0.0", "0.255.255.255"), r("10.0.0.0", "11.255.255.255"), r("192.168.1.7", "192.168.1.7"),
		r("240.0.0.0", "255.255.255.255")}; !slices.Equal(v4, want) {
		t.Errorf("IPv4: %v, want %v", v4, want)
	}
	if want := []addrRange{r("fd00::", "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"), r("fe80::", "febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff"),
		r("ffff::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")}; !slices.Equal(v6, want) {
		t.Errorf("IPv6: %v, want %v", v6, want)
	}
	els := intervalElements([]addrRange{r("10.0.0.0", "11.255.255.255"), r("240.0.0.0", "255.255.255.255")})
	if len(els) != 3 || !els[1].IntervalEnd || netip.AddrFrom4([4]byte(els[1].Key)) != netip.MustParseAddr("12.0.0.0") || els[2].IntervalEnd {
		t.Errorf("elements %+v", els)
	}
}

// TestFilterSetsRefuseInTheKernel: the filter's interval sets refuse, in the kernel, exactly the
// destinations of the deny list outside the opened ones. A namespace of the test's own sends a UDP
// datagram to the first and last address of each listed range and their neighbours outside it (the
// edges a wrong interval end gets wrong, the family's first and last addresses among them); each leaves
// through a veth pair inside the namespace (to nowhere) or is refused with EPERM by the filter, checked
// against the lists themselves, not the merged ranges.
func TestFilterSetsRefuseInTheKernel(t *testing.T) {
	requireRoot(t)
	ns, h := pairNetns(t, "out0", "out1")
	for _, name := range []string{"lo", "out0", "out1"} {
		l, err := h.LinkByName(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
	}
	out, err := h.LinkByName("out0")
	if err != nil {
		t.Fatal(err)
	}
	for _, dst := range []string{"0.0.0.0/0", "::/0"} {
		if err := h.RouteAdd(&netlink.Route{LinkIndex: out.Attrs().Index, Dst: netlinkPrefix(netip.MustParsePrefix(dst)), Scope: netlink.SCOPE_LINK}); err != nil {
			t.Fatalf("route %s: %v", dst, err)
		}
	}
	allow := []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("fd00:1::/32")}
	deny := append(netdeny.Prefixes(), netip.MustParsePrefix("11.0.0.0/8"), netip.MustParsePrefix("10.213.0.4/31"),
		netip.MustParsePrefix("198.51.100.7/32"), netip.MustParsePrefix("2001:db8:1::/48"))
	if err := installFilter(int(ns.Fd()), deny, allow); err != nil {
		t.Fatal(err)
	}
	in := func(ps []netip.Prefix, a netip.Addr) bool {
		return slices.ContainsFunc(ps, func(p netip.Prefix) bool { return p.Contains(a) })
	}
	var addrs []netip.Addr
	for _, p := range append(append([]netip.Prefix(nil), deny...), allow...) {
		first, last := p.Masked().Addr(), lastAddr(p)
		addrs = append(addrs, first, last, first.Prev(), last.Next(), first.Next())
	}
	addrs = append(addrs, netip.MustParseAddr("8.8.8.8"), netip.MustParseAddr("2606:4700::1"))
	n := &Network{nsFile: ns}
	checked := 0
	for _, a := range addrs {
		if !a.IsValid() || a.Is4In6() || a.IsUnspecified() {
			continue // the family's edge; mapped addresses leave as IPv4 (TestEgressFilterRefusesWhatWebhooksRefuse)
		}
		var sendErr error
		var viaLo bool
		if err := n.inside(func() error {
			rs, err := netlink.RouteGet(a.AsSlice())
			if err != nil {
				return err
			}
			viaLo = len(rs) > 0 && rs[0].LinkIndex != out.Attrs().Index // the namespace's own addresses: its loopback passes
			if viaLo {
				return nil
			}
			sendErr = sendUDP(a)
			return nil
		}); err != nil {
			t.Fatalf("%s: %v", a, err)
		}
		if viaLo || sendErr != nil && !errors.Is(sendErr, unix.EPERM) {
			continue // a link-local address without its interface, say: the kernel refuses it before the filter
		}
		checked++
		want := in(deny, a) && !in(allow, a)
		if got := sendErr != nil; got != want {
			t.Errorf("%s: refused %v (%v), want refused %v", a, got, sendErr, want)
		}
	}
	if checked < len(deny)*3 {
		t.Fatalf("only %d destinations checked", checked)
	}
}

// sendUDP sends one datagram to port 9 of a from the calling thread's network namespace.
func sendUDP(a netip.Addr) error {
	fam, sa := unix.AF_INET6, unix.Sockaddr(&unix.SockaddrInet6{Port: 9, Addr: a.As16()})
	if a.Is4() {
		fam, sa = unix.AF_INET, &unix.SockaddrInet4{Port: 9, Addr: a.As4()}
	}
	fd, err := unix.Socket(fam, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_BROADCAST, 1); err != nil {
		return err
	}
	return unix.Sendto(fd, []byte("x"), 0, sa)
}

// pairNetns makes a network namespace of the test's own holding a veth pair of ends a and b, and returns it
// with a netlink handle in it; both are closed when the test ends.
func pairNetns(t *testing.T, a, b string) (*os.File, *netlink.Handle) {
	t.Helper()
	ns, err := newNetns()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	h, err := netlink.NewHandleAt(netns.NsHandle(ns.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	if err := h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: a}, PeerName: b}); err != nil {
		t.Fatal(err)
	}
	return ns, h
}

func netlinkPrefix(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}
