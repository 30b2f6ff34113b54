package egress

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Ports are the gateway's ports a sandbox's traffic is redirected to.
type Ports struct {
	DNSUDP, DNSTCP uint16 // the resolver
	Proxy4, Proxy6 uint16 // the TCP proxy, for IPv4 and IPv6
}

// Redirect is the nftables table that brings a sandbox's traffic, arriving from its network namespace on
// Iface, to its gateway: DNS (UDP and TCP port 53, whatever address) to the resolver, every other TCP
// connection to the proxy of its family; every other UDP datagram (QUIC included) is refused with an
// administratively-prohibited ICMP error. It lives in the namespace the gateway listens in (the runner's
// host).
type Redirect struct {
	Table string // an inet table of its own
	Iface string
	Ports Ports
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
	rule(fwd, l4(unix.IPPROTO_UDP), reject())
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

func conn(nsFd int) (*nftables.Conn, error) {
	var opts []nftables.ConnOption
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
