package egress

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"
)

// The lab's addresses. Every one lives in a network namespace the test makes: nothing leaves the machine.
const (
	pubWeb   = "203.0.114.10" // allowed.test's A
	pubOther = "203.0.114.11" // other.test's A
	pubDNS   = "203.0.114.53" // the upstream resolver
	pubWeb6  = "2a00:1450::10"
	private  = "10.99.0.5" // rebind.test's A; refused by the hard deny list
)

// lab is three network namespaces: a sandbox (and a second one, bypassing the gateway, for comparison),
// a router where the gateway runs (the runner's host) and the internet (web servers and a resolver).
type lab struct {
	t                testing.TB
	sandbox, direct  string // namespace paths
	router, internet string
	iface            string // the router's end of the sandbox's pair
	upstreamMu       sync.Mutex
	upstreamSeen     []string // names the upstream resolver was asked
	sink             *memSink
	gw               *Gateway
	proxy4Addr       netip.AddrPort
	redirect         Redirect
}

type memSink struct {
	mu   sync.Mutex
	recs []Record
}

func (s *memSink) Record(r Record) { s.mu.Lock(); s.recs = append(s.recs, r); s.mu.Unlock() }

// wait returns the first record matching ok, failing the test if none comes within 10 s.
func (s *memSink) wait(t testing.TB, what string, ok func(Record) bool) Record {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		s.mu.Lock()
		i := slices.IndexFunc(s.recs, ok)
		var r Record
		if i >= 0 {
			r = s.recs[i]
		}
		all := slices.Clone(s.recs)
		s.mu.Unlock()
		if i >= 0 {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("no record of %s; records: %+v", what, all)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (s *memSink) snapshot() []Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.recs)
}

// findAfter reports whether a record after the first n matches ok.
func (s *memSink) findAfter(n int, ok func(Record) bool) bool {
	return slices.ContainsFunc(s.snapshot()[n:], ok)
}

// waitAfter is wait for the records after the first n.
func (s *memSink) waitAfter(t testing.TB, n int, what string, ok func(Record) bool) Record {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		recs := s.snapshot()[n:]
		if i := slices.IndexFunc(recs, ok); i >= 0 {
			return recs[i]
		}
		if time.Now().After(deadline) {
			t.Fatalf("no record of %s; records: %+v", what, recs)
		}
	}
}

func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		if testing.Short() {
			t.Skip("the gateway's tests need root (skipped under -short)")
		}
		t.Fatal("the gateway's tests need root (network namespaces, nftables), as the runner has in CI: run them as root or with -short")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatalf("ip (iproute2) not installed: %v", err)
	}
}

func run(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// inNS runs f (which makes sockets) on a thread in the namespace at path, then returns the thread.
func inNS(path string, f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		own, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			done <- err
			return // locked: the runtime ends this thread
		}
		defer unix.Close(own)
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			done <- err
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			done <- err
			return
		}
		err = f()
		if unix.Setns(own, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		done <- err
	}()
	return <-done
}

// dialer dials from the namespace at path.
func dialer(path string) Dialer {
	return func(ctx context.Context, network, addr string) (c net.Conn, err error) {
		if e := inNS(path, func() error {
			var d net.Dialer
			c, err = d.DialContext(ctx, network, addr)
			return nil
		}); e != nil {
			return nil, e
		}
		return c, err
	}
}

func listenTCP(t testing.TB, path, network, addr string) *net.TCPListener {
	t.Helper()
	var ln net.Listener
	if err := inNS(path, func() (err error) { ln, err = net.Listen(network, addr); return err }); err != nil {
		t.Fatalf("listen %s in %s: %v", addr, path, err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.(*net.TCPListener)
}

// newLab makes the namespaces and their links, the internet's servers, and a gateway for the sandbox
// with policy (JSON).
func newLab(t testing.TB, policy string, opts ...func(*Config)) *lab {
	t.Helper()
	requireRoot(t)
	base := "eg" + strings.ToLower(rand.Text()[:6])
	l := &lab{t: t, iface: base + "a", sink: &memSink{}}
	ns := map[string]*string{"s": &l.sandbox, "d": &l.direct, "r": &l.router, "n": &l.internet}
	for _, suffix := range []string{"s", "d", "r", "n"} {
		name := base + suffix
		run(t, "ip", "netns", "add", name)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
		*ns[suffix] = "/run/netns/" + name
	}
	r, s, d, n := base+"r", base+"s", base+"d", base+"n"
	link := func(a, nsA, b, nsB string) {
		run(t, "ip", "link", "add", a, "netns", nsA, "type", "veth", "peer", "name", b, "netns", nsB)
	}
	link(base+"a", r, base+"b", s) // router ⇄ sandbox
	link(base+"c", r, base+"e", d) // router ⇄ direct sandbox
	link(base+"f", r, base+"g", n) // router ⇄ internet
	script := fmt.Sprintf(`
ip -n %[1]s addr add 10.250.0.1/30 dev %[5]sa
ip -n %[1]s addr add fd77::1/64 dev %[5]sa nodad
ip -n %[1]s addr add 10.250.1.1/30 dev %[5]sc
ip -n %[1]s addr add 100.127.0.1/30 dev %[5]sf
ip -n %[1]s addr add fd78::1/64 dev %[5]sf nodad
ip -n %[2]s addr add 10.250.0.2/30 dev %[5]sb
ip -n %[2]s addr add fd77::2/64 dev %[5]sb nodad
ip -n %[3]s addr add 10.250.1.2/30 dev %[5]se
ip -n %[4]s addr add 100.127.0.2/30 dev %[5]sg
ip -n %[4]s addr add fd78::2/64 dev %[5]sg nodad
ip -n %[4]s addr add %[6]s/32 dev lo
ip -n %[4]s addr add %[7]s/32 dev lo
ip -n %[4]s addr add %[8]s/32 dev lo
ip -n %[4]s addr add %[9]s/32 dev lo
ip -n %[4]s addr add %[10]s/128 dev lo nodad
ip -n %[1]s link set %[5]sa up
ip -n %[1]s link set %[5]sc up
ip -n %[1]s link set %[5]sf up
ip -n %[1]s link set lo up
ip -n %[2]s link set %[5]sb up
ip -n %[2]s link set lo up
ip -n %[3]s link set %[5]se up
ip -n %[4]s link set %[5]sg up
ip -n %[4]s link set lo up
ip -n %[2]s route add default via 10.250.0.1
ip -n %[2]s -6 route add default via fd77::1
ip -n %[3]s route add default via 10.250.1.1
ip -n %[4]s route add default via 100.127.0.1
ip -n %[4]s -6 route add default via fd78::1
ip -n %[1]s route add 203.0.114.0/24 via 100.127.0.2
ip -n %[1]s route add 10.99.0.0/24 via 100.127.0.2
ip -n %[1]s -6 route add 2a00:1450::/32 via fd78::2
ip netns exec %[1]s sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1 net.ipv4.tcp_tw_reuse=1
`, r, s, d, n, base, pubWeb, pubOther, pubDNS, private, pubWeb6)
	run(t, "sh", "-euc", script)
	l.upstream()
	l.webServers()
	l.startGateway(mustParse(t, policy), opts...)
	return l
}

// upstream serves the internet's resolver: allowed.test, other.test, rebind.test (a private address and
// its IPv6 forms) and everything under tunnel.test.
func (l *lab) upstream() {
	t := l.t
	zone := map[string][]string{
		"allowed.test.":     {pubWeb, pubWeb6},
		"www.allowed.test.": {pubWeb},
		"other.test.":       {pubOther},
		"rebind.test.":      {private, "::ffff:" + private, "64:ff9b::a63:5", "127.0.0.1", pubOther},
	}
	for i := range 100 {
		zone["many.test."] = append(zone["many.test."], fmt.Sprintf("203.0.115.%d", i+1))
	}
	// alias.test is a CNAME of other.test, chain.allowed.test of alias.test.
	cnames := map[string]string{"alias.test.": "other.test.", "chain.allowed.test.": "alias.test."}
	h := dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		q := req.Question[0]
		l.upstreamMu.Lock()
		l.upstreamSeen = append(l.upstreamSeen, q.Name)
		l.upstreamMu.Unlock()
		m := new(dns.Msg).SetReply(req)
		name := strings.ToLower(q.Name)
		for cnames[name] != "" {
			m.Answer = append(m.Answer, &dns.CNAME{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeCNAME, Class: dns.ClassINET, Ttl: 60}, Target: cnames[name]})
			name = cnames[name]
		}
		for _, a := range zone[name] {
			ip := netip.MustParseAddr(a)
			switch {
			case q.Qtype == dns.TypeA && ip.Is4():
				m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: ip.AsSlice()})
			case q.Qtype == dns.TypeAAAA && !ip.Is4():
				m.Answer = append(m.Answer, &dns.AAAA{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeAAAA, Class: dns.ClassINET, Ttl: 60}, AAAA: ip.AsSlice()})
			}
		}
		if q.Qtype == dns.TypeTXT {
			m.Answer = append(m.Answer, &dns.TXT{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeTXT, Class: dns.ClassINET, Ttl: 60}, Txt: []string{"exfil-ack"}})
		}
		if _, udp := w.RemoteAddr().(*net.UDPAddr); udp {
			m.Truncate(dns.MinMsgSize) // as a resolver does: the rest over TCP
		}
		_ = w.WriteMsg(m)
	})
	var pc net.PacketConn
	if err := inNS(l.internet, func() (err error) { pc, err = net.ListenPacket("udp4", pubDNS+":53"); return err }); err != nil {
		t.Fatalf("upstream resolver: %v", err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: h}
	go func() { _ = srv.ActivateAndServe() }()
	t.Cleanup(func() { _ = srv.Shutdown(); pc.Close() })
	tcp := &dns.Server{Listener: listenTCP(t, l.internet, "tcp4", pubDNS+":53"), Handler: h}
	go func() { _ = tcp.ActivateAndServe() }()
	t.Cleanup(func() { _ = tcp.Shutdown() })
}

func (l *lab) upstreamAsked(name string) bool {
	l.upstreamMu.Lock()
	defer l.upstreamMu.Unlock()
	return slices.Contains(l.upstreamSeen, dns.Fqdn(name))
}

// webServers: HTTP on port 80 and HTTPS on 443 of both public addresses and the IPv6 one, answering
// "<server> saw <Host>"; a banner on 2222 that speaks first; and HTTP on the private address.
func (l *lab) webServers() {
	for _, a := range []string{pubWeb, pubOther, "[" + pubWeb6 + "]", private} {
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "%s saw %s", a, r.Host) })
		for _, port := range []string{"80", "443"} {
			srv := httptest.NewUnstartedServer(h)
			srv.Listener.Close()
			srv.Listener = listenTCP(l.t, l.internet, "tcp", a+":"+port)
			if port == "443" {
				srv.StartTLS()
			} else {
				srv.Start()
			}
			l.t.Cleanup(srv.Close)
		}
	}
	ln := listenTCP(l.t, l.internet, "tcp", pubWeb+":2222")
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintln(c, "SSH-2.0-banner")
			c.Close()
		}
	}()
}

func (l *lab) startGateway(p *Policy, opts ...func(*Config)) {
	t := l.t
	p4 := listenTCP(t, l.router, "tcp4", "10.250.0.1:0")
	p6 := listenTCP(t, l.router, "tcp6", "[::]:0")
	dnsTCP := listenTCP(t, l.router, "tcp4", "10.250.0.1:0")
	var pc net.PacketConn
	if err := inNS(l.router, func() (err error) { pc, err = net.ListenPacket("udp4", "10.250.0.1:0"); return err }); err != nil {
		t.Fatal(err)
	}
	port := func(a net.Addr) uint16 { return netip.MustParseAddrPort(a.String()).Port() }
	l.proxy4Addr = netip.MustParseAddrPort(p4.Addr().String())
	l.redirect = Redirect{Table: "egw", Iface: l.iface, Ports: Ports{DNSUDP: port(pc.LocalAddr()), DNSTCP: port(dnsTCP.Addr()), Proxy4: port(p4.Addr()), Proxy6: port(p6.Addr())}}
	l.installRedirect(nil)
	cfg := Config{
		Sandbox: "sb1", User: "iss/alice",
		Stack: NewStack(HardDeny{}, p, nil),
		Proxy: []*net.TCPListener{p4, p6},
		DNS:   pc, DNSTCP: dnsTCP,
		Upstream: netip.MustParseAddrPort(pubDNS + ":53"),
		Dial:     dialer(l.router),
		Sink:     l.sink,
		Metrics:  NewMetrics(nil),
	}
	for _, o := range opts {
		o(&cfg)
	}
	gw, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l.gw = gw
	t.Cleanup(func() {
		if err := gw.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
}

// installRedirect installs (again) the redirect table in the router, letting through the UDP udp allows.
func (l *lab) installRedirect(udp *Stack) {
	l.t.Helper()
	nsf, err := os.Open(l.router)
	if err != nil {
		l.t.Fatal(err)
	}
	defer nsf.Close()
	r := l.redirect
	r.UDP = udp
	if err := r.Install(int(nsf.Fd())); err != nil {
		l.t.Fatal(err)
	}
}

// query asks the sandbox's resolver (any address: port 53 is redirected) for name's records of qtype.
func (l *lab) query(name string, qtype uint16) *dns.Msg {
	l.t.Helper()
	c, err := dialer(l.sandbox)(context.Background(), "udp", "192.0.2.53:53")
	if err != nil {
		l.t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	m := new(dns.Msg).SetQuestion(dns.Fqdn(name), qtype)
	resp, _, err := (&dns.Client{}).ExchangeWithConn(m, &dns.Conn{Conn: c})
	if err != nil {
		l.t.Fatalf("query %s: %v", name, err)
	}
	return resp
}

func addrs(m *dns.Msg) []string {
	var out []string
	for _, rr := range m.Answer {
		if a, _, ok := address(rr, rr.Header().Rrtype); ok {
			out = append(out, a.String())
		}
	}
	return out
}

// get sends an HTTP request from the sandbox to addr (host:port), naming host, over TLS with sni when
// tlsOn, and returns the status and body ("" and the error when the connection failed).
func (l *lab) get(ns, addr, host string, tlsOn bool, sni string) (int, string, error) {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return dialer(ns)(ctx, network, addr)
		},
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true, ServerName: sni}, // the test's servers have httptest's certificate
		DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	if host == "" {
		host = addr
	}
	scheme := "http"
	if tlsOn {
		scheme = "https"
	}
	req, _ := http.NewRequest("GET", scheme+"://"+host+"/", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := tr.RoundTrip(req.WithContext(ctx))
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}
