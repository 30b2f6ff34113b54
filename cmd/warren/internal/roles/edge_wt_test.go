package roles

import (
	"crypto/tls"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warren-mesh/warren/edge"
	"github.com/warren-mesh/warren/internal/testenv"
)

// writeCert writes a fresh certificate and key as PEM files (cert and key paths in dir) with modification
// time mod.
func writeCert(t *testing.T, dir string, mod time.Time) []byte {
	t.Helper()
	c, err := (&edge.SelfSigned{Hosts: []string{"127.0.0.1"}}).GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	cp, kp := testenv.WriteKeyPair(t, dir, "wt", c)
	for _, p := range []string{cp, kp} {
		if err := os.Chtimes(p, mod, mod); err != nil {
			t.Fatal(err)
		}
	}
	return c.Certificate[0]
}

// TestEdgeWTCertificateReload: -wt-cert/-wt-key bind UDP at the TCP listener's port and announce
// https://<listen address>/wt; a renewed certificate is served once the files change (looked at every 30
// s of the injected clock), and a broken renewal keeps the last good certificate.
func TestEdgeWTCertificateReload(t *testing.T) {
	dir := t.TempDir()
	cp, kp := filepath.Join(dir, "wt.crt"), filepath.Join(dir, "wt.key")
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	first := writeCert(t, dir, t0)

	if _, _, err := (&wtFlags{cert: cp}).open(nil, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "-wt-key") {
		t.Fatalf("-wt-cert without -wt-key: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	wt, pc, err := (&wtFlags{cert: cp, key: kp}).open(ln, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	if pc.LocalAddr().String() != ln.Addr().String() || wt.URL != "https://"+ln.Addr().String()+"/wt" || wt.CertificateHashes != nil {
		t.Fatalf("udp %s, url %s (tcp %s)", pc.LocalAddr(), wt.URL, ln.Addr())
	}

	now := t0
	files := &certFiles{cert: cp, key: kp, log: slog.New(slog.DiscardHandler), now: func() time.Time { return now }}
	if err := files.load(); err != nil {
		t.Fatal(err)
	}
	served := func() []byte {
		c, err := files.GetCertificate(&tls.ClientHelloInfo{})
		if err != nil {
			t.Fatal(err)
		}
		return c.Certificate[0]
	}
	second := writeCert(t, dir, t0.Add(time.Hour))
	if string(served()) != string(first) {
		t.Fatal("the files were read again before 30 s")
	}
	now = now.Add(certRecheck)
	if string(served()) != string(second) {
		t.Fatal("the renewed certificate is not served")
	}
	if err := os.WriteFile(cp, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	_ = os.Chtimes(cp, t0.Add(2*time.Hour), t0.Add(2*time.Hour))
	now = now.Add(certRecheck)
	if string(served()) != string(second) {
		t.Fatal("a broken renewal replaced the last good certificate")
	}
}
