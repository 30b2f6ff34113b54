package egress

import (
	"bytes"
	"crypto/tls"
	"net"
	"testing"
	"time"
)

// clientHello is the first flight of a real TLS client naming sni.
func clientHello(t testing.TB, sni string) []byte {
	t.Helper()
	a, b := net.Pipe()
	go func() {
		_ = tls.Client(a, &tls.Config{ServerName: sni, InsecureSkipVerify: true}).Handshake()
	}()
	h, err := peek(b, 5*time.Second)
	a.Close()
	b.Close()
	if err != nil || h.name != sni {
		t.Fatalf("peek of a ClientHello for %q: %+v, %v", sni, h.name, err)
	}
	return h.buf
}

func peekBytes(in []byte) (hello, error) {
	a, b := net.Pipe()
	go func() { a.Write(in); a.Close() }()
	defer b.Close()
	return peek(b, 5*time.Second)
}

func TestPeek(t *testing.T) {
	hello := clientHello(t, "api.github.com")
	for _, c := range []struct {
		name, in, proto, host, method string
		fails                         bool
	}{
		{"tls", string(hello), "tls", "api.github.com", "", false},
		{"tls cut short", string(hello[:len(hello)/2]), "tls", "", "", true},
		{"http", "GET / HTTP/1.1\r\nHost: Example.COM.:8080\r\n\r\n", "http", "example.com", "GET", false},
		{"http absolute", "GET http://a.test/x HTTP/1.1\r\nHost: A.test:80\r\n\r\n", "http", "a.test", "GET", false},
		{"http absolute other host", "GET http://a.test/x HTTP/1.1\r\nHost: b.test\r\n\r\n", "http", "a.test", "GET", true},
		{"two hosts", "GET / HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n", "http", "", "", true},
		{"http address host", "GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n", "http", "", "GET", false},
		{"connect", "CONNECT evil.test:443 HTTP/1.1\r\nHost: evil.test:443\r\n\r\n", "http", "evil.test", "CONNECT", false},
		{"http cut short", "GET / HTTP/1.1\r\nHost: a", "http", "", "", true},
		{"ssh", "SSH-2.0-OpenSSH_9.6\r\n", "", "", "", false},
		{"binary", "\x00\x01\x02", "", "", "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, err := peekBytes([]byte(c.in))
			if (err != nil) != c.fails || h.proto != c.proto || h.name != c.host || h.method != c.method {
				t.Fatalf("peek = %+v, %v", h, err)
			}
			if !bytes.HasPrefix([]byte(c.in), h.buf) {
				t.Fatalf("buf %q is not what was read", h.buf)
			}
		})
	}
}

// TestPeekBounded: a request head that never ends is read no further than the bound.
func TestPeekBounded(t *testing.T) {
	in := append([]byte("GET / HTTP/1.1\r\nX: "), bytes.Repeat([]byte("a"), 2*maxPeek)...)
	h, err := peekBytes(in)
	if err == nil || len(h.buf) > maxPeek {
		t.Fatalf("peek of an endless head: %d bytes read, %v", len(h.buf), err)
	}
}

// FuzzPeek: whatever a sandbox sends first, peek returns a prefix of it no longer than the bound, and a
// name only in normal form.
func FuzzPeek(f *testing.F) {
	f.Add(clientHello(f, "registry.npmjs.org"))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: a.test\r\n\r\n"))
	f.Add([]byte("CONNECT a:1 HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		h, _ := peekBytes(in)
		if len(h.buf) > maxPeek || !bytes.HasPrefix(in, h.buf) {
			t.Fatalf("buf of %d bytes is not a bounded prefix", len(h.buf))
		}
		if h.name != "" {
			if n, ok := NormalName(h.name); !ok || n != h.name {
				t.Fatalf("name %q not normal", h.name)
			}
		}
	})
}
