package isolate

import (
	"bufio"
	"bytes"
	"fmt"
	"hash/fnv"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/net/dns/dnsmessage"
)

// vethSandbox is a sandbox on a veth network of its own configured by ncfg (Stack and the programs filled in).
func vethSandbox(t *testing.T, ncfg NetworkConfig) *Sandbox {
	t.Helper()
	cfg := secureConfig(t, t.TempDir(), nil)
	cfg.Network.Close() // secureConfigIn's; this test wants its own
	ncfg.Stack = StackVeth
	cfg.Network = testNetwork(t, ncfg)
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// nsPath names n's namespace for listenIn.
func nsPath(n *Network) string { return "/proc/self/fd/" + strconv.Itoa(int(n.nsFile.Fd())) }

// TestIsolationNetworkSandboxesApart: on veth networks, a sandbox reaches neither another sandbox (at its
// IPv4 or IPv6 address) nor the host at its end of the pair or the other's (a runner's other ports, any
// service on the host) — also when the operator opened the whole address pool to the sandboxes
// (-egress-allow), where the host's table of each pair alone refuses it: nothing enters a pair but the
// replies to its sandbox's own connections, and nothing of the host answers on it.
func TestIsolationNetworkSandboxesApart(t *testing.T) {
	requireRoot(t)
	host := listenIn(t, "", "[::]:0", "host-any") // the runner's other ports, the host's services
	hostPort := host.Addr().(*net.TCPAddr).Port
	for _, opened := range []bool{false, true} {
		t.Run("pool opened "+strconv.FormatBool(opened), func(t *testing.T) {
			var allow []netip.Prefix
			if opened {
				allow = []netip.Prefix{DefaultPool4, DefaultPool6}
			}
			a, b := vethSandbox(t, NetworkConfig{Allow: allow}), vethSandbox(t, NetworkConfig{Allow: allow})
			na, nb := a.network.Load(), b.network.Load()
			ln := listenIn(t, nsPath(nb), "[::]:0", "sandbox-b")
			port := ln.Addr().(*net.TCPAddr).Port
			for _, addr := range []netip.Addr{nb.veth.peer4, nb.veth.peer6} {
				// B's listener is there: B reaches it at its own address.
				if got, e := reach(t, b, addr.String(), port); got != "sandbox-b" {
					t.Fatalf("B at its own address %s: %q (%s)", addr, got, e)
				}
				if got, e := reach(t, a, addr.String(), port); got != "" {
					t.Errorf("A reached B at %s: %q (%s)", addr, got, e)
				}
			}
			for _, addr := range []netip.Addr{na.veth.host4, na.veth.host6, nb.veth.host4, nb.veth.host6} {
				if got, e := reach(t, a, addr.String(), hostPort); got != "" {
					t.Errorf("A reached the host at %s: %q (%s)", addr, got, e)
				}
			}
		})
	}
}

// TestIsolationNetworkDNS: on a veth network the sandbox's resolver (DNSForward, in its resolv.conf) is
// the runner's relay to the host's resolver, here a DNS server of the test's on the host's loopback.
func TestIsolationNetworkDNS(t *testing.T) {
	requireRoot(t)
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go serveDNS(pc, "warren.test.", [4]byte{203, 0, 113, 77})
	s := vethSandbox(t, NetworkConfig{Resolver: pc.LocalAddr().(*net.UDPAddr).AddrPort()})
	res, o := sh(t, s, "getent hosts warren.test")
	if res.ExitCode != 0 || !strings.HasPrefix(o.stdout.String(), "203.0.113.77 ") {
		t.Fatalf("getent hosts warren.test: %+v %q %q", res, o.stdout.String(), o.stderr.String())
	}
}

// serveDNS answers every A query for name on pc with a, and every other with no record.
func serveDNS(pc net.PacketConn, name string, a [4]byte) {
	buf := make([]byte, 4096)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		var p dnsmessage.Parser
		h, err := p.Start(buf[:n])
		if err != nil {
			continue
		}
		q, err := p.Question()
		if err != nil {
			continue
		}
		b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true})
		_ = b.StartQuestions()
		_ = b.Question(q)
		_ = b.StartAnswers()
		if q.Type == dnsmessage.TypeA && strings.EqualFold(q.Name.String(), name) {
			_ = b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 60}, dnsmessage.AResource{A: a})
		}
		out, err := b.Finish()
		if err == nil {
			_, _ = pc.WriteTo(out, from)
		}
	}
}

// TestIsolationNetworkCrashLeftovers: a runner killed with its veth network up (here a child of the test,
// SIGKILLed, its network opened to a range of its own, so in a host table of its own) leaves its pair a
// member of that table (the pair itself ends with its namespace), and the slot's lock file naming the
// table. The next network made on that slot, of another configuration, takes the slot out of the dead
// runner's table: its rules would otherwise apply to the new sandbox too. A per-slot table of an older
// runner whose slot is free is deleted as well.
func TestIsolationNetworkCrashLeftovers(t *testing.T) {
	requireRoot(t)
	if os.Getenv("WARREN_TEST_VETH_CRASH") != "" {
		n, err := NewNetwork(NetworkConfig{Nsenter: toolPath(t, "nsenter", "util-linux"),
			Allow: []netip.Prefix{netip.MustParsePrefix("10.77.0.0/16"), netip.MustParsePrefix(os.Getenv("WARREN_TEST_VETH_CRASH"))}})
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("slot %d table %s\n", n.veth.slot, n.veth.table)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestIsolationNetworkCrashLeftovers$")
	own := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 78, byte(os.Getpid() >> 8), byte(os.Getpid())}), 32)
	cmd.Env = append(os.Environ(), "WARREN_TEST_VETH_CRASH="+own.String())
	out, _ := cmd.Output()
	var slot uint64
	var table string
	if _, err := fmt.Sscanf(string(out), "slot %d table %s", &slot, &table); err != nil {
		t.Fatalf("the crashing runner: %q: %v", out, err)
	}
	t.Cleanup(func() { deleteTable(t, table) })
	link := vethPrefix + strconv.FormatUint(slot, 10)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := netlink.LinkByName(link); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still there 10 s after its runner died", link)
		}
	}
	if !slices.Contains(members(t, table), link) {
		t.Fatalf("%s is no member of the dead runner's table %s after the crash: the test shows nothing", link, table)
	}
	// An older runner's table of a free slot.
	legacySlot := (slot + 7) % 32768
	lock, ok, err := tryLock(filepath.Join(DefaultNetDir, strconv.FormatUint(legacySlot, 10)))
	if err != nil || !ok {
		t.Fatalf("slot %d is taken (%v)", legacySlot, err)
	}
	lock.Close()
	legacy := vethTablePrefix + strconv.FormatUint(legacySlot, 10)
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: legacy})
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteTable(t, legacy) })
	// Take that very slot again, as a runner started after the crash may.
	defer func(f func() string) { slotKey = f }(slotKey)
	slotKey = func() string { return keyOfSlot(slot) }
	n := testNetwork(t, NetworkConfig{})
	if n.veth.slot != slot {
		t.Fatalf("took slot %d, not the dead runner's %d", n.veth.slot, slot)
	}
	if slices.Contains(members(t, table), link) {
		t.Errorf("%s is still a member of the dead runner's table %s", link, table)
	}
	if !slices.Contains(members(t, n.veth.table), link) {
		t.Errorf("%s is no member of its own table %s", link, n.veth.table)
	}
	if hasTable(t, legacy) {
		t.Errorf("the older runner's table %s of a free slot is still there", legacy)
	}
}

// keyOfSlot is a slotKey whose search starts at slot of the default pools.
func keyOfSlot(slot uint64) string {
	slots, _ := checkPools(DefaultPool4, DefaultPool6, nil)
	for i := 0; ; i++ {
		k := "slot-" + strconv.Itoa(i)
		h := fnv.New64a()
		h.Write([]byte(k))
		if h.Sum64()%slots == slot {
			return k
		}
	}
}

// members are the host ends in host table name's set of members.
func members(t *testing.T, name string) []string {
	t.Helper()
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	els, err := c.GetSetElements(hostSet(&nftables.Table{Family: nftables.TableFamilyINet, Name: name}, setIfs))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range els {
		out = append(out, string(bytes.TrimRight(e.Key, "\x00")))
	}
	return out
}

func deleteTable(t *testing.T, name string) {
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	c.DelTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: name})
	_ = c.Flush()
}

// TestManyVethNetworksStart: a host with many sandboxes up starts one more. Every pair's host end adds
// addresses to the host's, which the egress filter refuses (hostAddrs); with a rule per address the 99th
// network's filter outgrew a netlink message ("message too long") and no sandbox started on that host
// any more. In interval sets, addresses inside a refused range add nothing.
func TestManyVethNetworksStart(t *testing.T) {
	requireRoot(t)
	ns := toolPath(t, "nsenter", "util-linux")
	for i := range 130 {
		n, err := NewNetwork(NetworkConfig{Nsenter: ns})
		if err != nil {
			t.Fatalf("network %d: %v", i+1, err)
		}
		t.Cleanup(func() { n.Close() })
	}
}

// TestHostNetsWhileAddressesChange: the host's addresses are read while others come and go (a burst of
// new users: each start adds its pair's addresses while the others read them). The kernel marks such a
// read interrupted (it may lack addresses); it is read again, where it failed the start ("results may be
// incomplete or inconsistent"), as the 17th of 100 users connecting four at a time did. Here in a
// namespace of the test's own, one goroutine adding and deleting 64 addresses while hostNets reads.
func TestHostNetsWhileAddressesChange(t *testing.T) {
	requireRoot(t)
	ns, h := pairNetns(t, "churn0", "churn1")
	l, err := h.LinkByName("churn0")
	if err != nil {
		t.Fatal(err)
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			a := &netlink.Addr{IPNet: &net.IPNet{IP: net.IPv4(10, 214, 0, byte(i%64)), Mask: net.CIDRMask(32, 32)}}
			if i/64%2 == 0 {
				_ = h.AddrAdd(l, a)
			} else {
				_ = h.AddrDel(l, a)
			}
		}
	}()
	defer func() { close(stop); <-done }()
	n := &Network{nsFile: ns}
	for i := range 300 {
		if err := n.inside(func() error { _, err := hostNets(); return err }); err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
	}
}

func hasTable(t *testing.T, name string) bool {
	t.Helper()
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	ts, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range ts {
		if tb.Name == name {
			return true
		}
	}
	return false
}

// BenchmarkNetworkSetup measures making a sandbox network of each stack (veth also with 100 others up: what
// grows with the host's sandboxes), beside the floor of a veth network (a namespace and a veth pair into
// it, nothing else), and what idle networks cost in memory: the proportional set size (PSS) of the test
// process and its children (pasta, the namespace's holders) with 10 networks up, less before, per
// network. Run as root:
//
//	go test ./runner/isolate/ -run '^$' -bench NetworkSetup -benchtime 20x
func BenchmarkNetworkSetup(b *testing.B) {
	if testing.Short() {
		b.Skip("needs root")
	}
	p50 := func(b *testing.B, took []time.Duration) {
		sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
		b.ReportMetric(float64(took[len(took)/2].Microseconds()), "p50-µs")
	}
	b.Run("floor", func(b *testing.B) {
		var took []time.Duration
		for b.Loop() {
			start := time.Now()
			ns, err := newNetns()
			if err != nil {
				b.Fatal(err)
			}
			pair := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "wflr" + strconv.Itoa(os.Getpid()%100000)},
				PeerName: sandboxIf, PeerNamespace: netlink.NsFd(int(ns.Fd()))}
			if err := netlink.LinkAdd(pair); err != nil {
				b.Fatal(err)
			}
			took = append(took, time.Since(start))
			_ = netlink.LinkDel(pair)
			ns.Close()
		}
		p50(b, took)
	})
	for _, run := range []struct {
		stack string
		up    int // networks up meanwhile
	}{{StackVeth, 0}, {StackVeth, 100}, {StackPasta, 0}} {
		name := run.stack
		if run.up > 0 {
			name += "-" + strconv.Itoa(run.up) + "-up"
		}
		b.Run(name, func(b *testing.B) {
			lease, err := AllocateUID(DefaultUIDDir, "network/"+b.Name())
			if err != nil {
				b.Fatal(err)
			}
			defer lease.Release()
			cfg := NetworkConfig{Stack: run.stack, ForwardTCP: []uint16{4321}, UID: lease.UID, GID: lease.UID,
				Pasta: toolPath(b, "pasta", "passt"), Nsenter: toolPath(b, "nsenter", "util-linux")}
			for range run.up {
				testNetwork(b, NetworkConfig{Stack: run.stack})
			}
			var took []time.Duration
			for b.Loop() {
				start := time.Now()
				n, err := NewNetwork(cfg)
				if err != nil {
					b.Fatal(err)
				}
				took = append(took, time.Since(start))
				n.Close()
			}
			p50(b, took)
			if run.up > 0 {
				return
			}
			before := treePSS(b)
			const idle = 10
			for range idle {
				testNetwork(b, NetworkConfig{Stack: run.stack, ForwardTCP: []uint16{4321}})
			}
			b.ReportMetric(float64(treePSS(b)-before)/idle, "pss-KiB/network")
		})
	}
}

// treePSS is the PSS in KiB of this process and its children.
func treePSS(b *testing.B) int64 {
	b.Helper()
	pids := []string{strconv.Itoa(os.Getpid())}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		st, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+1:]))
		if len(f) > 1 && f[1] == pids[0] {
			pids = append(pids, e.Name())
		}
	}
	var sum int64
	for _, pid := range pids {
		f, err := os.Open("/proc/" + pid + "/smaps_rollup")
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "Pss:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
				sum += kb
			}
		}
		f.Close()
	}
	return sum
}
