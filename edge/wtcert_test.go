package edge

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"net"
	"testing"
	"time"
)

// handshake makes a real TLS handshake with a server serving s's certificate and returns the leaf served.
func handshake(t *testing.T, s *SelfSigned) *tls.ConnectionState {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{GetCertificate: s.GetCertificate, MinVersion: tls.VersionTLS13})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_ = c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{InsecureSkipVerify: true}) // checked by hash below
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cs := c.ConnectionState()
	return &cs
}

// TestSelfSignedRotates: the development certificate is ECDSA P-256, valid at most 14 days, names the
// hosts, and its published hash is the SHA-256 of the certificate served; it is kept until two thirds of
// its validity have passed, then replaced (new key, new hash) long before it expires, and the next
// handshake serves the new one. The clock is injected: no waiting.
func TestSelfSignedRotates(t *testing.T) {
	clock := newFakeClock()
	s := &SelfSigned{Hosts: []string{"127.0.0.1", "localhost"}, Now: clock.Now}
	cs := handshake(t, s)
	leaf := cs.PeerCertificates[0]
	h := s.Hashes()
	if len(h) != 1 || h[0] != HashOf(leaf.Raw) {
		t.Fatalf("published %v, served %v", h, HashOf(leaf.Raw))
	}
	key, ok := leaf.PublicKey.(*ecdsa.PublicKey)
	if !ok || key.Curve != elliptic.P256() {
		t.Fatalf("key %T, want ECDSA P-256", leaf.PublicKey)
	}
	if v := leaf.NotAfter.Sub(leaf.NotBefore); v > MaxSelfSignedValidity || !leaf.NotBefore.Before(clock.Now()) {
		t.Fatalf("valid %v from %v (now %v)", v, leaf.NotBefore, clock.Now())
	}
	if len(leaf.IPAddresses) != 1 || !leaf.IPAddresses[0].Equal(net.IPv4(127, 0, 0, 1)) || len(leaf.DNSNames) != 1 {
		t.Fatalf("names %v %v", leaf.IPAddresses, leaf.DNSNames)
	}

	clock.Advance(6 * 24 * time.Hour) // 10 days valid: not yet due
	if got := s.Hashes()[0]; got != h[0] {
		t.Fatal("rotated before it was due")
	}
	clock.Advance(24 * time.Hour) // past two thirds of 10 days
	next := s.Hashes()[0]
	if next == h[0] {
		t.Fatal("not rotated after two thirds of its validity")
	}
	leaf2 := handshake(t, s).PeerCertificates[0]
	if HashOf(leaf2.Raw) != next || !leaf2.NotAfter.After(clock.Now().Add(6*24*time.Hour)) || !leaf.NotAfter.After(clock.Now()) {
		t.Fatalf("after rotation served %v (until %v), published %v; old one until %v", HashOf(leaf2.Raw), leaf2.NotAfter, next, leaf.NotAfter)
	}
	if leaf2.PublicKey.(*ecdsa.PublicKey).Equal(key) {
		t.Fatal("the rotated certificate kept the old key")
	}

	if _, err := (&SelfSigned{Validity: 15 * 24 * time.Hour}).GetCertificate(nil); err == nil {
		t.Fatal("a validity over 14 days was accepted")
	}
}
