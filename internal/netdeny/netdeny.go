// Package netdeny is the one list of destinations Warren refuses to reach for a tenant: every entry of the
// IANA IPv4 and IPv6 Special-Purpose Address Registries (loopback, private, shared and link-local space,
// cloud metadata at 169.254.169.254, documentation, benchmarking, reserved, the IETF's protocol
// assignments), multicast, deprecated site-local, and every IPv6 form that carries a denied IPv4 address.
// The sandbox's egress filter (runner/isolate) installs Prefixes; the task webhook's dialer (runner)
// refuses what Denied refuses. Both read this list, so they cannot drift apart.
//
// IPv6 forms of IPv4 addresses:
//   - IPv4-mapped ::ffff:0:0/96 and the well-known NAT64 prefix 64:ff9b::/96 (RFC 6052; an IPv6-only
//     cluster's DNS64 answers with it for IPv4-only hosts) are judged by the IPv4 address they carry: the
//     list holds their form of each denied IPv4 prefix, so ::ffff:10.0.0.1 and 64:ff9b::a00:1 are denied
//     and 64:ff9b::808:808 is not.
//   - IPv4-compatible ::/96 (deprecated, RFC 4291), IPv4-translated ::ffff:0:0:0/96 (RFC 2765), the
//     local-use NAT64 prefix 64:ff9b:1::/48 (RFC 8215: its mapping is the network's own), 6to4 2002::/16
//     (relays deprecated, RFC 7526) and Teredo 2001::/32 (inside the IETF's 2001::/23) are denied whole:
//     a gateway may translate any of them to an address of the host's network.
//   - Not known here: a network-specific NAT64 or 6rd prefix chosen by the operator's network, and ISATAP
//     interface identifiers (they need a router of that network to translate them). SECURITY.md says so.
//
// A few registry entries are marked globally reachable (anycast services: AS112, AMT, PCP, TURN, ORCHIDv2,
// DRIP); no sandbox or webhook has business with them, so every entry is denied and the list is the
// registries' as published, easy to check against them.
package netdeny

import "net/netip"

// v4 are the IPv4 Special-Purpose Address Registry's entries (a nested entry is covered by the one that
// holds it and named in its comment), and multicast.
var v4 = []string{
	"0.0.0.0/8",       // "this network" (RFC 791), 0.0.0.0/32 "this host" (RFC 1122)
	"10.0.0.0/8",      // private use (RFC 1918)
	"100.64.0.0/10",   // shared address space, carrier-grade NAT (RFC 6598)
	"127.0.0.0/8",     // loopback (RFC 1122)
	"169.254.0.0/16",  // link local (RFC 3927): cloud metadata services
	"172.16.0.0/12",   // private use (RFC 1918)
	"192.0.0.0/24",    // IETF protocol assignments (RFC 6890): /29 DS-Lite, .8 dummy, .9 PCP, .10 TURN, .170/.171 NAT64 discovery
	"192.0.2.0/24",    // TEST-NET-1 (RFC 5737)
	"192.31.196.0/24", // AS112-v4 (RFC 7535)
	"192.52.193.0/24", // AMT (RFC 7450)
	"192.88.99.0/24",  // deprecated 6to4 relay anycast (RFC 7526), 192.88.99.2/32 6a44 relay (RFC 6751)
	"192.168.0.0/16",  // private use (RFC 1918)
	"192.175.48.0/24", // direct delegation AS112 service (RFC 7534)
	"198.18.0.0/15",   // benchmarking (RFC 2544)
	"198.51.100.0/24", // TEST-NET-2 (RFC 5737)
	"203.0.113.0/24",  // TEST-NET-3 (RFC 5737)
	"224.0.0.0/4",     // multicast (RFC 5771; the IPv4 address space registry)
	"240.0.0.0/4",     // reserved (RFC 1112), 255.255.255.255/32 limited broadcast (RFC 919)
}

// v6 are the IPv6 Special-Purpose Address Registry's entries but the two judged by the IPv4 address they
// carry (::ffff:0:0/96, 64:ff9b::/96), and the ranges beside it that no public host uses.
var v6 = []string{
	"::/96",             // IPv4-compatible (deprecated, RFC 4291): ::/128 unspecified and ::1/128 loopback too
	"::ffff:0:0:0/96",   // IPv4-translated (RFC 2765)
	"64:ff9b:1::/48",    // local-use IPv4/IPv6 translation (RFC 8215)
	"100::/64",          // discard-only (RFC 6666)
	"100:0:0:1::/64",    // dummy prefix (RFC 9780)
	"2001::/23",         // IETF protocol assignments (RFC 2928): Teredo 2001::/32, PCP, TURN, DNS-SD anycast, benchmarking 2001:2::/48, AMT, AS112-v6, ORCHID, DRIP
	"2001:db8::/32",     // documentation (RFC 3849)
	"2002::/16",         // 6to4 (RFC 3056)
	"2620:4f:8000::/48", // direct delegation AS112 service (RFC 7534)
	"3fff::/20",         // documentation (RFC 9637)
	"5f00::/16",         // segment routing SIDs (RFC 9602)
	"fc00::/7",          // unique local (RFC 4193)
	"fe80::/10",         // link-local unicast (RFC 4291)
	"fec0::/10",         // site-local (deprecated, RFC 3879)
	"ff00::/8",          // multicast (RFC 4291)
}

// Prefixes of IPv6 forms judged by the IPv4 address in their last 32 bits.
var (
	mapped = netip.MustParsePrefix("::ffff:0:0/96")
	nat64  = netip.MustParsePrefix("64:ff9b::/96")
)

var denied = build()

func build() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range v4 {
		out = append(out, netip.MustParsePrefix(s))
	}
	for _, s := range v6 {
		out = append(out, netip.MustParsePrefix(s))
	}
	for _, s := range v4 {
		p := netip.MustParsePrefix(s)
		out = append(out, embed(mapped, p), embed(nat64, p))
	}
	return out
}

// embed is the IPv6 form of the IPv4 prefix p inside the /96 prefix in (::ffff:0:0/96, 64:ff9b::/96): its
// address in the last 32 bits.
func embed(in, p netip.Prefix) netip.Prefix {
	b := in.Addr().As16()
	a := p.Addr().As4()
	copy(b[12:], a[:])
	return netip.PrefixFrom(netip.AddrFrom16(b), 96+p.Bits())
}

// Prefixes returns the denied destinations, IPv4 prefixes first: what a filter installs to refuse what
// Denied refuses. The slice is the caller's.
func Prefixes() []netip.Prefix { return append([]netip.Prefix(nil), denied...) }

// Denied reports whether a is a destination Warren must not reach for a tenant (an invalid address is
// denied). A zone is ignored: fe80::1%eth0 is link-local.
func Denied(a netip.Addr) bool {
	if !a.IsValid() {
		return true
	}
	a = a.WithZone("")
	for _, p := range denied {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
