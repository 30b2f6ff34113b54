package edge

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/webtransport-go"

	"github.com/warren-mesh/warren/internal/regions"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/internal/wtconn"
)

// serveWT serves r's edge over WebTransport (a self-signed certificate) and returns its /wt URL.
func serveWT(t *testing.T, r *meshRegion) string {
	t.Helper()
	cert := &SelfSigned{Hosts: []string{"127.0.0.1"}}
	r.edge.cfg.WebTransport = &WebTransport{GetCertificate: cert.GetCertificate, CertificateHashes: cert.Hashes}
	w, err := r.edge.WebTransportServer()
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = w.Serve(pc) }()
	t.Cleanup(func() { _ = w.Close(); _ = pc.Close() })
	return "https://" + pc.LocalAddr().String() + "/wt"
}

// dialWT opens the agent channel over WebTransport to url as user (the token in the query, as a
// browser passes it) and sends init.
func dialWT(t *testing.T, url, user string) *wtconn.Conn {
	t.Helper()
	ctx := testCtx(t)
	d := &webtransport.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
		QUICConfig:      &quic.Config{EnableDatagrams: true, EnableStreamResetPartialDelivery: true},
	}
	_, sess, err := d.Dial(ctx, url+"?token="+user, http.Header{})
	if err != nil {
		t.Fatal(err)
	}
	str, err := sess.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := wtconn.New(sess, str, wtconn.Client, wire.MaxFrame+64)
	t.Cleanup(func() { c.CloseNow() })
	sendInit(t, c)
	return c
}

// A WebTransport client whose user another region holds is forwarded over the mesh exactly as a WebSocket
// client is (TestForwardAgentChannel): messages both ways, b's one session lease, the runner's close code
// and reason as the session's error code and reason.
func TestForwardAgentChannelOverWebTransport(t *testing.T) {
	forwardAgentChannel(t, transportWebTransport)
}

// Over WebTransport, a refused token is an error message then the session closed with 4401, and a frame
// above 4 MiB is payload_too_large with 1009, as over WebSocket; anything but CONNECT /wt over HTTP/3 is
// refused with a wire error.
func TestWebTransportRefusals(t *testing.T) {
	rn := newMeshRunner(t)
	a, _, _ := twoRegions(t, rn, live)
	url := serveWT(t, a)
	expectClose := func(c *wtconn.Conn, code wire.Code) {
		t.Helper()
		_, data, err := c.Read(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(data), `"type":"error"`) || !strings.Contains(string(data), `"code":"`+string(code)+`"`) {
			t.Fatalf("first message %s, want an error %s", data, code)
		}
		_, _, err = c.Read(testCtx(t))
		var ce websocket.CloseError
		if !errors.As(err, &ce) || int(ce.Code) != code.CloseCode() {
			t.Fatalf("then %v, want the session closed with %d", err, code.CloseCode())
		}
	}

	bad := dialWT(t, url, "")
	say(t, bad, "hi") // the stream reaches the edge with its first bytes
	expectClose(bad, wire.Unauthenticated)

	big := dialWT(t, url, "alice")
	huge := []byte(strings.Repeat("a", wire.MaxFrame+1))
	if err := big.Write(testCtx(t), websocket.MessageText, huge); err != nil {
		t.Fatal(err)
	}
	expectClose(big, wire.PayloadTooLarge)

	h3 := &http.Client{Transport: &http3.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	defer h3.CloseIdleConnections()
	for _, u := range []string{url, strings.TrimSuffix(url, "/wt") + "/v1/regions"} {
		resp, err := h3.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		want := wire.NotFound
		if strings.HasSuffix(u, "/wt") {
			want = wire.InvalidArgument
		}
		if got := wire.ReadHTTPError(resp.StatusCode, body); got.Code != want {
			t.Fatalf("GET %s over HTTP/3: %d %s, want %s", u, resp.StatusCode, body, want)
		}
	}
	for _, reason := range []string{"method", "not_found"} {
		if got := metric(t, a.reg, "warren_edge_webtransport_refused_total", "reason", reason); got != 1 {
			t.Fatalf("warren_edge_webtransport_refused_total{%s} = %v, want 1", reason, got)
		}
	}
}

// GET /v1/regions lists this edge's WebTransport URL when its region is not announced yet, and the
// hashes of a self-signed certificate on this edge's own region only (another region's edges have
// certificates of their own); a production certificate has no hash.
func TestRegionsListWebTransport(t *testing.T) {
	ctx := context.Background()
	ledger, d := regionsFixture(t)
	if err := d.Announce(ctx, regions.Edge{Region: "us", ID: "1", URL: "https://us.example.com", WebTransport: "https://us.example.com/wt"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	cert := &SelfSigned{Hosts: []string{"127.0.0.1"}}
	list := func(wt *WebTransport) []regions.Status {
		t.Helper()
		e, err := New(Config{Region: "eu", Directory: d, WebTransport: wt, Verifier: grantVerifier{}, Sandboxes: grantRunner{}, Ledger: ledger, Metrics: prometheus.NewRegistry()})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(e.Handler())
		defer srv.Close()
		rs, err := http.Get(srv.URL + "/v1/regions")
		if err != nil {
			t.Fatal(err)
		}
		defer rs.Body.Close()
		var body struct{ Regions []regions.Status }
		if err := json.NewDecoder(rs.Body).Decode(&body); err != nil || len(body.Regions) != 2 {
			t.Fatalf("regions %+v, %v", body, err)
		}
		return body.Regions // eu, us
	}
	s := list(&WebTransport{GetCertificate: cert.GetCertificate, CertificateHashes: cert.Hashes, URL: "https://127.0.0.1:1234/wt"})
	if s[0].WebTransport != "https://127.0.0.1:1234/wt" || len(s[0].CertificateHashes) != 1 || s[0].CertificateHashes[0] != cert.Hashes()[0] {
		t.Fatalf("this edge's region %+v", s[0])
	}
	if s[1].WebTransport != "https://us.example.com/wt" || s[1].CertificateHashes != nil {
		t.Fatalf("another region %+v: its URL, no hash of this edge's certificate", s[1])
	}
	if s := list(&WebTransport{GetCertificate: cert.GetCertificate, URL: "https://eu.example.com/wt"}); s[0].WebTransport != "https://eu.example.com/wt" || s[0].CertificateHashes != nil {
		t.Fatalf("a production certificate: %+v", s[0])
	}
}
