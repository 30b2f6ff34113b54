package isolate

import (
	"bufio"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
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

// TestIsolationNetworkCrashLeftovers: a runner killed with its veth network up (here a child of the
// test, SIGKILLed) leaves its host table behind (its pair ends with its namespace); the next veth network
// made on the host deletes it, and takes the slot again without trouble.
func TestIsolationNetworkCrashLeftovers(t *testing.T) {
	requireRoot(t)
	if os.Getenv("WARREN_TEST_VETH_CRASH") != "" {
		n, err := NewNetwork(NetworkConfig{Nsenter: toolPath(t, "nsenter", "util-linux")})
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("slot %d\n", n.veth.slot)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestIsolationNetworkCrashLeftovers$")
	cmd.Env = append(os.Environ(), "WARREN_TEST_VETH_CRASH=1")
	out, _ := cmd.Output()
	var slot uint64
	if _, err := fmt.Sscanf(string(out), "slot %d", &slot); err != nil {
		t.Fatalf("the crashing runner: %q: %v", out, err)
	}
	table, link := vethTablePrefix+strconv.FormatUint(slot, 10), vethPrefix+strconv.FormatUint(slot, 10)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := netlink.LinkByName(link); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still there 10 s after its runner died", link)
		}
	}
	if !hasTable(t, table) {
		t.Fatalf("no leftover table %s after the crash: the test shows nothing", table)
	}
	// Take that very slot again, as a runner started after the crash may.
	lock, ok, err := tryLock(filepath.Join(DefaultNetDir, strconv.FormatUint(slot, 10)))
	if err != nil || !ok {
		t.Fatalf("the dead runner's slot %d is still locked (%v)", slot, err)
	}
	lock.Close()
	testNetwork(t, NetworkConfig{})
	if hasTable(t, table) {
		t.Fatalf("the next network left the dead runner's table %s", table)
	}
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

// BenchmarkNetworkSetup measures making and closing a sandbox network of each stack, and what idle
// networks cost in memory: the proportional set size (PSS) of the test process and its children (pasta,
// the namespace's holders) with 10 networks up, less before, per network. Run as root:
//
//	go test ./runner/isolate/ -run '^$' -bench NetworkSetup -benchtime 20x
func BenchmarkNetworkSetup(b *testing.B) {
	if testing.Short() {
		b.Skip("needs root")
	}
	for _, stack := range []string{StackVeth, StackPasta} {
		b.Run(stack, func(b *testing.B) {
			var took []time.Duration
			for b.Loop() {
				start := time.Now()
				n := testNetwork(b, NetworkConfig{Stack: stack, ForwardTCP: []uint16{4321}})
				took = append(took, time.Since(start))
				n.Close()
			}
			sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
			b.ReportMetric(float64(took[len(took)/2].Microseconds()), "p50-µs")
			before := treePSS(b)
			const idle = 10
			for range idle {
				testNetwork(b, NetworkConfig{Stack: stack, ForwardTCP: []uint16{4321}})
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
