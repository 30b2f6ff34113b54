package isolate

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/warren-mesh/warren/internal/netdeny"
)

// DNSForward is the address the sandbox's resolver uses; pasta, or the runner's relay on a veth network,
// answers it by forwarding the query to the host's resolver. Only port 53 of it is open.
const DNSForward = "169.254.53.53"

// NetworkConfig configures a sandbox's network.
type NetworkConfig struct {
	// Stack is StackVeth (kernel networking; "" means it) or StackPasta (a user-mode network stack).
	Stack string
	// Pasta is the pasta binary (Debian's passt package; StackPasta only); Nsenter is nsenter (util-linux).
	Pasta   string
	Nsenter string
	// ForwardTCP are ports of the host's loopback that the sandbox reaches at the same port on its own
	// loopback (the runner's model proxy). Nothing else of the host's loopback is reachable.
	ForwardTCP []uint16
	// Pool4 and Pool6 are the private ranges veth networks take their addresses from (default DefaultPool4,
	// DefaultPool6); every runner of a host must be given the same. SlotDir holds the locks of the slots
	// in use (default DefaultNetDir). StackVeth only.
	Pool4, Pool6 netip.Prefix
	SlotDir      string
	// Resolver is where the veth network's DNS relay sends the sandbox's queries (default: the first
	// nameserver of the host's /etc/resolv.conf). StackVeth only.
	Resolver netip.AddrPort
	// Allow opens destinations the default policy refuses (netdeny's list and the host's own addresses),
	// e.g. a package mirror on a private address. Empty: none.
	Allow []netip.Prefix
	// UID and GID (StackPasta only) own the namespace and run pasta: unprivileged host ids of the network's own (a second
	// AllocateUID lease), never the sandbox's (Config.HostUID), so that nothing running as the sandbox's
	// uid, inside bubblewrap or not, holds a capability over the namespace or can reach pasta. pasta is made
	// for rootless use: as root it would switch to nobody before opening the namespace.
	UID, GID uint32
	// Cgroup, when set (StackPasta only), holds the namespace's holder and pasta in its network part, beside the sandbox's
	// commands and not among them: the CPU pasta spends on the sandbox's traffic counts against the
	// sandbox's quota, its memory against a bound of its own, and an out-of-memory kill in the sandbox
	// never chooses it.
	Cgroup *Cgroup
	// OnRestart, when set, is called (from the network's own goroutine; it must not block) each time
	// pasta exited and was started again, with the reason it exited.
	OnRestart func(cause error)
}

// Network is one sandbox's network namespace, shared by all of its commands: a veth pair routed by the
// host (veth.go) or a user-mode network stack (pasta) gives it the public internet, and an nftables filter
// inside the namespace, which the sandbox cannot change (it has no capability over a namespace the host
// owns), refuses the host, private, link-local and reserved destinations. Only a runner running as root
// can make one.
//
// A pasta network watches its processes (netwatch.go): pasta exiting is seen at once and pasta started
// again (up to maxPastaRestarts times); when that fails or the holder exits, the network is down for good
// (Down, Err) and commands are refused with unavailable. A veth network has no process of its own.
type Network struct {
	cfg    NetworkConfig
	veth   *vethLink // StackVeth; nil for pasta
	relays *relays   // StackVeth: the runner's listeners inside the namespace

	holder     *exec.Cmd      // StackPasta: keeps the namespace alive (cat reading a pipe only we write)
	hold       io.WriteCloser // closing it ends the holder
	holderExit chan struct{}  // closed once the holder has exited (nil until it said ready)
	nsPath     string
	nsFile     *os.File // the namespace, held open: commands join it through this, never through a pid

	mu        sync.Mutex // guards pasta and pastaExit (the supervisor replaces them)
	pasta     *exec.Cmd
	pastaExit chan struct{} // closed once the current pasta has exited

	closing chan struct{} // closed by Close
	down    chan struct{} // closed when the network died for good; downErr says why
	downErr error
	watch   sync.WaitGroup // the supervisor
	once    sync.Once
}

// NewNetwork makes a network namespace, installs its filter and connects it (cfg.Stack). Close releases
// it.
func NewNetwork(cfg NetworkConfig) (*Network, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: a network of the sandbox's own needs the runner to run as root (or choose the host network explicitly)", ErrConfig)
	}
	for _, b := range []*string{&cfg.Pasta, &cfg.Nsenter} {
		if *b == "" {
			continue
		}
		if !strings.Contains(*b, "/") {
			p, err := exec.LookPath(*b)
			if err != nil {
				return nil, fmt.Errorf("%w: %s not found: %w", ErrConfig, *b, err)
			}
			*b = p
		}
	}
	switch cfg.Stack {
	case "", StackVeth:
		cfg.Stack = StackVeth
		return newVethNetwork(cfg)
	case StackPasta:
		return newPastaNetwork(cfg)
	}
	return nil, fmt.Errorf("%w: unknown sandbox network stack %q (want %s or %s)", ErrConfig, cfg.Stack, StackVeth, StackPasta)
}

// newPastaNetwork makes a network namespace held by a process, installs its filter and attaches pasta.
func newPastaNetwork(cfg NetworkConfig) (*Network, error) {
	if cfg.Pasta == "" || cfg.Nsenter == "" {
		return nil, fmt.Errorf("%w: the sandbox network needs pasta (package passt) and nsenter (util-linux)", ErrConfig)
	}
	if cfg.UID == 0 || cfg.GID == 0 {
		return nil, fmt.Errorf("%w: the sandbox network needs the sandbox's unprivileged host uid and gid", ErrConfig)
	}
	if fi, err := os.Stat("/dev/net/tun"); err != nil || fi.Mode().Perm()&0o006 != 0o006 {
		return nil, fmt.Errorf("%w: pasta, running as the sandbox's unprivileged uid, needs /dev/net/tun readable and writable by all (the Linux default; chmod 0666 /dev/net/tun): %v", ErrConfig, err)
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		return nil, fmt.Errorf("%w: unshare (util-linux) not found: %w", ErrConfig, err)
	}
	n := &Network{cfg: cfg, closing: make(chan struct{}), down: make(chan struct{})}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("network holder pipe: %w", err)
	}
	// The namespace belongs to a user namespace the sandbox's host uid owns (made by unshare running as that
	// uid), which pasta, running as the same uid, may join. The sandbox itself lives in a sibling user
	// namespace of bubblewrap's, so it holds no capability over its network; the runner (root) installs
	// the filter.
	// It says "ready" once inside its namespaces, then holds them until its stdin ends.
	n.holder = exec.Command(unshare, "--user", "--map-root-user", "--net", "--", "/bin/sh", "-c", "echo ready; exec cat")
	n.holder.Stdin = r
	ready, err := n.holder.StdoutPipe()
	if err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("network holder pipe: %w", err)
	}
	n.holder.Env = []string{"PATH=" + DefaultPATH}
	cred := &syscall.Credential{Uid: cfg.UID, Gid: cfg.GID, Groups: []uint32{}}
	n.holder.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := n.holder.Start(); err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("%w: start the network namespace: %w", ErrConfig, err)
	}
	r.Close()
	n.hold = w
	if cfg.Cgroup != nil {
		if err := cfg.Cgroup.addNetwork(n.holder.Process.Pid); err != nil {
			n.Close()
			return nil, fmt.Errorf("%w: network holder cgroup: %w", ErrConfig, err)
		}
	}
	n.nsPath = "/proc/" + strconv.Itoa(n.holder.Process.Pid) + "/ns/net"
	// unshare makes the namespaces, then runs the shell: only its word says they exist. (Comparing
	// namespace ids with this process's is not enough: a thread of it may be elsewhere.)
	if err := waitReady(ready); err != nil {
		n.Close()
		return nil, err
	}
	n.holderExit = make(chan struct{})
	go func() { _ = n.holder.Wait(); close(n.holderExit) }()
	if n.nsFile, err = os.Open(n.nsPath); err != nil {
		n.Close()
		return nil, fmt.Errorf("%w: open the sandbox network namespace: %w", ErrConfig, err)
	}
	if err := n.setup(); err != nil {
		n.Close()
		return nil, err
	}
	n.watch.Add(1)
	go n.supervise()
	return n, nil
}

func (n *Network) setup() error {
	host, err := hostAddrs()
	if err != nil {
		return err
	}
	if err := n.installEgress(host); err != nil {
		return err
	}
	cmd, exit, err := n.startPasta()
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.pasta, n.pastaExit = cmd, exit
	n.mu.Unlock()
	return nil
}

// installEgress installs the namespace's egress filter, refusing host (hostAddrs) among the rest.
func (n *Network) installEgress(host []netip.Prefix) error {
	deny := host
	// The public internet stays open (git, pip, npm); the host, its neighbours, the cluster's private and
	// link-local space (cloud metadata), reserved space and their IPv6 forms do not.
	deny = append(deny, netdeny.Prefixes()...)
	if err := installFilter(int(n.nsFile.Fd()), deny, n.cfg.Allow); err != nil {
		return fmt.Errorf("%w: sandbox network filter: %w", ErrConfig, err)
	}
	return nil
}

// waitReady waits (up to 10 s) for the holder's "ready" line.
func waitReady(r io.ReadCloser) error {
	got := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(io.LimitReader(r, 64)).ReadString('\n')
		if err == nil && line != "ready\n" {
			err = fmt.Errorf("unexpected %q", line)
		}
		got <- err
	}()
	select {
	case err := <-got:
		if err != nil {
			return fmt.Errorf("%w: the sandbox network namespace did not appear: %w", ErrConfig, err)
		}
		return nil
	case <-time.After(10 * time.Second):
		r.Close()
		return fmt.Errorf("%w: the sandbox network namespace did not appear within 10s", ErrConfig)
	}
}

// hasDefaultRoute reports whether the network namespace of pid has an IPv4 default route.
func hasDefaultRoute(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/net/route")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		if f := strings.Fields(line); len(f) > 2 && f[1] == "00000000" {
			return true
		}
	}
	return false
}

// listening reports whether, in the network namespace of pid, a TCP socket listens on each of ports
// (IPv4 or IPv6).
func listening(pid int, ports []uint16) bool {
	if len(ports) == 0 {
		return true
	}
	open := map[uint16]bool{}
	for _, f := range []string{"tcp", "tcp6"} {
		b, err := readNetTable("/proc/" + strconv.Itoa(pid) + "/net/" + f)
		if err != nil {
			continue
		}
		for _, p := range listeningPorts(string(b)) {
			open[p] = true
		}
	}
	for _, p := range ports {
		if !open[p] {
			return false
		}
	}
	return true
}

// maxNetTable bounds what is read of a socket table: the sandbox's programs choose how many sockets it
// lists, and a wait for a port reads it every procPoll. The kernel lists listening sockets first, so only
// a sandbox with thousands of them could miss one.
const maxNetTable = 256 << 10

// readNetTable reads at most maxNetTable bytes of a /proc/PID/net table.
func readNetTable(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, maxNetTable))
}

// listeningPorts parses a /proc/net/tcp table and returns the local ports in state LISTEN (0A).
func listeningPorts(table string) []uint16 {
	var ports []uint16
	for _, line := range strings.Split(table, "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 4 || f[3] != "0A" {
			continue
		}
		i := strings.LastIndexByte(f[1], ':')
		if i < 0 {
			continue
		}
		if p, err := strconv.ParseUint(f[1][i+1:], 16, 16); err == nil {
			ports = append(ports, uint16(p))
		}
	}
	return ports
}

// hostNet is an address of one of the host's interfaces with the length of its network's prefix.
type hostNet struct {
	p    netip.Prefix
	link int // the interface's index
}

// hostNets are the addresses of the host's interfaces (the runner's network namespace): one dump of the
// kernel's address table, not one per interface (the host has one per sandbox). A dump the kernel marks
// interrupted (the table changed meanwhile: other sandboxes' pairs starting) may lack addresses, and is
// taken again.
func hostNets() ([]hostNet, error) {
	var addrs []netlink.Addr
	var err error
	for range 50 {
		if addrs, err = netlink.AddrList(nil, netlink.FAMILY_ALL); !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("host addresses: %w", err)
	}
	out := make([]hostNet, 0, len(addrs))
	for _, a := range addrs {
		if a.IPNet == nil {
			continue
		}
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		ones, _ := a.Mask.Size()
		out = append(out, hostNet{netip.PrefixFrom(ip.Unmap(), ones), a.LinkIndex})
	}
	return out, nil
}

// hostAddrs are the addresses of the host's interfaces (the runner's network namespace) and the networks
// they are on: a sandbox may reach neither the host through them nor its neighbours (other nodes, the
// gateway).
func hostAddrs() ([]netip.Prefix, error) {
	nets, err := hostNets()
	return hostDeny(nets), err
}

// hostDeny is what hostAddrs says of nets.
func hostDeny(nets []hostNet) []netip.Prefix {
	var out []netip.Prefix
	for _, n := range nets {
		ip := n.p.Addr()
		out = append(out, netip.PrefixFrom(ip, ip.BitLen()))
		if n.p.Bits() > 0 && !ip.IsLoopback() {
			out = append(out, n.p.Masked())
		}
	}
	return out
}

// installFilter installs, in the network namespace fd, table inet warren with one output chain: traffic on
// the namespace's own loopback passes, IPv6 neighbour discovery and DNS to the forwarder pass, allow passes
// (sets allow4 and allow6), deny is rejected (sets deny4 and deny6; administratively prohibited, so a
// connect fails at once), and everything else passes.
func installFilter(fd int, deny, allow []netip.Prefix) error {
	// Never the runner's own namespace (its process's or this thread's): the filter would cut the host off.
	var ns unix.Stat_t
	if err := unix.Fstat(fd, &ns); err != nil {
		return fmt.Errorf("stat the namespace: %w", err)
	}
	for _, own := range []string{"/proc/self/ns/net", "/proc/thread-self/ns/net"} {
		var st unix.Stat_t
		if err := unix.Stat(own, &st); err != nil {
			return fmt.Errorf("stat %s: %w", own, err)
		}
		if ns.Ino == st.Ino && ns.Dev == st.Dev {
			return errors.New("refusing to filter the runner's own network namespace")
		}
	}
	c, err := newNFT(nftables.WithNetNSFd(fd))
	if err != nil {
		return err
	}
	defer c.CloseLasting()
	t := c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: "warren"})
	policy := nftables.ChainPolicyAccept
	ch := c.AddChain(&nftables.Chain{
		Name: "egress", Table: t, Type: nftables.ChainTypeFilter, Hooknum: nftables.ChainHookOutput,
		Priority: nftables.ChainPriorityFilter, Policy: &policy,
	})
	accept := &expr.Verdict{Kind: expr.VerdictAccept}
	reject := &expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED}
	lo := make([]byte, 16)
	copy(lo, "lo")
	c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: []expr.Any{
		&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: lo},
		accept,
	}})
	// IPv6 neighbour discovery (router and neighbour solicitations and advertisements, ICMPv6 types 133 to
	// 136), sent by the kernel to link-local and multicast addresses, reaches pasta or the host's end of
	// the pair, which answers it: without it no IPv6 packet leaves (the gateway is never resolved). The
	// sandbox cannot send ICMPv6 of its own choosing (no raw sockets; ping sockets send only echo requests).
	c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: neighbourDiscovery(accept)})
	dns := netip.MustParseAddr(DNSForward)
	for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
		ex := matchPrefix(netip.PrefixFrom(dns, 32))
		ex = append(ex,
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{0, 53}},
			accept)
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: ex})
	}
	// The opened and the refused destinations are interval sets, a rule each per family: a batch of a
	// dozen messages whatever the lists hold (a rule per prefix cost about 25 µs of every start each).
	var ids uint32
	opened, err := addrSets(c, t, "allow", allow, &ids)
	if err != nil {
		return err
	}
	for _, m := range opened {
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: append(m, accept)})
	}
	refused, err := addrSets(c, t, "deny", deny, &ids)
	if err != nil {
		return err
	}
	for _, m := range refused {
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: append(m, reject)})
	}
	return c.Flush()
}

// neighbourDiscovery matches IPv6 neighbour discovery (ICMPv6 types 133 to 136), then v.
func neighbourDiscovery(v expr.Any) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV6}},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_ICMPV6}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1},
		&expr.Range{Op: expr.CmpOpEq, Register: 1, FromData: []byte{133}, ToData: []byte{136}},
		v,
	}
}

// matchPrefix matches packets whose destination lies in p (of p's family).
func matchPrefix(p netip.Prefix) []expr.Any {
	p = p.Masked()
	addr := p.Addr().AsSlice()
	proto, off := byte(unix.NFPROTO_IPV4), uint32(16)
	if p.Addr().Is6() {
		proto, off = unix.NFPROTO_IPV6, 24
	}
	ex := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: uint32(len(addr))},
	}
	if p.Bits() < len(addr)*8 {
		mask := net.CIDRMask(p.Bits(), len(addr)*8)
		ex = append(ex, &expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: uint32(len(addr)), Mask: mask, Xor: make([]byte, len(addr))})
	}
	return append(ex, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: addr})
}

// enter is the command prefix that runs a program inside the namespace (as root; the caller switches to
// the sandbox's ids after it, see Sandbox.command): nsenter joins the namespace through fd, the child's
// copy of nsFile, so a holder that died and a pid used again can never put a command elsewhere.
func (n *Network) enter(fd int) []string {
	return []string{n.cfg.Nsenter, "--net=/proc/self/fd/" + strconv.Itoa(fd)}
}

// Close stops pasta (or the runner's relays and the pair) and ends the namespace. It is idempotent.
func (n *Network) Close() error {
	n.once.Do(func() {
		close(n.closing)
		if n.veth != nil {
			if n.relays != nil {
				n.relays.close()
			}
			if n.nsFile != nil {
				n.nsFile.Close()
			}
			n.veth.close()
			return
		}
		n.watch.Wait() // no pasta is started after this
		n.mu.Lock()
		pasta, exit := n.pasta, n.pastaExit
		n.mu.Unlock()
		if pasta != nil {
			_ = pasta.Process.Kill()
			<-exit
		}
		if n.hold != nil {
			n.hold.Close()
		}
		if n.holder.Process != nil {
			_ = n.holder.Process.Kill()
			if n.holderExit != nil {
				<-n.holderExit
			} else {
				_ = n.holder.Wait()
			}
		}
		if n.nsFile != nil {
			n.nsFile.Close()
		}
	})
	return nil
}

// limitedWriter keeps the first n bytes written to it.
type limitedWriter struct {
	mu sync.Mutex
	w  io.Writer
	n  int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n > 0 {
		k := min(len(p), l.n)
		_, _ = l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}
