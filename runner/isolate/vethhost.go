package isolate

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// The host's rules for veth sandboxes live in one table per configuration (hostTablePrefix and a digest
// of the pools, the opened ranges and the flow bound), made by the first runner that needs it and shared
// by every sandbox of that configuration on the host, whichever runner made it. A sandbox joins it by
// adding its host end's name and addresses to the table's sets, so a start is one small batch of set
// elements, not a table of its own (a dozen rules, the NAT hook and the flow counter each time).
const hostTablePrefix = "warren-veth-"

// hostTableVersion is part of a host table's name: a table made by a runner is never changed, so a change to
// makeHostTable must change it too, or the host keeps the rules of the runner that came first.
const hostTableVersion = 1

// The sets of a host table: ifs names the host ends of its sandboxes (every rule applies to those alone,
// so tables of different configurations never act on each other's sandboxes); own4 and own6 pair each
// host end with its sandbox's address; flows counts each sandbox's tracked connections (filled by the
// forward chain).
const (
	setIfs   = "ifs"
	setOwn4  = "own4"
	setOwn6  = "own6"
	setFlows = "flows"
)

// hostTableName names the host table of a configuration.
func hostTableName(allow []netip.Prefix, flows uint32, pools ...netip.Prefix) string {
	h := sha256.New()
	fmt.Fprintf(h, "version %d\n", hostTableVersion)
	for _, p := range pools {
		fmt.Fprintf(h, "pool %s\n", p)
	}
	for _, p := range allow {
		fmt.Fprintf(h, "allow %s\n", p)
	}
	fmt.Fprintf(h, "flows %d\n", flows)
	return hostTablePrefix + hex.EncodeToString(h.Sum(nil)[:6])
}

// ifnameKey is name as nftables holds an interface name: 16 bytes, NUL-padded.
func ifnameKey(name string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return b
}

// join adds the pair to the host table of its configuration, making the table if this host has none yet: one
// batch of a few set elements. The slot's lock file names the table the pair joins, and a clean close
// empties it; a table named there when the slot is taken is what a runner that held the slot and died
// left, and the pair's elements are deleted from it in the same batch (deletions cost the batch a wait
// for an RCU grace period, milliseconds under load, so only then). Tables of older runners (one per slot,
// vethTablePrefix) whose slot nobody holds are deleted.
func (v *vethLink) join(dir string, allow []netip.Prefix, pools ...netip.Prefix) error {
	name := hostTableName(allow, vethMaxFlows, pools...)
	left, err := v.record()
	if err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		c, err := newNFT()
		if err != nil {
			return err
		}
		ts, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
		if err != nil {
			return fmt.Errorf("list nftables tables: %w", err)
		}
		var t *nftables.Table
		var locks []*os.File // of the legacy tables' slots, held until they are deleted
		for _, tb := range ts {
			if tb.Name == name {
				t = tb
			}
			switch {
			case tb.Name == left:
				v.leave(c, tb)
			case strings.HasPrefix(tb.Name, vethTablePrefix):
				lock, err := sweepLegacy(c, tb, dir, v.slot)
				if err != nil {
					closeAll(locks)
					return err
				}
				if lock != nil {
					locks = append(locks, lock)
				}
			}
		}
		if t == nil {
			t = makeHostTable(c, name, allow, pools...)
		}
		if err := errors.Join(
			c.SetAddElements(hostSet(t, setIfs), []nftables.SetElement{{Key: ifnameKey(v.ifname)}}),
			c.SetAddElements(hostSet(t, setOwn4), []nftables.SetElement{{Key: append(ifnameKey(v.ifname), v.peer4.AsSlice()...)}}),
		); err != nil {
			closeAll(locks)
			return err
		}
		if v.peer6.IsValid() {
			if err := c.SetAddElements(hostSet(t, setOwn6), []nftables.SetElement{{Key: append(ifnameKey(v.ifname), v.peer6.AsSlice()...)}}); err != nil {
				closeAll(locks)
				return err
			}
		}
		if err := v.note(name); err != nil { // before the batch: a crash after it leaves the name behind
			closeAll(locks)
			return err
		}
		err = c.Flush()
		closeAll(locks)
		if err == nil {
			v.table = name
			return nil
		}
		// Another runner made the table between the listing and the batch (EEXIST), or deleted a table the
		// batch touched (ENOENT): list again.
		if attempt == 2 || !errors.Is(err, unix.EEXIST) && !errors.Is(err, unix.ENOENT) {
			return err
		}
	}
}

// record is the host table the slot's lock file names ("" for none).
func (v *vethLink) record() (string, error) {
	b := make([]byte, 256)
	n, err := v.lock.ReadAt(b, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("%w: read the slot's lock file: %w", ErrConfig, err)
	}
	return strings.TrimSpace(string(b[:n])), nil
}

// note makes the slot's lock file name table ("" for none).
func (v *vethLink) note(table string) error {
	if err := v.lock.Truncate(0); err != nil {
		return fmt.Errorf("%w: write the slot's lock file: %w", ErrConfig, err)
	}
	if _, err := v.lock.WriteAt([]byte(table), 0); err != nil {
		return fmt.Errorf("%w: write the slot's lock file: %w", ErrConfig, err)
	}
	return nil
}

// leave deletes the pair's elements from t (its membership, addresses and flow count) in c's batch, whether
// or not t holds them: an element added and deleted in one batch is gone either way, where a deletion
// alone fails the batch on an element that is not there.
func (v *vethLink) leave(c *nftables.Conn, t *nftables.Table) {
	forget := func(set string, key []byte) {
		s, els := hostSet(t, set), []nftables.SetElement{{Key: key}}
		_ = c.SetAddElements(s, els) // errors only for anonymous sets
		_ = c.SetDeleteElements(s, els)
	}
	forget(setIfs, ifnameKey(v.ifname))
	forget(setFlows, ifnameKey(v.ifname))
	forget(setOwn4, append(ifnameKey(v.ifname), v.peer4.AsSlice()...))
	if v.peer6.IsValid() {
		forget(setOwn6, append(ifnameKey(v.ifname), v.peer6.AsSlice()...))
	}
}

// hostSet is set name of host table t, as a batch names an existing set.
func hostSet(t *nftables.Table, name string) *nftables.Set {
	s := &nftables.Set{Table: t, Name: name}
	switch name {
	case setIfs, setFlows:
		s.KeyType = nftables.TypeIFName
	case setOwn4:
		s.KeyType, s.Concatenation = nftables.MustConcatSetType(nftables.TypeIFName, nftables.TypeIPAddr), true
	case setOwn6:
		s.KeyType, s.Concatenation = nftables.MustConcatSetType(nftables.TypeIFName, nftables.TypeIP6Addr), true
	}
	return s
}

// makeHostTable adds, in c's batch, the host table name (failing the batch if another runner made it
// meanwhile): nothing enters a member's pair but the replies of its sandbox's own connections (other
// sandboxes, the host's neighbours, the internet cannot open one to it); what leaves it carries its
// sandbox's own address; its sandbox's new connections beyond vethMaxFlows tracked at once are dropped;
// nothing of it reaches the host itself but IPv6 neighbour discovery (the host end's address and every
// other address of the host refuse the sandbox, whatever its filter says) and the operator's opened
// ranges (allow, -egress-allow: a git server or mirror on the host), never the pools (every pair's host
// end); and the pools' traffic leaves the host masqueraded as the host.
func makeHostTable(c *nftables.Conn, name string, allow []netip.Prefix, pools ...netip.Prefix) *nftables.Table {
	t := c.CreateTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: name})
	var ids uint32
	set := func(name string, dynamic bool) {
		s := hostSet(t, name)
		ids++
		s.ID, s.Dynamic = ids, dynamic
		if dynamic {
			s.Size = 65536
		}
		_ = c.AddSet(s, nil) // errors only for anonymous sets
	}
	set(setIfs, false)
	set(setOwn4, false)
	set(setOwn6, false)
	set(setFlows, true)
	accept := nftables.ChainPolicyAccept
	chain := func(name string, typ nftables.ChainType, hook *nftables.ChainHook, prio *nftables.ChainPriority) *nftables.Chain {
		return c.AddChain(&nftables.Chain{Name: name, Table: t, Type: typ, Hooknum: hook, Priority: prio, Policy: &accept})
	}
	fwd := chain("forward", nftables.ChainTypeFilter, nftables.ChainHookForward, nftables.ChainPriorityFilter)
	in := chain("input", nftables.ChainTypeFilter, nftables.ChainHookInput, nftables.ChainPriorityFilter)
	post := chain("postrouting", nftables.ChainTypeNAT, nftables.ChainHookPostrouting, nftables.ChainPriorityNATSource)
	drop, acc := &expr.Verdict{Kind: expr.VerdictDrop}, &expr.Verdict{Kind: expr.VerdictAccept}
	rule := func(ch *nftables.Chain, ex ...[]expr.Any) {
		var all []expr.Any
		for _, e := range ex {
			all = append(all, e...)
		}
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: all})
	}
	member := func(key expr.MetaKey) []expr.Any {
		return []expr.Any{&expr.Meta{Key: key, Register: 1}, &expr.Lookup{SourceRegister: 1, SetName: setIfs}}
	}
	ctState := func(bits uint32) []expr.Any {
		return []expr.Any{
			&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: binaryutil.NativeEndian.PutUint32(bits), Xor: make([]byte, 4)},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
		}
	}
	// Into a pair: replies only.
	rule(fwd, member(expr.MetaKeyOIFNAME), ctState(expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED), []expr.Any{acc})
	rule(fwd, member(expr.MetaKeyOIFNAME), []expr.Any{drop})
	// Out of a pair: the pair's own address only (host end's name and source address, not in own4/own6).
	for _, fam := range []struct {
		proto byte
		off   uint32
		len   uint32
		set   string
	}{{unix.NFPROTO_IPV4, 12, 4, setOwn4}, {unix.NFPROTO_IPV6, 8, 16, setOwn6}} {
		rule(fwd, member(expr.MetaKeyIIFNAME), []expr.Any{
			&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 2},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 2, Data: []byte{fam.proto}},
			&expr.Payload{DestRegister: 2, Base: expr.PayloadBaseNetworkHeader, Offset: fam.off, Len: fam.len},
			&expr.Lookup{SourceRegister: 1, SetName: fam.set, Invert: true},
			drop,
		})
	}
	// What the sandbox opens through the host is tracked in the host's connection table, which every
	// sandbox, the runner and the edge share (nf_conntrack_max): its new connections beyond vethMaxFlows
	// tracked at once are dropped, so one tenant cannot fill the table (a loop of UDP datagrams to fresh
	// ports) and stop the host's new connections. flows keeps a counter per host end.
	rule(fwd, member(expr.MetaKeyIIFNAME), ctState(expr.CtStateBitNEW), []expr.Any{
		&expr.Dynset{SrcRegKey: 1, SetName: setFlows, Operation: unix.NFT_DYNSET_OP_ADD,
			Exprs: []expr.Any{&expr.Connlimit{Count: vethMaxFlows, Flags: 1 /* NFT_CONNLIMIT_F_INV: over the count */}}},
		drop,
	})
	rule(in, member(expr.MetaKeyIIFNAME), neighbourDiscovery(acc))
	for _, p := range pools {
		rule(in, member(expr.MetaKeyIIFNAME), matchPrefix(p), []expr.Any{drop})
	}
	for _, p := range allow {
		rule(in, member(expr.MetaKeyIIFNAME), matchPrefix(p), []expr.Any{acc})
	}
	rule(in, member(expr.MetaKeyIIFNAME), []expr.Any{drop})
	// The input interface is unknown after routing: the pools' sources (the forward chain let only each
	// pair's own out) leaving by an interface other than a pair's.
	for _, p := range pools {
		rule(post, matchSource(p), []expr.Any{
			&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte(vethPrefix)},
			&expr.Masq{},
		})
	}
	return t
}

// matchSource matches packets whose source lies in p (of p's family).
func matchSource(p netip.Prefix) []expr.Any {
	ex := matchPrefix(p)
	pl := ex[2].(*expr.Payload)
	pl.Offset -= uint32(p.Addr().BitLen() / 8) // the source precedes the destination in both headers
	return ex
}

// sweepLegacy deletes, in c's batch, t (an older runner's table of a slot, which a runner that died left)
// unless a live runner holds its slot; the slot taken is this runner's. The slot's lock comes back, to be
// held until the batch is done.
func sweepLegacy(c *nftables.Conn, t *nftables.Table, dir string, taken uint64) (*os.File, error) {
	slot, err := strconv.ParseUint(strings.TrimPrefix(t.Name, vethTablePrefix), 10, 64)
	if err != nil {
		return nil, nil
	}
	var lock *os.File
	if slot != taken {
		f, ok, err := tryLock(filepath.Join(dir, strconv.FormatUint(slot, 10)))
		if err != nil || !ok {
			return nil, err // !ok: a live runner's
		}
		lock = f
	}
	c.DelTable(t)
	return lock, nil
}

func closeAll(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

// quit takes the pair out of its host table (slot given back next).
func (v *vethLink) quit() error {
	if v.table == "" {
		return nil
	}
	c, err := newNFT()
	if err != nil {
		return err
	}
	v.leave(c, &nftables.Table{Family: nftables.TableFamilyINet, Name: v.table})
	if err := c.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("%w: leave the host table: %w", ErrConfig, err)
	}
	return v.note("")
}
