package egress

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/warren-mesh/warren/internal/netdeny"
)

// Ports are the gateway's ports a sandbox's traffic is redirected to.
type Ports struct {
	DNSUDP, DNSTCP uint16 // the resolver
	Proxy4, Proxy6 uint16 // the TCP proxy, for IPv4 and IPv6
}

// Redirect is the nftables table that brings a sandbox's traffic, arriving from its network namespace on
// Iface, to its gateway: DNS (UDP and TCP port 53, whatever address) to the resolver, every other TCP
// connection to the proxy of its family; every other UDP datagram (QUIC included), and every packet of
// another protocol (ICMP, SCTP), is refused with an administratively-prohibited ICMP error, but the UDP
// datagrams UDP's stack allows. It lives in the namespace the gateway listens in (the runner's
// host).
type Redirect struct {
	Table string // an inet table of its own
	Iface string
	Ports Ports
	// UDP, when set, lets through the UDP datagrams its stack allows by address (CIDR rules with
	// protocol udp or none; a datagram names no host, so domain rules do not apply), after the hard deny
	// list. Install again to follow a changed stack.
	UDP *Stack
}

// Install adds the table (replacing one of the same name) in the network namespace open at nsFd, or the
// caller's when nsFd is negative.
func (r Redirect) Install(nsFd int) error {
	if r.Table == "" || len(r.Iface) == 0 || len(r.Iface) >= unix.IFNAMSIZ {
		return fmt.Errorf("%w: nftables table %q, interface %q", ErrConfig, r.Table, r.Iface)
	}
	c, err := conn(nsFd)
	if err != nil {
		return err
	}
	defer c.CloseLasting()
	t := &nftables.Table{Family: nftables.TableFamilyINet, Name: r.Table}
	c.AddTable(t)
	c.DelTable(t) // flushed in one batch with what follows: a table left over is replaced
	c.AddTable(t)
	accept := nftables.ChainPolicyAccept
	nat := c.AddChain(&nftables.Chain{Name: "redirect", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest, Policy: &accept})
	in := c.AddChain(&nftables.Chain{Name: "udp_in", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	fwd := c.AddChain(&nftables.Chain{Name: "udp_forward", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	iif := matchIface(r.Iface)
	rule := func(ch *nftables.Chain, ex ...[]expr.Any) {
		all := append([]expr.Any(nil), iif...)
		for _, e := range ex {
			all = append(all, e...)
		}
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: all})
	}
	rule(nat, l4(unix.IPPROTO_UDP), dport(expr.CmpOpEq, 53), redirectTo(r.Ports.DNSUDP))
	rule(nat, l4(unix.IPPROTO_TCP), dport(expr.CmpOpEq, 53), redirectTo(r.Ports.DNSTCP))
	rule(nat, family(unix.NFPROTO_IPV4), l4(unix.IPPROTO_TCP), redirectTo(r.Ports.Proxy4))
	rule(nat, family(unix.NFPROTO_IPV6), l4(unix.IPPROTO_TCP), redirectTo(r.Ports.Proxy6))
	rule(in, l4(unix.IPPROTO_UDP), dport(expr.CmpOpNeq, r.Ports.DNSUDP), reject())
	if r.UDP != nil {
		first := udpChains(c, t, r.UDP)
		rule(fwd, l4(unix.IPPROTO_UDP), []expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: first.Name}})
	}
	// Every other packet the sandbox sends past the router is refused: UDP the rules above did not
	// let through, and every protocol but TCP (redirected to the proxy, never forwarded) and UDP:
	// ICMP (a ping's payload carries data), SCTP, raw IP.
	rule(fwd, reject())
	if err := c.Flush(); err != nil {
		return fmt.Errorf("install egress redirect %s: %w", r.Table, err)
	}
	return nil
}

// Remove deletes the table from the namespace open at nsFd (negative: the caller's); a table that is
// not there is not an error.
func (r Redirect) Remove(nsFd int) error {
	c, err := conn(nsFd)
	if err != nil {
		return err
	}
	defer c.CloseLasting()
	c.DelTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: r.Table})
	if err := c.Flush(); err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove egress redirect %s: %w", r.Table, err)
	}
	return nil
}

// udpChains adds the chains that judge a sandbox's UDP datagram by s, and returns the first: the hard
// deny list, then one chain per layer, each going on to the next only if its layer allows the
// datagram, the last to one that accepts. A datagram a chain does not pass on returns to the caller,
// which refuses it.
func udpChains(c *nftables.Conn, t *nftables.Table, s *Stack) *nftables.Chain {
	add := func(ch *nftables.Chain, ex ...[]expr.Any) {
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: slices.Concat(ex...)})
	}
	to := func(ch *nftables.Chain) []expr.Any {
		return []expr.Any{&expr.Verdict{Kind: expr.VerdictGoto, Chain: ch.Name}}
	}
	next := c.AddChain(&nftables.Chain{Name: "udp_allowed", Table: t})
	add(next, []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}})
	for i := len(s.layers) - 1; i >= 0; i-- {
		p := s.layers[i]
		ch := c.AddChain(&nftables.Chain{Name: fmt.Sprintf("udp_layer%d", i), Table: t})
		for _, r := range p.Deny {
			for _, m := range udpMatches(r) {
				add(ch, m, reject())
			}
		}
		switch p.Mode {
		case Open:
			add(ch, to(next))
		case Allowlist:
			for _, r := range p.Allow {
				for _, m := range udpMatches(r) {
					add(ch, m, to(next))
				}
			}
		}
		next = ch
	}
	hard := c.AddChain(&nftables.Chain{Name: "udp_hard", Table: t})
	for _, p := range s.hard.Extra {
		add(hard, daddr(p), reject())
	}
	for _, p := range s.hard.Open {
		add(hard, daddr(p), to(next))
	}
	for _, p := range netdeny.Prefixes() {
		add(hard, daddr(p), reject())
	}
	add(hard, to(next))
	return hard
}

// udpMatches are the matches of r's destinations for UDP: none for a domain or TCP rule, else its CIDR,
// on each of its ports.
func udpMatches(r Rule) [][]expr.Any {
	if r.Domain != "" || r.Protocol == TCP {
		return nil
	}
	if len(r.Ports) == 0 {
		return [][]expr.Any{daddr(r.prefix)}
	}
	var out [][]expr.Any
	for _, port := range r.Ports {
		out = append(out, slices.Concat(daddr(r.prefix), dport(expr.CmpOpEq, uint16(port))))
	}
	return out
}

// daddr matches packets whose destination lies in p (of p's family).
func daddr(p netip.Prefix) []expr.Any {
	p = p.Masked()
	addr := p.Addr().AsSlice()
	proto, off := byte(unix.NFPROTO_IPV4), uint32(16)
	if p.Addr().Is6() {
		proto, off = unix.NFPROTO_IPV6, 24
	}
	ex := slices.Concat(family(proto), []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: uint32(len(addr))},
	})
	if p.Bits() < len(addr)*8 {
		mask := net.CIDRMask(p.Bits(), len(addr)*8)
		ex = append(ex, &expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: uint32(len(addr)), Mask: mask, Xor: make([]byte, len(addr))})
	}
	return append(ex, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: addr})
}

// nftReadBuffer is the netlink receive buffer of the gateway's nftables connections: a flush of a table
// with the hard deny list's rules is answered rule by rule before the first answer is read, which the
// default buffer may not hold under load (ENOBUFS), as runner/isolate found.
const nftReadBuffer = 8 << 20

func conn(nsFd int) (*nftables.Conn, error) {
	opts := []nftables.ConnOption{nftables.WithSockOptions(func(c *netlink.Conn) error {
		rc, err := c.SyscallConn()
		if err == nil {
			var serr error
			if cerr := rc.Control(func(fd uintptr) {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, nftReadBuffer)
			}); cerr == nil && serr == nil {
				return nil
			}
		}
		return c.SetReadBuffer(nftReadBuffer)
	})}
	if nsFd >= 0 {
		opts = append(opts, nftables.WithNetNSFd(nsFd))
	}
	c, err := nftables.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("nftables: %w", err)
	}
	return c, nil
}

func matchIface(name string) []expr.Any {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: b},
	}
}

func family(f byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{f}},
	}
}

func l4(proto byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
	}
}

func port16(p uint16) []byte { return binary.BigEndian.AppendUint16(nil, p) }

// dport compares the TCP or UDP destination port (after l4).
func dport(op expr.CmpOp, p uint16) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: op, Register: 1, Data: port16(p)},
	}
}

func redirectTo(p uint16) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: port16(p)},
		&expr.Redir{RegisterProtoMin: 1},
	}
}

func reject() []expr.Any {
	return []expr.Any{&expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED}}
}
