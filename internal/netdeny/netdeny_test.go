package netdeny

import (
	"fmt"
	"net/netip"
	"testing"
)

// The registries as IANA publishes them (every entry, nested ones included), and the ranges beside them.
var (
	registryV4 = []string{
		"0.0.0.0/8", "0.0.0.0/32", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
		"172.16.0.0/12", "192.0.0.0/24", "192.0.0.0/29", "192.0.0.8/32", "192.0.0.9/32", "192.0.0.10/32",
		"192.0.0.170/32", "192.0.0.171/32", "192.0.2.0/24", "192.31.196.0/24", "192.52.193.0/24",
		"192.88.99.0/24", "192.88.99.2/32", "192.168.0.0/16", "192.175.48.0/24", "198.18.0.0/15",
		"198.51.100.0/24", "203.0.113.0/24", "240.0.0.0/4", "255.255.255.255/32",
		"224.0.0.0/4", // multicast, from the address space registry
	}
	registryV6 = []string{
		"::1/128", "::/128", "64:ff9b:1::/48", "100::/64", "100:0:0:1::/64", "2001::/23", "2001::/32",
		"2001:1::1/128", "2001:1::2/128", "2001:1::3/128", "2001:2::/48", "2001:3::/32", "2001:4:112::/48",
		"2001:10::/28", "2001:20::/28", "2001:30::/28", "2001:db8::/32", "2002::/16", "2620:4f:8000::/48",
		"3fff::/20", "5f00::/16", "fc00::/7", "fe80::/10",
		"::/96", "::ffff:0:0:0/96", "fec0::/10", "ff00::/8", // IPv4-compatible, IPv4-translated, site-local, multicast
	}
)

// last is the last address of p.
func last(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// forms are the IPv6 addresses that carry the IPv4 address a: whether each is denied when a is public.
func forms(a netip.Addr) map[string]bool {
	b := a.As4()
	hi, lo := uint16(b[0])<<8|uint16(b[1]), uint16(b[2])<<8|uint16(b[3])
	f := func(format string, args ...any) string {
		return netip.MustParseAddr(fmt.Sprintf(format, args...)).String()
	}
	return map[string]bool{
		f("::ffff:%x:%x", hi, lo):                  false, // IPv4-mapped: judged as IPv4
		f("64:ff9b::%x:%x", hi, lo):                false, // NAT64, well-known prefix: judged as IPv4
		f("::%x:%x", hi, lo):                       true,  // IPv4-compatible
		f("::ffff:0:%x:%x", hi, lo):                true,  // IPv4-translated
		f("64:ff9b:1::%x:%x", hi, lo):              true,  // NAT64, local-use prefix
		f("2002:%x:%x::1", hi, lo):                 true,  // 6to4
		f("2001:0:%x:%x::%x:%x", hi, lo, ^hi, ^lo): true,  // Teredo (server and obfuscated client)
	}
}

func TestDeniedRegistryEntries(t *testing.T) {
	for _, s := range append(append([]string{}, registryV4...), registryV6...) {
		p := netip.MustParsePrefix(s)
		for _, a := range []netip.Addr{p.Addr(), last(p)} {
			if !Denied(a) {
				t.Errorf("%s (of %s) is not denied", a, p)
			}
			if a.Is4() {
				for f := range forms(a) {
					if !Denied(netip.MustParseAddr(f)) {
						t.Errorf("%s (%s in IPv6) is not denied", f, a)
					}
				}
			}
		}
	}
}

func TestDeniedPublic(t *testing.T) {
	public := []string{
		"8.8.8.8", "1.1.1.1", "93.184.216.34", "2606:4700::1", "2001:4860:4860::8888", "2a00:1450::1",
		// the neighbours of denied ranges
		"1.0.0.0", "9.255.255.255", "11.0.0.0", "100.63.255.255", "100.128.0.0", "126.255.255.255", "128.0.0.0",
		"169.253.255.255", "169.255.0.0", "172.15.255.255", "172.32.0.0", "192.0.1.0", "192.0.3.0",
		"192.167.255.255", "192.169.0.0", "198.17.255.255", "198.20.0.0", "223.255.255.255",
		"2001:200::", "2001:dba::", "2003::", "2620:4f:8001::", "3fff:1000::", "fbff:ffff::",
	}
	for _, s := range public {
		a := netip.MustParseAddr(s)
		if Denied(a) {
			t.Errorf("%s is denied", a)
		}
		if a.Is4() {
			for f, denied := range forms(a) {
				if Denied(netip.MustParseAddr(f)) != denied {
					t.Errorf("Denied(%s) = %v, want %v (%s in IPv6)", f, !denied, denied, a)
				}
			}
		}
	}
}

func TestDeniedZonesAndInvalid(t *testing.T) {
	for _, a := range []netip.Addr{{}, netip.MustParseAddr("fe80::1%eth0"), netip.MustParseAddr("ff02::1%1")} {
		if !Denied(a) {
			t.Errorf("%v is not denied", a)
		}
	}
}

// Prefixes is the list Denied reads, and the caller's copy.
func TestPrefixes(t *testing.T) {
	ps := Prefixes()
	if len(ps) != len(v4)*3+len(v6) {
		t.Fatalf("%d prefixes, want %d", len(ps), len(v4)*3+len(v6))
	}
	for _, p := range ps {
		if !Denied(p.Addr()) || !Denied(last(p)) || p != p.Masked() {
			t.Errorf("%s: listed but not denied, or not masked", p)
		}
	}
	ps[0] = netip.MustParsePrefix("8.8.8.8/32")
	if Denied(netip.MustParseAddr("8.8.8.8")) {
		t.Fatal("a caller's change reached the list")
	}
}
