package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/warren-mesh/warren/internal/httpx"
)

const (
	placeholder = "warren-credential-ref-7f3a9c2e"
	secret      = "s3cret-registry-token"
)

// newInjectingLab is a lab whose gateway injects secret for allowed.test in Authorization, with a
// sandbox CA of its own, trusting the test internet's CA for the hosts it terminates.
func newInjectingLab(t *testing.T, policy string) (l *lab, internetCA, sandboxCA *CA) {
	t.Helper()
	var err error
	if internetCA, err = NewCA("test internet", time.Now()); err != nil {
		t.Fatal(err)
	}
	if sandboxCA, err = NewCA("sandbox sb1", time.Now()); err != nil {
		t.Fatal(err)
	}
	l = newLab(t, policy, func(c *Config) {
		c.CA = sandboxCA
		c.UpstreamRoots = internetCA.Pool()
		c.Inject = []Injection{{Hosts: []string{"allowed.test"}, Header: "authorization", Scheme: "Bearer", Placeholder: placeholder, Secret: secret}}
	})
	return l, internetCA, sandboxCA
}

// injectLab is newInjectingLab whose internet has an HTTPS server for allowed.test on port 8443 (a
// certificate of the internet's own CA) answering "authorised" only to the secret, and echoing the
// headers it got otherwise (never the secret).
func injectLab(t *testing.T, policy string) (*lab, *CA) {
	t.Helper()
	l, internetCA, sandboxCA := newInjectingLab(t, policy)
	leaf, err := internetCA.Leaf("allowed.test")
	if err != nil {
		t.Fatal(err)
	}
	ln := listenTCP(t, l.internet, "tcp4", pubWeb+":8443")
	srv := httpx.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "TRACE" || r.Method == "TRACK" || r.Method == "trace" { // as Apache's TraceEnable on
			_ = r.Write(w)
			return
		}
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, "http://"+pubOther+":8081/", http.StatusFound)
			return
		}
		if r.Header.Get("Authorization") == "Bearer "+secret {
			fmt.Fprint(w, "authorised")
			return
		}
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintf(w, "got %q", r.Header.Get("Authorization"))
	}), httpx.Config{})
	srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{*leaf}}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { srv.Close() })
	return l, sandboxCA
}

// sandboxTLS opens a TLS connection from the sandbox to addr naming sni, trusting the sandbox's CA only.
func (l *lab) sandboxTLS(t *testing.T, ca *CA, addr, sni string) *tls.Conn {
	t.Helper()
	c, err := dialer(l.sandbox)(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	tc := tls.Client(c, &tls.Config{ServerName: sni, RootCAs: ca.Pool()})
	_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := tc.Handshake(); err != nil {
		t.Fatalf("handshake with the gateway for %s: %v", sni, err)
	}
	t.Cleanup(func() { tc.Close() })
	return tc
}

func roundTrip(t *testing.T, c net.Conn, head string) (int, string) {
	t.Helper()
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("response to %q: %v", head, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestGatewayInjectsCredential: the sandbox, holding only a placeholder and trusting only its CA, reaches
// the registry with the secret put in by the gateway, and never sees the secret.
func TestGatewayInjectsCredential(t *testing.T) {
	l, ca := injectLab(t, `{"mode":"allowlist","allow":[{"domain":"allowed.test"}]}`)
	l.query("allowed.test", dns.TypeA)
	tc := l.sandboxTLS(t, ca, pubWeb+":8443", "allowed.test")
	for range 2 { // two requests on one connection: each gets the secret
		status, body := roundTrip(t, tc, "GET /pkg HTTP/1.1\r\nHost: allowed.test:8443\r\nAuthorization: Bearer "+placeholder+"\r\n\r\n")
		if status != 200 || body != "authorised" {
			t.Fatalf("brokered request: %d %q", status, body)
		}
	}
	// Without the placeholder the registry sees no credential: nothing is added on its own.
	status, body := roundTrip(t, tc, "GET /pkg HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n")
	if status != 401 || strings.Contains(body, secret) {
		t.Fatalf("request without placeholder: %d %q", status, body)
	}
	r := l.sink.wait(t, "injected connection", func(r Record) bool { return r.Kind == KindTCP && r.Verdict == Injected })
	if r.Name != "allowed.test" || r.BytesUp == 0 || r.BytesDown == 0 {
		t.Errorf("record %+v", r)
	}
}

// TestGatewayRefusesPlaceholderElsewhere: the placeholder in another header, in the URL, with another
// Host inside the terminated TLS, or over plain HTTP to another host, is refused and recorded; the
// secret never goes out.
func TestGatewayRefusesPlaceholderElsewhere(t *testing.T) {
	l, ca := injectLab(t, `{"mode":"open"}`)
	l.query("allowed.test", dns.TypeA)
	l.query("other.test", dns.TypeA)
	for _, c := range []struct{ name, head, reason string }{
		{"other header", "GET / HTTP/1.1\r\nHost: allowed.test\r\nX-Api-Key: " + placeholder + "\r\n\r\n", ReasonPlaceholder},
		{"url", "GET /?key=" + placeholder + " HTTP/1.1\r\nHost: allowed.test\r\n\r\n", ReasonPlaceholder},
		{"other host inside", "GET / HTTP/1.1\r\nHost: other.test\r\nAuthorization: Bearer " + placeholder + "\r\n\r\n", ReasonFronting},
	} {
		t.Run(c.name, func(t *testing.T) {
			tc := l.sandboxTLS(t, ca, pubWeb+":8443", "allowed.test")
			if status, body := roundTrip(t, tc, c.head); status != 403 || !strings.Contains(body, c.reason) {
				t.Fatalf("%d %q", status, body)
			}
			l.sink.wait(t, c.name, refusedFor(KindTCP, pubWeb+":8443", c.reason))
		})
	}
	c, err := dialer(l.sandbox)(context.Background(), "tcp", pubOther+":80")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if status, _ := roundTrip(t, c, "GET / HTTP/1.1\r\nHost: other.test\r\nAuthorization: Bearer "+placeholder+"\r\n\r\n"); status != 403 {
		t.Fatalf("placeholder over HTTP to another host: %d", status)
	}
	l.sink.wait(t, "placeholder to other.test", refusedFor(KindTCP, pubOther+":80", ReasonPlaceholder))
}
