package isolate

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
)

// What package isolate_test (which imports runner, so cannot be package isolate) reads of the package.

func RequireRoot(t *testing.T) { requireRoot(t) }

func HostAddrs() ([]netip.Prefix, error) { return hostAddrs() }

func LastAddr(p netip.Prefix) netip.Addr { return lastAddr(p) }

// FilterRule is one destination rule of a sandbox's egress filter as the kernel holds it.
type FilterRule struct {
	Dst    netip.Prefix
	Reject bool
}

// InstalledFilter reads back, in order, the rules of n's filter that match a destination prefix alone (not
// the loopback interface, DNS or neighbour discovery rules).
func InstalledFilter(n *Network) ([]FilterRule, error) {
	c, err := nftables.New(nftables.WithNetNSFd(int(n.nsFile.Fd())))
	if err != nil {
		return nil, err
	}
	defer c.CloseLasting()
	t := &nftables.Table{Family: nftables.TableFamilyINet, Name: "warren"}
	rules, err := c.GetRules(t, &nftables.Chain{Name: "egress", Table: t})
	if err != nil {
		return nil, err
	}
	var out []FilterRule
	for _, r := range rules {
		fr, ok, err := destinationRule(r.Exprs)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, fr)
		}
	}
	return out, nil
}

// destinationRule decodes what matchPrefix and a verdict make; ok is false for any other rule.
func destinationRule(ex []expr.Any) (fr FilterRule, ok bool, err error) {
	var addr []byte
	bits, verdict := -1, false
	for _, e := range ex {
		switch e := e.(type) {
		case *expr.Meta:
			if e.Key != expr.MetaKeyNFPROTO {
				return fr, false, nil
			}
		case *expr.Payload:
			if e.Base != expr.PayloadBaseNetworkHeader {
				return fr, false, nil
			}
		case *expr.Bitwise:
			bits = 0
			for _, b := range e.Mask {
				for ; b != 0; b <<= 1 {
					bits++
				}
			}
		case *expr.Cmp:
			if len(e.Data) == 4 || len(e.Data) == 16 {
				addr = e.Data
			}
		case *expr.Reject:
			fr.Reject, verdict = true, true
		case *expr.Verdict:
			verdict = e.Kind == expr.VerdictAccept
		}
	}
	if addr == nil || !verdict {
		return fr, false, fmt.Errorf("undecoded rule %#v", ex)
	}
	a, _ := netip.AddrFromSlice(addr)
	if bits < 0 {
		bits = a.BitLen()
	}
	fr.Dst = netip.PrefixFrom(a, bits)
	return fr, true, nil
}
