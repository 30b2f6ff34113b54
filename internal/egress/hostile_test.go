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
	c, err := dialer(l.sandbox)(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	for _, p := range payload {
		if _, err := io.WriteString(c, p); err != nil {
			break
		}
	}
	line, _ := bufio.NewReader(c).ReadString('\n')
	return line
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
			c, err := dialer(l.sandbox)(context.Background(), "tcp", pubWeb+":80")
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
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
	c, err := dialer(l.sandbox)(context.Background(), "tcp", pubWeb+":80")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
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
	c, err := dialer(l.sandbox)(context.Background(), "tcp", pubWeb+":80")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
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
			if r.Verdict != Refused || !containsStr(c.reasons, r.Reason) {
				t.Fatalf("record %+v, want refused for %v", r, c.reasons)
			}
		})
	}
}

func containsStr(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
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
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, err := dialer(l.sandbox)(context.Background(), "tcp", pubWeb+":80")
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
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
	var mu sync.Mutex
	var got []string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("Authorization"))
		mu.Unlock()
	}))
	srv.Listener.Close()
	srv.Listener = listenTCP(t, l.internet, "tcp4", pubOther+":8443")
	srv.StartTLS() // httptest's own certificate, not the internet CA's
	t.Cleanup(srv.Close)
	tc := l.sandboxTLS(t, ca, pubOther+":8443", "allowed.test")
	status, body := roundTrip(t, tc, "GET / HTTP/1.1\r\nHost: allowed.test\r\nAuthorization: Bearer "+placeholder+"\r\n\r\n")
	if status != http.StatusBadGateway {
		t.Fatalf("brokered request to an impostor: %d %q", status, body)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, a := range got {
		if strings.Contains(a, secret) {
			t.Fatal("the secret reached an address that is not the brokered host")
		}
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
