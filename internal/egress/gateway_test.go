package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
)

const allowlist = `{"mode":"allowlist","allow":[{"domain":"allowed.test","ports":[80,443,2222]},{"domain":"*.allowed.test"}]}`

func refusedFor(kind Kind, dest, reason string) func(Record) bool {
	return func(r Record) bool {
		return r.Kind == kind && r.Verdict == Refused && r.Reason == reason && (dest == "" || r.Dest.String() == dest || r.Name == dest)
	}
}

// TestGatewayAllowlist: under an allowlist, an allowed name resolves and its address is reached by HTTP,
// TLS and a protocol where the server speaks first, each recorded with its bytes; a name off the list is
// refused by the resolver (never asked upstream) and its address by the proxy.
func TestGatewayAllowlist(t *testing.T) {
	l := newLab(t, allowlist)
	if got := addrs(l.query("allowed.test", dns.TypeA)); !slices.Equal(got, []string{pubWeb}) {
		t.Fatalf("allowed.test A = %v", got)
	}
	if got := addrs(l.query("allowed.test", dns.TypeAAAA)); !slices.Equal(got, []string{pubWeb6}) {
		t.Fatalf("allowed.test AAAA = %v", got)
	}
	l.sink.wait(t, "allowed query", func(r Record) bool { return r.Kind == KindDNS && r.Verdict == Allowed && r.Name == "allowed.test" })

	for _, c := range []struct {
		name, addr string
		tls        bool
	}{{"http", pubWeb + ":80", false}, {"tls", pubWeb + ":443", true}, {"http ipv6", "[" + pubWeb6 + "]:80", false}} {
		status, body, err := l.get(l.sandbox, c.addr, "allowed.test", c.tls, "allowed.test")
		if err != nil || status != 200 || !strings.HasSuffix(body, "saw allowed.test") {
			t.Fatalf("%s: %d %q %v", c.name, status, body, err)
		}
		r := l.sink.wait(t, c.name+" connection", func(r Record) bool {
			return r.Kind == KindTCP && r.Verdict == Allowed && r.Dest.String() == c.addr
		})
		if r.Name != "allowed.test" || r.BytesUp == 0 || r.BytesDown == 0 || r.User != "iss/alice" || r.Sandbox != "sb1" {
			t.Errorf("%s: record %+v", c.name, r)
		}
	}
	c, err := dialer(l.sandbox)(context.Background(), "tcp", pubWeb+":2222")
	if err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(c).ReadString('\n')
	c.Close()
	if line != "SSH-2.0-banner\n" {
		t.Fatalf("server-first protocol read %q", line)
	}

	if m := l.query("other.test", dns.TypeA); m.Rcode != dns.RcodeRefused || len(m.Answer) != 0 {
		t.Fatalf("other.test answered: %v", m)
	}
	l.sink.wait(t, "refused query", refusedFor(KindDNS, "other.test", "not on the allowlist"))
	if l.upstreamAsked("other.test") {
		t.Error("a refused name was asked upstream")
	}
	status, body, err := l.get(l.sandbox, pubOther+":80", "other.test", false, "")
	if status != 403 || !strings.Contains(body, "not on the allowlist") {
		t.Fatalf("other.test over HTTP: %d %q %v", status, body, err)
	}
	if _, _, err := l.get(l.sandbox, pubOther+":443", "", true, ""); err == nil {
		t.Fatal("TLS without SNI to an address of no allowed name went through")
	}
	l.sink.wait(t, "refused bare TLS", refusedFor(KindTCP, pubOther+":443", "not on the allowlist"))
}

// TestGatewayRefusesDomainFronting: an allowed name in the SNI or the Host header, sent to the address of
// another name, is refused; under an allowlist and in open mode with a deny rule.
func TestGatewayRefusesDomainFronting(t *testing.T) {
	for _, policy := range []string{allowlist, `{"mode":"open","deny":[{"domain":"other.test"}]}`} {
		t.Run(strings.SplitN(policy, `"`, 5)[3], func(t *testing.T) {
			l := newLab(t, policy)
			l.query("allowed.test", dns.TypeA)
			l.query("other.test", dns.TypeA) // refused under the allowlist; remembered as other.test's in open mode
			if _, _, err := l.get(l.sandbox, pubOther+":443", "allowed.test", true, "allowed.test"); err == nil {
				t.Fatal("fronted TLS went through")
			}
			status, body, err := l.get(l.sandbox, pubOther+":80", "allowed.test", false, "")
			if status != 403 || err != nil {
				t.Fatalf("fronted HTTP: %d %q %v", status, body, err)
			}
			for _, port := range []string{":443", ":80"} {
				l.sink.wait(t, "fronting on "+port, func(r Record) bool {
					return r.Kind == KindTCP && r.Verdict == Refused && r.Dest.String() == pubOther+port &&
						r.Name == "allowed.test" && (r.Reason == ReasonFronting || r.Reason == "denied by rule")
				})
			}
			// The request line naming allowed.test, the Host line other.test, to allowed.test's address.
			c, err := dialer(l.sandbox)(context.Background(), "tcp", pubWeb+":80")
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprint(c, "GET http://allowed.test/ HTTP/1.1\r\nHost: other.test\r\n\r\n")
			line, _ := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if !strings.HasPrefix(line, "HTTP/1.1 403") {
				t.Fatalf("absolute form naming two hosts answered %q", line)
			}
			l.sink.wait(t, "two hosts", refusedFor(KindTCP, pubWeb+":80", ReasonFronting))
			// The same requests to allowed.test's own address go through.
			if status, _, err := l.get(l.sandbox, pubWeb+":443", "allowed.test", true, "allowed.test"); status != 200 {
				t.Fatalf("allowed TLS: %d %v", status, err)
			}
		})
	}
}

// TestGatewayRefusesConnect: an HTTP CONNECT (a tunnel to anywhere) to an allowed address is refused.
func TestGatewayRefusesConnect(t *testing.T) {
	l := newLab(t, `{"mode":"open"}`)
	c, err := dialer(l.sandbox)(context.Background(), "tcp", pubWeb+":80")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "CONNECT other.test:443 HTTP/1.1\r\nHost: other.test:443\r\n\r\n")
	line, _ := bufio.NewReader(c).ReadString('\n')
	if !strings.HasPrefix(line, "HTTP/1.1 403") {
		t.Fatalf("CONNECT answered %q", line)
	}
	l.sink.wait(t, "refused CONNECT", refusedFor(KindTCP, pubWeb+":80", ReasonConnect))
}

// TestGatewayRefusesIPv6Forms: the private address, and IPv6 forms carrying it (NAT64, 6to4, IPv4-mapped,
// ULA), are refused by the hard deny list even in open mode and with a rule allowing
// everything; an address is never reached.
func TestGatewayRefusesIPv6Forms(t *testing.T) {
	l := newLab(t, `{"mode":"allowlist","allow":[{"cidr":"0.0.0.0/0"},{"cidr":"::/0"}]}`)
	for _, dest := range []string{private + ":80", "[64:ff9b::a63:5]:80", "[2002:a63:5::1]:80", "[fd78::2]:80"} {
		status, body, err := l.get(l.sandbox, dest, "allowed.test", false, "")
		if err == nil {
			t.Errorf("%s reached: %d %q", dest, status, body)
		}
		l.sink.wait(t, "hard deny of "+dest, refusedFor(KindTCP, dest, ReasonHardDeny))
	}
	// IPv4-mapped: the kernel sends it as IPv4, refused the same. (IPv4-compatible ::a63:5 the sandbox's
	// kernel does not send at all; TestHardDenyWins covers the list.)
	if _, _, err := l.get(l.sandbox, "[::ffff:"+private+"]:443", "", false, ""); err == nil {
		t.Error("IPv4-mapped private address reached")
	}
	l.sink.wait(t, "hard deny of the IPv4-mapped form", refusedFor(KindTCP, private+":443", ReasonHardDeny))
	// The public IPv6 address goes through (the rule allows it).
	if status, _, err := l.get(l.sandbox, "["+pubWeb6+"]:80", "", false, ""); status != 200 {
		t.Fatalf("public IPv6: %d %v", status, err)
	}
}

// TestGatewayRefusesDNSRebinding: a name the policy allows whose answer holds private, loopback and
// IPv6-form addresses is answered with its public address only, each other address recorded.
func TestGatewayRefusesDNSRebinding(t *testing.T) {
	l := newLab(t, `{"mode":"open"}`)
	if got := addrs(l.query("rebind.test", dns.TypeA)); !slices.Equal(got, []string{pubOther}) {
		t.Fatalf("rebind.test A = %v", got)
	}
	if got := addrs(l.query("rebind.test", dns.TypeAAAA)); len(got) != 0 {
		t.Fatalf("rebind.test AAAA = %v", got)
	}
	for _, a := range []string{private, "127.0.0.1", "::ffff:" + private, "64:ff9b::a63:5"} {
		l.sink.wait(t, "rebinding to "+a, func(r Record) bool {
			return r.Kind == KindDNS && r.Reason == ReasonRebinding && r.Name == "rebind.test" && r.Dest.Addr().String() == a
		})
	}
}

// TestGatewayBoundsDNSTunnelling: what carries data out through names is bounded: a long name is refused
// and never asked upstream, a TXT query is answered empty without asking upstream, and past the rate
// bound queries are refused (and recorded, at most one a second).
func TestGatewayBoundsDNSTunnelling(t *testing.T) {
	l := newLab(t, `{"mode":"open"}`)
	long := strings.Repeat(strings.Repeat("x", 60)+".", 3) + "tunnel.test"
	if m := l.query(long, dns.TypeA); m.Rcode != dns.RcodeRefused {
		t.Fatalf("long name: %v", m)
	}
	l.sink.wait(t, "long name", refusedFor(KindDNS, "", ReasonNameLength))
	if m := l.query("data.tunnel.test", dns.TypeTXT); m.Rcode != dns.RcodeSuccess || len(m.Answer) != 0 {
		t.Fatalf("TXT: %v", m)
	}
	l.sink.wait(t, "TXT", refusedFor(KindDNS, "data.tunnel.test", ReasonQueryType))
	for _, name := range []string{long, "data.tunnel.test"} {
		if l.upstreamAsked(name) {
			t.Errorf("%s asked upstream", name)
		}
	}
	refused := 0
	for i := range 300 {
		if l.query(fmt.Sprintf("q%d.tunnel.test", i), dns.TypeA).Rcode == dns.RcodeRefused {
			refused++
		}
	}
	if refused < 150 {
		t.Fatalf("%d of 300 queries at once refused; the burst is 100", refused)
	}
	l.sink.wait(t, "query rate", refusedFor(KindDNS, "", ReasonQueryRate))
}

// udpEcho answers every UDP datagram to addr (in the internet) with itself.
func (l *lab) udpEcho(addr string) {
	var pc net.PacketConn
	if err := inNS(l.internet, func() (err error) { pc, err = net.ListenPacket("udp4", addr); return err }); err != nil {
		l.t.Fatal(err)
	}
	l.t.Cleanup(func() { pc.Close() })
	go func() {
		b := make([]byte, 64)
		for {
			n, from, err := pc.ReadFrom(b)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo(b[:n], from)
		}
	}()
}

// udpExchange sends datagrams from the namespace ns to addr until one is answered (nil) or a call fails
// (an ICMP error of an earlier datagram fails the next call).
func udpExchange(ns, addr string) error {
	c, err := dialer(ns)(context.Background(), "udp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	for range 3 {
		if _, err := c.Write([]byte("quic initial")); err != nil {
			return err
		}
		if _, err := c.Read(make([]byte, 16)); err != nil {
			return err
		}
	}
	return nil
}

// TestGatewayRefusesUDP: UDP other than DNS (QUIC to port 443) is refused at the sandbox's link with an
// administratively-prohibited error, though a server there echoes (the same datagram from the sandbox
// that bypasses the gateway is answered).
func TestGatewayRefusesUDP(t *testing.T) {
	l := newLab(t, `{"mode":"open"}`)
	l.udpEcho(pubWeb + ":443")
	if err := udpExchange(l.direct, pubWeb+":443"); err != nil {
		t.Fatalf("the echo server is not reached without the gateway: %v", err)
	}
	if err := udpExchange(l.sandbox, pubWeb+":443"); !errors.Is(err, syscall.EHOSTUNREACH) {
		t.Fatalf("UDP to port 443: %v, want host unreachable (administratively prohibited)", err)
	}
}

// TestGatewayUDPByRule: with the stack given to the redirect table, UDP goes through where a CIDR rule
// for UDP allows it, and nowhere else: not by a domain rule, not to the hard deny list, not past a layer
// that narrows it; installing again follows a changed stack.
func TestGatewayUDPByRule(t *testing.T) {
	l := newLab(t, `{"mode":"open"}`)
	l.udpEcho(pubWeb + ":443")
	l.udpEcho(pubOther + ":443")
	p := mustParse(t, `{"mode":"allowlist","allow":[{"cidr":"203.0.114.10/32","ports":[443],"protocol":"udp"},
		{"cidr":"10.99.0.0/24","protocol":"udp"},{"domain":"other.test"},{"cidr":"203.0.114.11/32","protocol":"tcp"}]}`)
	l.installRedirect(NewStack(HardDeny{}, p, nil))
	if err := udpExchange(l.sandbox, pubWeb+":443"); err != nil {
		t.Fatalf("UDP allowed by a rule: %v", err)
	}
	for _, dest := range []string{pubOther + ":443", pubWeb + ":444", private + ":443"} {
		if err := udpExchange(l.sandbox, dest); !errors.Is(err, syscall.EHOSTUNREACH) {
			t.Errorf("UDP to %s: %v, want refused", dest, err)
		}
	}
	l.installRedirect(NewStack(HardDeny{}, p, nil, mustParse(t, `{"mode":"closed"}`)))
	if err := udpExchange(l.sandbox, pubWeb+":443"); !errors.Is(err, syscall.EHOSTUNREACH) {
		t.Fatalf("UDP past a closed layer: %v", err)
	}
	l.installRedirect(NewStack(HardDeny{}, mustParse(t, `{"mode":"open","deny":[{"cidr":"203.0.114.11/32"}]}`), nil))
	if err := udpExchange(l.sandbox, pubWeb+":443"); err != nil {
		t.Fatalf("UDP in open mode: %v", err)
	}
	if err := udpExchange(l.sandbox, pubOther+":443"); !errors.Is(err, syscall.EHOSTUNREACH) {
		t.Fatalf("UDP to a denied CIDR in open mode: %v", err)
	}
}

// TestGatewayPolicyChangesLive: a policy set on a running gateway applies to the next query and
// connection.
func TestGatewayPolicyChangesLive(t *testing.T) {
	l := newLab(t, allowlist)
	if m := l.query("other.test", dns.TypeA); m.Rcode != dns.RcodeRefused {
		t.Fatal("other.test resolved before the change")
	}
	l.gw.SetStack(NewStack(HardDeny{}, mustParse(t, `{"mode":"allowlist","allow":[{"domain":"other.test"}]}`), nil))
	if got := addrs(l.query("other.test", dns.TypeA)); !slices.Equal(got, []string{pubOther}) {
		t.Fatalf("other.test after the change: %v", got)
	}
	if status, _, err := l.get(l.sandbox, pubOther+":80", "other.test", false, ""); status != 200 {
		t.Fatalf("other.test after the change: %d %v", status, err)
	}
	l.gw.SetStack(NewStack(HardDeny{}, mustParse(t, allowlist), nil, mustParse(t, `{"mode":"closed"}`)))
	if status, _, _ := l.get(l.sandbox, pubWeb+":80", "allowed.test", false, ""); status == 200 {
		t.Fatal("closed by a narrowing layer, still reached")
	}
	l.sink.wait(t, "closed", refusedFor(KindTCP, pubWeb+":80", "egress closed"))
}

// TestGatewayRefusesDirectConnections: a connection to the gateway's own port, not redirected, is refused.
func TestGatewayRefusesDirectConnections(t *testing.T) {
	l := newLab(t, `{"mode":"open"}`)
	if c, err := dialer(l.router)(context.Background(), "tcp", l.proxy4Addr.String()); err == nil {
		c.Close()
	}
	l.sink.wait(t, "direct connection", refusedFor(KindTCP, "", ReasonNotRedirected))

}

// TestGatewayJudgesEveryRequest: on a plain HTTP connection to an allowed host's address, a request kept
// alive after an allowed one, or pipelined behind it in the same write, that names another host is not
// sent; nor is an upgrade (after which requests would go unjudged).
func TestGatewayJudgesEveryRequest(t *testing.T) {
	l := newLab(t, allowlist)
	l.query("allowed.test", dns.TypeA)
	allowed := "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n"
	for _, c := range []struct{ name, second, reason string }{
		{"kept alive", "GET / HTTP/1.1\r\nHost: other.test\r\n\r\n", ReasonFronting},
		{"pipelined", "", ReasonFronting},
		{"upgrade", "GET / HTTP/1.1\r\nHost: allowed.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", ReasonUpgrade},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, err := dialer(l.sandbox)(context.Background(), "tcp", pubWeb+":80")
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			br := bufio.NewReader(conn)
			first := allowed
			if c.second == "" {
				first += "GET / HTTP/1.1\r\nHost: other.test\r\n\r\n" // both in one write
			}
			fmt.Fprint(conn, first)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			if string(body) != pubWeb+" saw allowed.test" {
				t.Fatalf("first request: %q", body)
			}
			if c.second != "" {
				fmt.Fprint(conn, c.second)
			}
			if resp, err := http.ReadResponse(br, nil); err == nil {
				b, _ := io.ReadAll(resp.Body)
				t.Fatalf("second request answered: %d %q", resp.StatusCode, b)
			}
			l.sink.wait(t, c.name, refusedFor(KindTCP, pubWeb+":80", c.reason))
		})
	}
}

// TestGatewayJudgesLateHello: a client that waits until the gateway has connected (the server spoke
// first) and then sends a TLS hello naming another host is cut, not relayed.
func TestGatewayJudgesLateHello(t *testing.T) {
	l := newLab(t, allowlist, func(c *Config) { c.PeekTimeout = 50 * time.Millisecond })
	l.query("allowed.test", dns.TypeA)
	conn, err := dialer(l.sandbox)(context.Background(), "tcp", pubWeb+":2222")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	// The banner arrives only once the gateway has given up waiting and connected.
	if line, err := bufio.NewReader(conn).ReadString('\n'); line != "SSH-2.0-banner\n" {
		t.Fatalf("banner %q, %v", line, err)
	}
	go func() {
		_ = tls.Client(conn, &tls.Config{ServerName: "other.test", InsecureSkipVerify: true}).Handshake()
	}()
	l.sink.wait(t, "late hello", refusedFor(KindTCP, pubWeb+":2222", ReasonFronting))
}
