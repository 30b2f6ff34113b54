package egress

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net"
	"testing"
	"time"
)

// TestCA: what leaves the CA is its certificate alone (one PEM block, no key), and a leaf it issues
// verifies for its host against it and for no other host.
func TestCA(t *testing.T) {
	ca, err := NewCA("sandbox sb1", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	block, rest := pem.Decode(ca.CertPEM())
	if block == nil || block.Type != "CERTIFICATE" || len(rest) != 0 {
		t.Fatalf("CertPEM: %v, %d bytes after", block, len(rest))
	}
	root, err := x509.ParseCertificate(block.Bytes)
	if err != nil || !root.IsCA {
		t.Fatalf("CA certificate: %v", err)
	}
	leaf, err := ca.Leaf("registry.test")
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := ca.Leaf("registry.test"); again != leaf {
		t.Error("leaf issued twice")
	}
	cert, _ := x509.ParseCertificate(leaf.Certificate[0])
	opts := x509.VerifyOptions{Roots: ca.Pool(), DNSName: "registry.test"}
	if _, err := cert.Verify(opts); err != nil {
		t.Fatalf("leaf does not verify: %v", err)
	}
	opts.DNSName = "other.test"
	if _, err := cert.Verify(opts); err == nil {
		t.Fatal("leaf verifies for another host")
	}
}

func TestInjectionConfigRefused(t *testing.T) {
	ca, _ := NewCA("x", time.Now())
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	config := func(inj Injection) Config {
		return Config{Stack: NewStack(HardDeny{}, nil, nil), Proxy: []*net.TCPListener{ln}, CA: ca, Inject: []Injection{inj}}
	}
	good := Injection{Hosts: []string{"*.npmjs.org"}, Header: "Authorization", Placeholder: placeholder, Secret: secret}
	if cfg := config(good); cfg.defaults() != nil {
		t.Fatalf("good injection refused: %v", cfg.defaults())
	}
	for _, c := range []struct {
		name string
		edit func(*Injection)
	}{
		{"no hosts", func(i *Injection) { i.Hosts = nil }},
		{"bad host", func(i *Injection) { i.Hosts = []string{"a..b"} }},
		{"bad header", func(i *Injection) { i.Header = "X: y" }},
		{"bad scheme", func(i *Injection) { i.Scheme = "Bearer x" }},
		{"short placeholder", func(i *Injection) { i.Placeholder = "ref" }},
		{"secret with newline", func(i *Injection) { i.Secret = "a\r\nX-Evil: 1" }},
	} {
		t.Run(c.name, func(t *testing.T) {
			inj := good
			inj.Hosts = append([]string(nil), good.Hosts...)
			c.edit(&inj)
			cfg := config(inj)
			if err := cfg.defaults(); !errors.Is(err, ErrConfig) {
				t.Fatalf("defaults = %v, want ErrConfig", err)
			}
		})
	}
}
