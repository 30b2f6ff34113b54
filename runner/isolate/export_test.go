package isolate

import (
	"bytes"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/nftables"
)

// What package isolate_test (which imports runner, so cannot be package isolate) reads of the package.

func RequireRoot(t *testing.T) { requireRoot(t) }

func HostAddrs() ([]netip.Prefix, error) { return hostAddrs() }

func LastAddr(p netip.Prefix) netip.Addr { return lastAddr(p) }

// FilterRange is one range of destinations of a sandbox's egress filter as the kernel holds it.
type FilterRange struct {
	First, Last netip.Addr
	Reject      bool
}

// Contains reports whether a lies in r.
func (r FilterRange) Contains(a netip.Addr) bool {
	return a.BitLen() == r.First.BitLen() && r.First.Compare(a) <= 0 && a.Compare(r.Last) <= 0
}

// InstalledFilter reads back the ranges of n's filter's destination sets in the order of its rules: the
// opened ones (sets allow4, allow6), then the refused ones (deny4, deny6).
func InstalledFilter(n *Network) ([]FilterRange, error) {
	c, err := nftables.New(nftables.WithNetNSFd(int(n.nsFile.Fd())))
	if err != nil {
		return nil, err
	}
	defer c.CloseLasting()
	t := &nftables.Table{Family: nftables.TableFamilyINet, Name: "warren"}
	sets, err := c.GetSets(t)
	if err != nil {
		return nil, err
	}
	var out []FilterRange
	for _, name := range []string{"allow4", "allow6", "deny4", "deny6"} {
		i := slices.IndexFunc(sets, func(s *nftables.Set) bool { return s.Name == name })
		if i < 0 {
			continue
		}
		els, err := c.GetSetElements(sets[i])
		if err != nil {
			return nil, err
		}
		rs, err := elementRanges(els)
		if err != nil {
			return nil, fmt.Errorf("set %s: %w", name, err)
		}
		for _, r := range rs {
			out = append(out, FilterRange{First: r.first, Last: r.last, Reject: strings.HasPrefix(name, "deny")})
		}
	}
	return out, nil
}

// elementRanges decodes an interval set's elements: a range starts at each element and ends before the next
// one that ends an interval, or at the family's last address.
func elementRanges(els []nftables.SetElement) ([]addrRange, error) {
	slices.SortFunc(els, func(a, b nftables.SetElement) int { return bytes.Compare(a.Key, b.Key) })
	var out []addrRange
	for i, e := range els {
		a, ok := netip.AddrFromSlice(e.Key)
		if !ok {
			return nil, fmt.Errorf("element key %x", e.Key)
		}
		if e.IntervalEnd {
			continue
		}
		last := lastAddr(netip.PrefixFrom(a, 0))
		if i+1 < len(els) {
			if !els[i+1].IntervalEnd {
				return nil, fmt.Errorf("interval at %s has no end before the next", a)
			}
			end, _ := netip.AddrFromSlice(els[i+1].Key)
			last = end.Prev()
		}
		out = append(out, addrRange{a, last})
	}
	return out, nil
}
