package wtconn_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/webtransport-go"

	"github.com/warren-mesh/warren/edge"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/internal/wtconn"
	"github.com/warren-mesh/warren/internal/wtconn/wttest"
)

const limit = 1 << 10

// pair is a real WebTransport session over loopback QUIC: the server's Conn and the client's Conn of its
// one stream, and the client's raw stream (for malformed frames).
type pair struct {
	server, client *wtconn.Conn
	raw            *webtransport.Stream
}

func newPair(t *testing.T) pair { return newPairWith(t, false) }

// newPairWith is newPair; with connect, the server's Conn closes on the CONNECT stream itself
// (SetConnectStream), as the edge's does.
func newPairWith(t *testing.T, connect bool) pair {
	t.Helper()
	cert := &edge.SelfSigned{Hosts: []string{"127.0.0.1"}}
	conns := make(chan *wtconn.Conn, 1)
	addr := wttest.ServeConnect(t, cert.GetCertificate, func(sess *webtransport.Session, cs *http3.Stream, r *http.Request) {
		str, err := sess.AcceptStream(r.Context())
		if err != nil {
			t.Error(err)
			return
		}
		c := wtconn.New(sess, str, wtconn.Server, limit)
		if connect {
			c.SetConnectStream(cs)
		}
		conns <- c
	})

	// As a browser does, the QUIC connection outlives a session closed on it (webtransport.Transport.Dial
	// would close it with the session).
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	qc, err := quic.DialAddr(ctx, addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{http3.NextProtoH3}},
		&quic.Config{EnableDatagrams: true, EnableStreamResetPartialDelivery: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = qc.CloseWithError(0, "") })
	cc, err := (&webtransport.Transport{}).NewClientConn(qc)
	if err != nil {
		t.Fatal(err)
	}
	_, sess, err := cc.Dial(ctx, "https://"+addr+"/wt", nil)
	if err != nil {
		t.Fatal(err)
	}
	str, err := sess.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := wtconn.New(sess, str, wtconn.Client, limit)
	if err := c.Write(ctx, websocket.MessageText, []byte(`{"type":"init"}`)); err != nil { // the stream reaches the server with its first bytes
		t.Fatal(err)
	}
	p := pair{server: <-conns, client: c, raw: str}
	if _, b, err := p.server.Read(ctx); err != nil || string(b) != `{"type":"init"}` {
		t.Fatalf("first message %q, %v", b, err)
	}
	return p
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

// TestServerCloseDeliversMessagesThenCode: what the server wrote before Close reaches the client, then
// the close: the client's Read returns a websocket.CloseError with the session's code and reason.
func TestServerCloseDeliversMessagesThenCode(t *testing.T) {
	for _, connect := range []bool{false, true} {
		p := newPairWith(t, connect)
		ctx := ctx(t)
		msg := wire.ErrorMessage(wire.Errorf(wire.Unauthenticated, "bad token"))
		if err := p.server.Write(ctx, websocket.MessageText, msg); err != nil {
			t.Fatal(err)
		}
		go p.server.Close(4401, `{"code":"unauthenticated"}`)
		if _, b, err := p.client.Read(ctx); err != nil || string(b) != string(msg) {
			t.Fatalf("connect %v: read %q, %v", connect, b, err)
		}
		_, _, err := p.client.Read(ctx)
		var ce websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != 4401 || ce.Reason != `{"code":"unauthenticated"}` {
			t.Fatalf("connect %v: after the message: %v, want close 4401", connect, err)
		}
	}
}

// A close written on the CONNECT stream by the edge keeps a long reason to 1024 bytes, cut at a character's
// start, as webtransport-go's own close does.
func TestConnectCloseBoundsReason(t *testing.T) {
	p := newPairWith(t, true)
	ctx := ctx(t)
	reason := strings.Repeat("€", 400) // 1200 bytes, 3 a character
	go p.server.Close(1011, reason)
	_, _, err := p.client.Read(ctx)
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != 1011 || len(ce.Reason) != 1023 || !utf8.ValidString(ce.Reason) {
		t.Fatalf("close %v (reason of %d bytes)", err, len(ce.Reason))
	}
}

// TestClientCloseIsNormal: a client that closes (its side of the stream ends, then the session) is a
// normal closure (1000) at the server, as the browser's close() (code 0) is.
func TestClientCloseIsNormal(t *testing.T) {
	for name, closeFn := range map[string]func(p pair){
		"Close":             func(p pair) { _ = p.client.Close(websocket.StatusNormalClosure, "") },
		"browser close()":   func(p pair) { _ = p.client.Session().CloseWithError(0, "") },
		"end of the stream": func(p pair) { _ = p.raw.Close() },
	} {
		t.Run(name, func(t *testing.T) {
			p := newPair(t)
			ctx := ctx(t)
			go closeFn(p)
			_, _, err := p.server.Read(ctx)
			if websocket.CloseStatus(err) != websocket.StatusNormalClosure {
				t.Fatalf("server read %v, want a normal closure", err)
			}
		})
	}
}

// TestServerEndsNormallyAfterTheClient: a client that ends its side of the stream sees the session closed
// with 1000 even when the server then drops it with CloseNow (as the edge's relay does once the runner is
// closed): the client's close was normal.
func TestServerEndsNormallyAfterTheClient(t *testing.T) {
	p := newPair(t)
	ctx := ctx(t)
	_ = p.raw.Close()
	if _, _, err := p.server.Read(ctx); websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Fatalf("server read %v", err)
	}
	go p.server.CloseNow()
	if _, _, err := p.client.Read(ctx); websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Fatalf("client read %v, want a normal closure", err)
	}
}

// TestCloseNowIsConnectionLost: CloseNow is not a close the peer can take as final: it reads an error that
// is not a websocket.CloseError, as a WebSocket cut without a close frame.
func TestCloseNowIsConnectionLost(t *testing.T) {
	p := newPair(t)
	ctx := ctx(t)
	go p.server.CloseNow()
	_, _, err := p.client.Read(ctx)
	if err == nil || websocket.CloseStatus(err) != -1 {
		t.Fatalf("client read %v, want a lost connection", err)
	}
}

// TestMalformedFramesAreTypedErrors: a frame above the limit is payload_too_large before its body is read,
// an empty frame invalid_argument.
func TestMalformedFramesAreTypedErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		frame []byte
		code  wire.Code
	}{
		"too large": {[]byte{0, 0, 0x10, 0}, wire.PayloadTooLarge},
		"empty":     {[]byte{0, 0, 0, 0}, wire.InvalidArgument},
	} {
		t.Run(name, func(t *testing.T) {
			p := newPair(t)
			ctx := ctx(t)
			if _, err := p.raw.Write(tc.frame); err != nil {
				t.Fatal(err)
			}
			_, _, err := p.server.Read(ctx)
			var we *wire.Error
			if !errors.As(err, &we) || we.Code != tc.code {
				t.Fatalf("server read %v, want %s", err, tc.code)
			}
		})
	}
}

// TestReadHonoursContext: a Read waiting for a message ends with its context.
func TestReadHonoursContext(t *testing.T) {
	p := newPair(t)
	c, cancel := context.WithCancel(ctx(t))
	go cancel()
	if _, _, err := p.server.Read(c); !errors.Is(err, context.Canceled) {
		t.Fatalf("read %v, want context.Canceled", err)
	}
}
