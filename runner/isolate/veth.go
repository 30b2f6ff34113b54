package isolate

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/warren-mesh/warren/internal/netdeny"
)

// The sandbox's network stacks (NetworkConfig.Stack).
const (
	// StackVeth is kernel networking: a veth pair between the runner's namespace and the sandbox's, routed
	// and masqueraded by the host. No process of its own; the default.
	StackVeth = "veth"
	// StackPasta is pasta, a user-mode network stack (one process per sandbox, about 30 MiB).
	StackPasta = "pasta"
)

// DefaultNetDir holds the lock files of the veth address slots in use, shared by every runner of the host;
// on /run (a tmpfs), so a reboot frees them with the processes that held them.
const DefaultNetDir = "/run/warren/sandbox-nets"

// The default veth address pools: each sandbox gets slot i, the /31 (IPv4) and /127 (IPv6) at 2i, the
// host's end the even address, the sandbox's the odd one. Both lie in ranges netdeny refuses, so the
// sandbox filter already refuses every sandbox's and every host end's address.
var (
	DefaultPool4 = netip.MustParsePrefix("10.213.0.0/16")
	DefaultPool6 = netip.MustParsePrefix("fd57:6172:7265::/48")
)

// The host end of slot i's pair is vethPrefix+i; the sandbox's end is sandboxIf. vethTablePrefix+i named
// the slot's host table of older runners (one per pair; the host table is shared now, vethhost.go).
const (
	vethPrefix      = "wvn"
	vethTablePrefix = "warren-" + vethPrefix
	sandboxIf       = "eth0"
	maxVethSlots    = 1 << 20
)

// vethMaxFlows bounds the connections (TCP, UDP flows, ...) one sandbox has tracked in the host's
// connection table at once (the host table's flows set, vethhost.go); a variable so that a test can lower
// it.
var vethMaxFlows uint32 = 4096

// slotKey chooses where a network's search for a free slot starts; a variable so that a test can choose.
var slotKey = func() string {
	return strconv.Itoa(os.Getpid()) + "/" + strconv.FormatInt(time.Now().UnixNano(), 10)
}

// vethLink is a sandbox's end of the host: its slot (held by lock), the host end's name and the
// addresses of both ends.
type vethLink struct {
	slot                       uint64
	lock                       *os.File
	ifname                     string
	host4, peer4, host6, peer6 netip.Addr // host6, peer6 invalid without IPv6 on the host
	table                      string     // its host table (vethhost.go), once joined
}

// newVethNetwork makes a network namespace without a process (the runner holds it by a descriptor), a veth
// pair into it on the addresses of a free slot, joins the pair to the host's table of its configuration
// (forwarding, masquerade, the host itself refused; vethhost.go), installs the egress filter inside, and
// opens the runner's relays inside (the forwarded ports and DNS, relays.go).
func newVethNetwork(cfg NetworkConfig) (*Network, error) {
	if cfg.Nsenter == "" {
		return nil, fmt.Errorf("%w: the sandbox network needs nsenter (util-linux)", ErrConfig)
	}
	if !cfg.Pool4.IsValid() {
		cfg.Pool4 = DefaultPool4
	}
	if !cfg.Pool6.IsValid() {
		cfg.Pool6 = DefaultPool6
	}
	if cfg.SlotDir == "" {
		cfg.SlotDir = DefaultNetDir
	}
	nets, err := hostNets()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	slots, err := checkPools(cfg.Pool4, cfg.Pool6, nets)
	if err != nil {
		return nil, err
	}
	if !cfg.Resolver.IsValid() {
		cfg.Resolver = hostResolver("/etc/resolv.conf")
	}
	v6, err := enableForwarding()
	if err != nil {
		return nil, err
	}
	slot, lock, err := lockSlot(cfg.SlotDir, slotKey(), slots, func(i uint64) string { return strconv.FormatUint(i, 10) })
	if err != nil {
		return nil, fmt.Errorf("sandbox network address: %w", err)
	}
	v := &vethLink{slot: slot, lock: lock, ifname: vethPrefix + strconv.FormatUint(slot, 10)}
	v.host4, v.peer4 = addrAdd(cfg.Pool4.Masked().Addr(), 2*slot), addrAdd(cfg.Pool4.Masked().Addr(), 2*slot+1)
	if v6 {
		v.host6, v.peer6 = addrAdd(cfg.Pool6.Masked().Addr(), 2*slot), addrAdd(cfg.Pool6.Masked().Addr(), 2*slot+1)
	}
	n := &Network{cfg: cfg, veth: v, closing: make(chan struct{}), down: make(chan struct{})}
	if n.nsFile, err = newNetns(); err != nil {
		n.Close()
		return nil, fmt.Errorf("%w: make the sandbox network namespace: %w", ErrConfig, err)
	}
	if err := v.link(n.nsFile); err != nil {
		n.Close()
		return nil, fmt.Errorf("%w: sandbox network link: %w", ErrConfig, err)
	}
	if err := v.join(cfg.SlotDir, cfg.Allow, cfg.Pool4, cfg.Pool6); err != nil {
		n.Close()
		return nil, fmt.Errorf("%w: sandbox network host rules: %w", ErrConfig, err)
	}
	if err := n.installEgress(hostDeny(nets)); err != nil {
		n.Close()
		return nil, err
	}
	if err := n.startRelays(); err != nil {
		n.Close()
		return nil, fmt.Errorf("%w: sandbox network relays: %w", ErrConfig, err)
	}
	return n, nil
}

// checkPools returns how many slots the pools hold; each must be of its family, hold one slot at least,
// lie inside what netdeny refuses (so that the sandbox filter refuses every sandbox's address), and
// overlap none of the host's networks (nets) but the pairs' own.
func checkPools(p4, p6 netip.Prefix, nets []hostNet) (uint64, error) {
	slots := uint64(maxVethSlots)
	for _, p := range []struct {
		p    netip.Prefix
		want int
	}{{p4, 32}, {p6, 128}} {
		if p.p.Addr().BitLen() != p.want || p.p.Bits() > p.want-1 {
			return 0, fmt.Errorf("%w: sandbox address pool %s: want an IPv%d prefix of /%d or wider", ErrConfig, p.p, map[int]int{32: 4, 128: 6}[p.want], p.want-1)
		}
		if !netdeny.Denied(p.p.Masked().Addr()) || !netdeny.Denied(lastAddr(p.p)) {
			return 0, fmt.Errorf("%w: sandbox address pool %s: want a private range (one the egress filter refuses)", ErrConfig, p.p)
		}
		if free := p.want - p.p.Bits() - 1; free < 20 {
			slots = min(slots, uint64(1)<<free)
		}
	}
	for _, hn := range nets {
		if !hn.p.Overlaps(p4) && !hn.p.Overlaps(p6) {
			continue
		}
		// A pair's host end: the even address of a slot's /31 or /127 inside its pool.
		if hostEnd := hn.p.Addr() == hn.p.Masked().Addr() &&
			(hn.p.Bits() == 31 && p4.Contains(hn.p.Addr()) || hn.p.Bits() == 127 && p6.Contains(hn.p.Addr())); hostEnd {
			continue
		}
		on := strconv.Itoa(hn.link)
		if l, err := netlink.LinkByIndex(hn.link); err == nil {
			on = l.Attrs().Name
		}
		return 0, fmt.Errorf("%w: sandbox address pool %s or %s overlaps the host's network %s on %s: choose another (-sandbox-net-pool)", ErrConfig, p4, p6, hn.p, on)
	}
	return slots, nil
}

// addrAdd is a plus n (no overflow check: the callers stay inside a checked pool).
func addrAdd(a netip.Addr, n uint64) netip.Addr {
	b := a.As16()
	for i := 15; i >= 0 && n > 0; i-- {
		s := uint64(b[i]) + n&0xff
		b[i] = byte(s)
		n = n>>8 + s>>8
	}
	r := netip.AddrFrom16(b)
	if a.Is4() {
		return r.Unmap()
	}
	return r
}

// lastAddr is the last address of p.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// hostResolver is the first nameserver of the host's resolv.conf at port 53 (127.0.0.1 when it names
// none): the upstream of the sandbox's DNS relay.
func hostResolver(path string) netip.AddrPort {
	b, _ := os.ReadFile(path)
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "nameserver" {
			if a, err := netip.ParseAddr(f[1]); err == nil {
				return netip.AddrPortFrom(a, 53)
			}
		}
	}
	return netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), 53)
}

// enableForwarding turns on the host's IPv4 and IPv6 forwarding (as Docker does; the sandboxes' traffic
// is routed). v6 is false when the host has no IPv6. A host that forwards ignores IPv6 router
// advertisements on interfaces whose accept_ra is 1; those are set to 2 first, so the host keeps its own
// IPv6 default route.
func enableForwarding() (v6 bool, err error) {
	if err := setSysctl("/proc/sys/net/ipv4/ip_forward", "1"); err != nil {
		return false, err
	}
	const all6 = "/proc/sys/net/ipv6/conf/all/forwarding"
	b, err := os.ReadFile(all6)
	if err != nil {
		return false, nil
	}
	if strings.TrimSpace(string(b)) == "1" {
		return true, nil
	}
	ras, _ := filepath.Glob("/proc/sys/net/ipv6/conf/*/accept_ra")
	for _, f := range ras {
		if b, err := os.ReadFile(f); err == nil && strings.TrimSpace(string(b)) == "1" {
			if err := setSysctl(f, "2"); err != nil {
				return false, err
			}
		}
	}
	return true, setSysctl(all6, "1")
}

func setSysctl(path, v string) error {
	if b, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(b)) == v {
		return nil
	}
	if err := os.WriteFile(path, []byte(v), 0o644); err != nil {
		return fmt.Errorf("%w: sandbox network: set %s to %s: %w", ErrConfig, path, v, err)
	}
	return nil
}

// newNetns makes a network namespace and returns it open. No process holds it: the descriptor does (and
// the sandbox's commands, while they run), so a runner that dies takes it, and the pair into it, along.
func newNetns() (*os.File, error) {
	type result struct {
		f   *os.File
		err error
	}
	done := make(chan result, 1)
	go func() {
		// As in DialLoopback: a thread that cannot return to the runner's namespace stays locked and ends
		// with the goroutine.
		runtime.LockOSThread()
		own, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{nil, err}
			return
		}
		defer own.Close()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- result{nil, fmt.Errorf("unshare: %w", err)}
			return
		}
		f, err := os.Open("/proc/thread-self/ns/net")
		if serr := unix.Setns(int(own.Fd()), unix.CLONE_NEWNET); serr != nil {
			if f != nil {
				f.Close()
			}
			done <- result{nil, fmt.Errorf("return to the runner's network namespace: %w", serr)}
			return
		}
		runtime.UnlockOSThread()
		done <- result{f, err}
	}()
	r := <-done
	return r.f, r.err
}

// link makes the pair, the host end in the runner's namespace and sandboxIf in ns, addresses both ends,
// brings up the namespace's loopback (with the DNS relay's address) and routes the namespace's traffic to
// the host end.
func (v *vethLink) link(ns *os.File) error {
	la := netlink.NewLinkAttrs()
	la.Name, la.Flags = v.ifname, net.FlagUp // the host end up from the start
	pair := &netlink.Veth{LinkAttrs: la, PeerName: sandboxIf, PeerNamespace: netlink.NsFd(int(ns.Fd()))}
	err := netlink.LinkAdd(pair)
	if errors.Is(err, unix.EEXIST) {
		// A runner that died holding the slot left its host end (its namespace not yet gone): ours now.
		if l, lerr := netlink.LinkByName(v.ifname); lerr == nil {
			_ = netlink.LinkDel(l)
		}
		err = netlink.LinkAdd(pair)
	}
	if err != nil {
		return fmt.Errorf("add %s: %w", v.ifname, err)
	}
	var host netlink.Link = pair // LinkAdd looked its index up
	if pair.Index == 0 {
		if host, err = netlink.LinkByName(v.ifname); err != nil {
			return err
		}
	}
	// No duplicate address detection: the addresses are the slot's, and IPv6 would wait for it.
	addr := func(h *netlink.Handle, l netlink.Link, a netip.Addr, bits int) error {
		if !a.IsValid() {
			return nil
		}
		na := &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, a.BitLen())}}
		if a.Is6() {
			na.Flags = unix.IFA_F_NODAD
		}
		if err := h.AddrAdd(l, na); err != nil {
			return fmt.Errorf("address %s: %w", a, err)
		}
		return nil
	}
	var hh netlink.Handle // the runner's namespace
	if err := addr(&hh, host, v.host4, 31); err != nil {
		return err
	}
	if err := addr(&hh, host, v.host6, 127); err != nil {
		return err
	}
	nh, err := netlink.NewHandleAt(netns.NsHandle(ns.Fd()))
	if err != nil {
		return err
	}
	defer nh.Close()
	lo := &netlink.Device{LinkAttrs: netlink.LinkAttrs{Name: "lo", Index: 1}} // a new namespace's first link, always
	if err := nh.LinkSetUp(lo); err != nil {
		return err
	}
	if err := addr(nh, lo, netip.MustParseAddr(DNSForward), 32); err != nil {
		return err
	}
	peer, err := nh.LinkByName(sandboxIf)
	if err != nil {
		return err
	}
	if err := addr(nh, peer, v.peer4, 31); err != nil {
		return err
	}
	if err := addr(nh, peer, v.peer6, 127); err != nil {
		return err
	}
	if err := nh.LinkSetUp(peer); err != nil {
		return err
	}
	for _, gw := range []netip.Addr{v.host4, v.host6} {
		if gw.IsValid() {
			if err := nh.RouteAdd(&netlink.Route{LinkIndex: peer.Attrs().Index, Gw: gw.AsSlice()}); err != nil {
				return fmt.Errorf("default route via %s: %w", gw, err)
			}
		}
	}
	return nil
}

// close removes the pair, then takes it out of its host table, and gives the slot back.
func (v *vethLink) close() {
	if l, err := netlink.LinkByName(v.ifname); err == nil {
		_ = netlink.LinkDel(l)
	}
	_ = v.quit()
	if v.lock != nil {
		v.lock.Close()
	}
}
