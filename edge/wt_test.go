package edge

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/coder/websocket"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/webtransport-go"

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
	return c
}

func sayWT(t *testing.T, c *wtconn.Conn, content string) {
	t.Helper()
	msg := fmt.Sprintf(`{"type":"user","message":{"role":"user","content":%q}}`, content)
	if err := c.Write(testCtx(t), websocket.MessageText, []byte(msg)); err != nil {
		t.Fatal(err)
	}
}

// A WebTransport client whose user another region holds is forwarded over the mesh exactly as a WebSocket
// client is: messages both ways, b's one session lease, the runner's close code and reason as the
// session's error code and reason; the connection is counted under transport="webtransport".
func TestForwardAgentChannelOverWebTransport(t *testing.T) {
	rn := newMeshRunner(t)
	a, b, _ := twoRegions(t, rn, live)
	c := dialWT(t, serveWT(t, b), "alice")
	for i, content := range []string{"hello", "again"} {
		sayWT(t, c, content)
		_, data, err := c.Read(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf(`{"type":"echo","seq":%d,"content":%q}`, i+1, content); string(data) != want {
			t.Fatalf("client read %s, want %s", data, want)
		}
	}
	ctx := context.Background()
	if n, _, err := b.ledger.Sessions().Count(ctx, "acme", "alice"); err != nil || n != 1 {
		t.Fatalf("b holds %d session leases (%v), want 1", n, err)
	}
	if got := metric(t, b.reg, "warren_edge_forwarded_total", "kind", "ws", "region", "a", "outcome", "ok"); got != 1 {
		t.Fatalf("b's warren_edge_forwarded_total{ws,a,ok} = %v, want 1", got)
	}
	if got := metric(t, b.reg, "warren_edge_connections_total", "transport", "webtransport"); got != 1 {
		t.Fatalf("b's warren_edge_connections_total{webtransport} = %v, want 1", got)
	}
	if n := a.verifier.calls.Load(); n != 0 {
		t.Fatalf("a verified %d tokens, want none", n)
	}

	sayWT(t, c, "close")
	_, _, err := c.Read(testCtx(t))
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != 4409 || ce.Reason != `{"code":"conflict","message":"closed by the runner"}` {
		t.Fatalf("client read %v, want the runner's close 4409 and its reason", err)
	}
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
	sayWT(t, bad, "hi") // the stream reaches the edge with its first bytes
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
}
