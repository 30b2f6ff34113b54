package mesh

import (
	"context"
	"io"
	"math/big"
	"testing"
	"time"

	vaultapi "github.com/hashicorp/vault/api"

	"github.com/warren-mesh/warren/internal/testenv"
)

// vaultPKI starts a Vault dev server with a PKI mount "pki": a generated root and a role "edge" that allows
// exactly the region URIs. It answers a root client.
func vaultPKI(t *testing.T) *vaultapi.Client {
	t.Helper()
	srv := testenv.StartVault(t)
	srv.MountMeshPKI(t, "pki", "edge")
	return srv.Client(t)
}

// Two edges with certificates from Vault's PKI engine connect and exchange data; a renewal issues a new
// certificate that the next connection presents; Run renews before expiry; a region the role does not allow
// is refused by Vault.
func TestVaultPKI(t *testing.T) {
	client := vaultPKI(t)
	ctx := testCtx(t)
	source := func(region string, ttl time.Duration) *VaultSource {
		v, err := NewVaultSource(ctx, VaultConfig{Client: client, Role: "edge", Region: region, TTL: ttl, Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	euCert, usCert := source(regionEU, 0), source(regionUS, 0)
	if life := time.Until(usCert.cert.Leaf.NotAfter); life < 23*time.Hour || life > 25*time.Hour {
		t.Fatalf("the role's default lifetime not used: %v", life)
	}
	peerSerials := make(chan *big.Int, 2)
	vaultNode := func(region string, v *VaultSource, h func(context.Context, string, *Stream)) *testNode {
		return newNode(t, nil, region, h, func(c *Config) { c.Certificate, c.Roots = v.Certificate, v.Roots() })
	}
	eu := vaultNode(regionEU, euCert, func(ctx context.Context, from string, s *Stream) {
		peerSerials <- s.conn.ConnectionState().TLS.PeerCertificates[0].SerialNumber
		io.Copy(s, s)
	})
	eu.listen(t, "")
	us := vaultNode(regionUS, usCert, nil)
	s, err := us.Open(ctx, regionEU, eu.addr, Header{Kind: KindHTTP})
	if err != nil {
		t.Fatal(err)
	}
	if got := roundTrip(t, s, []byte("issued by vault")); string(got) != "issued by vault" {
		t.Fatalf("echo %q", got)
	}
	s.Close()
	if got := <-peerSerials; got.Cmp(usCert.cert.Leaf.SerialNumber) != 0 {
		t.Fatal("eu saw another certificate than us's")
	}

	// A renewal: the next connection (of a restarted us, say) presents the new certificate.
	old := usCert.cert.Leaf.SerialNumber
	if err := usCert.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if usCert.cert.Leaf.SerialNumber.Cmp(old) == 0 {
		t.Fatal("Renew kept the old certificate")
	}
	us2 := vaultNode(regionUS, usCert, nil)
	s, err = us2.Open(ctx, regionEU, eu.addr, Header{Kind: KindHTTP})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if got := <-peerSerials; got.Cmp(usCert.cert.Leaf.SerialNumber) != 0 {
		t.Fatal("the renewed certificate was not presented")
	}

	// Run renews a short-lived certificate before it expires.
	short := source(regionAP, 3*time.Second)
	first, _ := short.Certificate()
	if !short.RenewAt().Before(first.Leaf.NotAfter) {
		t.Fatalf("renewal at %v, after expiry at %v", short.RenewAt(), first.Leaf.NotAfter)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { short.Run(runCtx); close(done) }()
	for { // the test's deadline turns a renewal that never happens into a failure
		c, _ := short.Certificate()
		if c != first {
			if !c.Leaf.NotAfter.After(first.Leaf.NotAfter) {
				t.Fatal("the renewed certificate expires no later")
			}
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("Run did not renew before the deadline")
		case <-time.After(50 * time.Millisecond):
		}
	}
	stop()
	<-done

	// Vault refuses what the role does not allow; the edge does not start.
	if _, err := NewVaultSource(ctx, VaultConfig{Client: client, Role: "edge", Region: regionEU, CommonName: "evil.example"}); err == nil {
		t.Fatal("Vault issued a common name the role does not allow")
	}
	if _, err := NewVaultSource(ctx, VaultConfig{Client: client, Role: "nope", Region: regionEU}); err == nil {
		t.Fatal("a certificate from a missing role")
	}
}
