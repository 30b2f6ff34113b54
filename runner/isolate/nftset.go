package isolate

import (
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// addrRange is the addresses from first to last, both included, of one family.
type addrRange struct{ first, last netip.Addr }

// mergeRanges is the union of ps as the fewest disjoint ranges of each family, in order: what an nftables
// interval set holds (the kernel refuses overlapping intervals). Prefixes inside another, and the host's
// addresses inside a denied range (every sandbox pair's host end, link-local addresses), vanish, so the
// filter does not grow with the host's interfaces.
func mergeRanges(ps []netip.Prefix) (v4, v6 []addrRange) {
	rs := make([]addrRange, 0, len(ps))
	for _, p := range ps {
		rs = append(rs, addrRange{p.Masked().Addr(), lastAddr(p)})
	}
	slices.SortFunc(rs, func(a, b addrRange) int {
		if a.first.Is4() != b.first.Is4() {
			if a.first.Is4() {
				return -1
			}
			return 1
		}
		return a.first.Compare(b.first)
	})
	for _, r := range rs {
		out := &v6
		if r.first.Is4() {
			out = &v4
		}
		if n := len(*out); n > 0 {
			cur := &(*out)[n-1]
			// Adjacent or overlapping: one range (cur.last's successor is invalid at the family's end).
			if next := cur.last.Next(); !next.IsValid() || r.first.Compare(next) <= 0 {
				if r.last.Compare(cur.last) > 0 {
					cur.last = r.last
				}
				continue
			}
		}
		*out = append(*out, r)
	}
	return v4, v6
}

// intervalElements are the elements of an interval set holding rs: each range's first address, and the
// address after its last marked as the interval's end (none for a range that reaches the family's end).
func intervalElements(rs []addrRange) []nftables.SetElement {
	els := make([]nftables.SetElement, 0, 2*len(rs))
	for _, r := range rs {
		els = append(els, nftables.SetElement{Key: r.first.AsSlice()})
		if end := r.last.Next(); end.IsValid() {
			els = append(els, nftables.SetElement{Key: end.AsSlice(), IntervalEnd: true})
		}
	}
	return els
}

// addrSets adds to t, in c's batch, interval sets named name+"4" and name+"6" holding ps and returns the
// expressions that match a packet whose destination is in them (one per family that holds any). ids
// numbers the sets of the batch (google/nftables' own counter is shared by every connection unguarded).
func addrSets(c *nftables.Conn, t *nftables.Table, name string, ps []netip.Prefix, ids *uint32) ([][]expr.Any, error) {
	v4, v6 := mergeRanges(ps)
	var out [][]expr.Any
	for _, fam := range []struct {
		rs    []addrRange
		typ   nftables.SetDatatype
		proto byte
		off   uint32
	}{{v4, nftables.TypeIPAddr, unix.NFPROTO_IPV4, 16}, {v6, nftables.TypeIP6Addr, unix.NFPROTO_IPV6, 24}} {
		if len(fam.rs) == 0 {
			continue
		}
		*ids++
		s := &nftables.Set{Table: t, ID: *ids, Name: name + map[byte]string{unix.NFPROTO_IPV4: "4", unix.NFPROTO_IPV6: "6"}[fam.proto],
			KeyType: fam.typ, Interval: true}
		if err := c.AddSet(s, intervalElements(fam.rs)); err != nil {
			return nil, err
		}
		out = append(out, []expr.Any{
			&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{fam.proto}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: fam.off, Len: fam.typ.Bytes},
			&expr.Lookup{SourceRegister: 1, SetName: s.Name, SetID: s.ID},
		})
	}
	return out, nil
}
