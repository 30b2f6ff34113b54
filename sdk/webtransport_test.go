package warren

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/webtransport-go"

	"github.com/warren-mesh/warren/edge"
	"github.com/warren-mesh/warren/internal/wtconn/wttest"
)

// pinnedEdge is a WebTransport server with certificate served, and an HTTP edge whose GET /v1/regions
// lists it with the hashes published.
func pinnedEdge(t *testing.T, served *edge.SelfSigned, published []CertificateHash) string {
	t.Helper()
	addr := wttest.Serve(t, served.GetCertificate, func(*webtransport.Session, *http.Request) {})
	regions := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(Regions{Region: "r", Regions: []Region{{
			Name: "r", URL: "http://" + r.Host, Health: "ok", Edges: 1,
			WebTransport: "https://" + addr + "/wt", CertificateHashes: published,
		}}})
	}))
	t.Cleanup(regions.Close)
	return regions.URL
}

// TestWebTransportPinsThePublishedCertificate: a self-signed certificate is accepted only when its hash is
// one the edge published: an edge serving another certificate (a machine in the middle, say) is refused
// before the token is sent, and in auto mode the client then keeps to the WebSocket.
func TestWebTransportPinsThePublishedCertificate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	good := &edge.SelfSigned{Hosts: []string{"127.0.0.1"}}
	other := &edge.SelfSigned{Hosts: []string{"127.0.0.1"}}

	c, err := New(pinnedEdge(t, good, good.Hashes()), "tok", WithTransport(TransportWebTransport, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := c.dialChannel(ctx)
	if err != nil {
		t.Fatalf("the published certificate: %v", err)
	}
	_ = conn.CloseNow()

	c, err = New(pinnedEdge(t, good, other.Hashes()), "tok", WithTransport(TransportWebTransport, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.dialChannel(ctx); err == nil || !strings.Contains(err.Error(), "not one the edge published") {
		t.Fatalf("a certificate not published: %v", err)
	}
}

// TestCheckPinnedValidity: a pinned certificate must be valid now and for at most 14 days, as browsers
// require.
func TestCheckPinnedValidity(t *testing.T) {
	s := &edge.SelfSigned{Hosts: []string{"127.0.0.1"}}
	cert, err := s.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	leaf, h := cert.Leaf, s.Hashes()
	if err := checkPinned(leaf, h, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := checkPinned(leaf, h, leaf.NotAfter.Add(time.Second)); err == nil {
		t.Fatal("an expired pinned certificate was accepted")
	}
	long := *leaf
	long.NotAfter = long.NotBefore.Add(15 * 24 * time.Hour)
	if err := checkPinned(&long, h, time.Now()); err == nil {
		t.Fatal("a pinned certificate valid for 15 days was accepted")
	}
	if err := checkPinned(leaf, []CertificateHash{{Algorithm: "sha-1", Value: h[0].Value}}, time.Now()); err == nil {
		t.Fatal("a hash of another algorithm was accepted")
	}
}
