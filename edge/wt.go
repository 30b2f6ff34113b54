package edge

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/webtransport-go"

	"github.com/warren-mesh/warren/internal/httpx"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/internal/wtconn"
)

// WebTransport configures the agent channel over WebTransport (docs/PROTOCOL.md#webtransport): HTTP/3
// extended CONNECT /wt on UDP, the edge's TCP port number by convention.
type WebTransport struct {
	// GetCertificate returns the TLS certificate: a *SelfSigned's in development, the configured one in
	// production.
	GetCertificate func(*tls.ClientHelloInfo) (*tls.Certificate, error)
	// CertificateHashes, when set, are published in GET /v1/regions for this edge's region, for browsers
	// to pin a self-signed certificate (serverCertificateHashes). Production certificates have none.
	CertificateHashes func() []CertificateHash
	// URL is this region's public WebTransport URL (https://host:port/wt) that GET /v1/regions lists when
	// the region directory has none for it.
	URL string
}

// Bounds of a WebTransport connection: the one stream of the session must be opened within
// wtStreamTimeout of the CONNECT; a client may open only a few streams (it needs one, plus HTTP/3's own).
const (
	wtStreamTimeout   = 10 * time.Second
	wtMaxStreams      = 4
	wtMaxUniStreams   = 8
	wtIdleTimeout     = time.Minute
	wtKeepAlivePeriod = 20 * time.Second
)

// WTServer serves the agent channel over WebTransport.
type WTServer struct {
	e *Edge
	s *webtransport.Server
}

// WebTransportServer is the edge's WebTransport server; Serve it on a UDP socket. Config.WebTransport must
// be set.
func (e *Edge) WebTransportServer() (*WTServer, error) {
	wc := e.cfg.WebTransport
	if wc == nil || wc.GetCertificate == nil {
		return nil, errNoCertificate
	}
	w := &WTServer{e: e}
	h3 := httpx.NewHTTP3Server(httpx.RequestIDs(http.HandlerFunc(w.serveHTTP)),
		&tls.Config{MinVersion: tls.VersionTLS13, GetCertificate: wc.GetCertificate},
		&quic.Config{
			EnableDatagrams: true, EnableStreamResetPartialDelivery: true,
			MaxIncomingStreams: wtMaxStreams, MaxIncomingUniStreams: wtMaxUniStreams,
			MaxIdleTimeout: wtIdleTimeout, KeepAlivePeriod: wtKeepAlivePeriod,
		},
		httpx.Config{Logger: e.log.With("component", "webtransport")})
	w.s = &webtransport.Server{
		H3: h3,
		// Tokens travel in the URL or a header, never in cookies, so cross-origin pages gain nothing.
		CheckOrigin: func(*http.Request) bool { return true },
	}
	return w, nil
}

// Serve serves sessions on pc until Close.
func (w *WTServer) Serve(pc net.PacketConn) error {
	err := w.s.Serve(pc)
	if errors.Is(err, quic.ErrServerClosed) || errors.Is(err, http.ErrServerClosed) {
		return http.ErrServerClosed
	}
	return err
}

// Close closes every session and stops serving.
func (w *WTServer) Close() error { return w.s.Close() }

// serveHTTP is CONNECT /wt (or /wt/): the session's first bidirectional stream, opened by the client, carries
// the agent channel exactly as a WebSocket does (serveChannel). Anything else over HTTP/3 is not_found.
func (w *WTServer) serveHTTP(rw http.ResponseWriter, r *http.Request) {
	e := w.e
	log := e.log.With("request_id", httpx.RequestID(r.Context()), "transport", transportWebTransport)
	if r.URL.Path != "/wt" && r.URL.Path != "/wt/" {
		e.m.wtRefused.WithLabelValues("not_found").Inc()
		wire.WriteHTTPError(rw, log, wire.Errorf(wire.NotFound, "only CONNECT /wt (WebTransport) is served over HTTP/3"))
		return
	}
	if r.Method != http.MethodConnect {
		e.m.wtRefused.WithLabelValues("method").Inc()
		rw.Header().Set("Allow", http.MethodConnect)
		wire.WriteHTTPError(rw, log, wire.Errorf(wire.InvalidArgument, "/wt is a WebTransport endpoint: extended CONNECT"))
		return
	}
	sess, err := w.s.Upgrade(rw, r)
	if err != nil {
		e.m.wtRefused.WithLabelValues("upgrade").Inc()
		log.Info("webtransport upgrade refused", "err", err)
		wire.WriteHTTPError(rw, log, wire.Wrap(wire.InvalidArgument, err, "webtransport upgrade failed"))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), wtStreamTimeout)
	str, err := sess.AcceptStream(ctx)
	cancel()
	if err != nil {
		e.m.wtRefused.WithLabelValues("no_stream").Inc()
		log.Info("webtransport session without a stream", "err", err)
		pub := wire.Errorf(wire.InvalidArgument, "open one bidirectional stream for the agent channel within %v", wtStreamTimeout)
		_ = sess.CloseWithError(webtransport.SessionErrorCode(pub.Code.CloseCode()), wire.CloseReason(pub))
		return
	}
	c := wtconn.New(sess, str, wtconn.Server, wire.MaxFrame)
	if hs, ok := rw.(http3.HTTPStreamer); ok {
		c.SetConnectStream(hs.HTTPStream())
	}
	defer c.CloseNow()
	e.serveChannel(r, c, transportWebTransport)
}
