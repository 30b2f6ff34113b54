// Package wttest serves WebTransport for tests: a real HTTP/3 server on a loopback UDP port.
package wttest

import (
	"crypto/tls"
	"net"
	"net/http"
	"testing"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/webtransport-go"

	"github.com/warren-mesh/warren/internal/httpx"
)

// Serve accepts WebTransport sessions (any path, any origin) on a loopback UDP port with the certificate
// getCert returns, until the test ends, and returns the port's host:port. Each session is handed to
// handle, and closed once handle has returned and the session has ended.
func Serve(t testing.TB, getCert func(*tls.ClientHelloInfo) (*tls.Certificate, error), handle func(*webtransport.Session, *http.Request)) string {
	t.Helper()
	return ServeConnect(t, getCert, func(sess *webtransport.Session, _ *http3.Stream, r *http.Request) { handle(sess, r) })
}

// ServeConnect is Serve, handing each session's CONNECT stream to handle too (wtconn.Conn.SetConnectStream).
func ServeConnect(t testing.TB, getCert func(*tls.ClientHelloInfo) (*tls.Certificate, error), handle func(*webtransport.Session, *http3.Stream, *http.Request)) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var s *webtransport.Server
	s = &webtransport.Server{
		H3: httpx.NewHTTP3Server(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			sess, err := s.Upgrade(w, r)
			if err != nil {
				t.Error(err)
				return
			}
			handle(sess, w.(http3.HTTPStreamer).HTTPStream(), r)
			<-sess.Context().Done()
		}), &tls.Config{GetCertificate: getCert},
			&quic.Config{EnableDatagrams: true, EnableStreamResetPartialDelivery: true}, httpx.Config{}),
		CheckOrigin: func(*http.Request) bool { return true },
	}
	go func() { _ = s.Serve(pc) }()
	t.Cleanup(func() { _ = s.Close(); _ = pc.Close() })
	return pc.LocalAddr().String()
}
