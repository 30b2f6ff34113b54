package warren

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/webtransport-go"

	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/internal/wtconn"
)

// Transport is how a Client opens agent sessions (docs/PROTOCOL.md#transports).
type Transport string

// The transports.
const (
	// TransportWebSocket: WebSocket only (the default).
	TransportWebSocket Transport = "websocket"
	// TransportWebTransport: WebTransport only; a dial fails when the edge offers none or UDP is blocked.
	TransportWebTransport Transport = "webtransport"
	// TransportAuto: WebTransport when the edge offers it (GET /v1/regions lists a webtransport URL for
	// its region) and a session opens within the WebTransport dial timeout, else WebSocket. After a failed
	// WebTransport dial the client uses WebSocket for a minute before it tries WebTransport again.
	TransportAuto Transport = "auto"
)

// ParseTransport reads a transport name: websocket (or ws), webtransport (or wt), auto.
func ParseTransport(s string) (Transport, error) {
	switch s {
	case "websocket", "ws":
		return TransportWebSocket, nil
	case "webtransport", "wt":
		return TransportWebTransport, nil
	case "auto":
		return TransportAuto, nil
	}
	return "", fmt.Errorf("warren: transport %q: want websocket, webtransport or auto", s)
}

// DefaultWebTransportDialTimeout bounds a WebTransport dial (the QUIC handshake and the CONNECT) before
// TransportAuto falls back to WebSocket.
const DefaultWebTransportDialTimeout = 3 * time.Second

// wtDownFor is how long TransportAuto keeps to WebSocket after a failed WebTransport dial.
const wtDownFor = time.Minute

// wtState is the Client's WebTransport choice and what it learned.
type wtState struct {
	transport   Transport
	dialTimeout time.Duration

	mu   sync.Mutex
	down time.Time // when the last WebTransport dial failed (TransportAuto)
}

// WithTransport makes the Client open agent sessions over t; dialTimeout bounds each WebTransport dial
// (0: DefaultWebTransportDialTimeout).
func WithTransport(t Transport, dialTimeout time.Duration) Option {
	return func(c *Client) {
		if dialTimeout <= 0 {
			dialTimeout = DefaultWebTransportDialTimeout
		}
		c.wt = &wtState{transport: t, dialTimeout: dialTimeout}
	}
}

// chanConn is an agent channel connection: a *websocket.Conn or a WebTransport session's stream
// (*wtconn.Conn), both read and written in WebSocket terms.
type chanConn interface {
	Read(ctx context.Context) (websocket.MessageType, []byte, error)
	Write(ctx context.Context, typ websocket.MessageType, data []byte) error
	Close(code websocket.StatusCode, reason string) error
	CloseNow() error
}

// Transport is the transport of the session's connection now.
func (s *Session) Transport() Transport {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.conn.(*wtconn.Conn); ok {
		return TransportWebTransport
	}
	return TransportWebSocket
}

// dialChannel opens the agent channel over the Client's transport.
func (c *Client) dialChannel(ctx context.Context) (chanConn, error) {
	if c.wt == nil || c.wt.transport == TransportWebSocket || c.wt.transport == "" {
		return c.dialWS(ctx)
	}
	if c.wt.transport == TransportWebTransport {
		return c.dialWT(ctx)
	}
	c.wt.mu.Lock()
	recent := !c.wt.down.IsZero() && time.Since(c.wt.down) < wtDownFor
	c.wt.mu.Unlock()
	if !recent {
		conn, err := c.dialWT(ctx)
		if err == nil {
			return conn, nil
		}
		if ctx.Err() != nil {
			return nil, err
		}
		c.wt.mu.Lock()
		c.wt.down = time.Now()
		c.wt.mu.Unlock()
	}
	return c.dialWS(ctx)
}

// errNoWebTransport: the edge lists no WebTransport URL for its region.
var errNoWebTransport = errors.New("warren: the edge offers no WebTransport")

// dialWT opens a WebTransport session to the URL the edge lists for its region (GET /v1/regions) and the
// session's stream, within the dial timeout. A self-signed development certificate is accepted only when
// its SHA-256 is one the edge published (as a browser's serverCertificateHashes).
func (c *Client) dialWT(ctx context.Context) (chanConn, error) {
	dctx, cancel := context.WithTimeout(ctx, c.wt.dialTimeout)
	defer cancel()
	rs, err := c.Regions(dctx)
	if err != nil {
		return nil, fmt.Errorf("warren: webtransport: list regions: %w", err)
	}
	i := slices.IndexFunc(rs.Regions, func(r Region) bool { return r.Name == rs.Region })
	if i < 0 || rs.Regions[i].WebTransport == "" {
		return nil, errNoWebTransport
	}
	reg := rs.Regions[i]
	u, err := url.Parse(reg.WebTransport)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("warren: webtransport url %q: not an https URL", reg.WebTransport)
	}
	tr := &webtransport.Transport{
		TLSClientConfig: c.wtTLS(u.Hostname(), reg.CertificateHashes),
		QUICConfig: &quic.Config{
			EnableDatagrams: true, EnableStreamResetPartialDelivery: true,
			KeepAlivePeriod: 20 * time.Second, MaxIdleTimeout: time.Minute, HandshakeIdleTimeout: c.wt.dialTimeout,
		},
	}
	h := http.Header{}
	c.header(h)
	rsp, sess, err := tr.Dial(dctx, u.String(), h)
	if err != nil {
		if rsp != nil && rsp.StatusCode >= 300 {
			var body []byte
			if rsp.Body != nil {
				body, _ = io.ReadAll(io.LimitReader(rsp.Body, maxErrorBody))
			}
			return nil, wire.ReadHTTPError(rsp.StatusCode, body)
		}
		return nil, fmt.Errorf("warren: webtransport dial %s: %w", u.Host, err)
	}
	str, err := sess.OpenStreamSync(dctx)
	if err != nil {
		_ = sess.CloseWithError(wtconn.CodeAbnormal, "")
		return nil, fmt.Errorf("warren: webtransport: open the stream: %w", err)
	}
	return wtconn.New(sess, str, wtconn.Client, wire.MaxFrame+64), nil // the runner adds seq
}

// wtTLS is the TLS configuration of a WebTransport dial to host: with hashes, the leaf certificate must be
// one of them and valid now for at most 14 days (what browsers require of a pinned certificate); without,
// the usual verification, with the roots of the Client's HTTP transport when it sets some.
func (c *Client) wtTLS(host string, hashes []CertificateHash) *tls.Config {
	conf := &tls.Config{ServerName: host, MinVersion: tls.VersionTLS13}
	if t, ok := c.hc.Transport.(*http.Transport); ok && t.TLSClientConfig != nil {
		conf.RootCAs = t.TLSClientConfig.RootCAs
	}
	if len(hashes) == 0 {
		return conf
	}
	conf.InsecureSkipVerify = true // replaced by the pinned hash, checked below
	conf.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("warren: webtransport: no server certificate")
		}
		return checkPinned(cs.PeerCertificates[0], hashes, time.Now())
	}
	return conf
}

// checkPinned accepts leaf when its SHA-256 is one of hashes and it is valid at now for at most 14 days.
func checkPinned(leaf *x509.Certificate, hashes []CertificateHash, now time.Time) error {
	sum := sha256.Sum256(leaf.Raw)
	got := base64.StdEncoding.EncodeToString(sum[:])
	if !slices.ContainsFunc(hashes, func(h CertificateHash) bool { return h.Algorithm == "sha-256" && h.Value == got }) {
		return fmt.Errorf("warren: webtransport: the server certificate (sha-256 %s) is not one the edge published", got)
	}
	if now.Before(leaf.NotBefore) || now.After(leaf.NotAfter) || leaf.NotAfter.Sub(leaf.NotBefore) > 14*24*time.Hour {
		return fmt.Errorf("warren: webtransport: a pinned certificate must be valid now and for at most 14 days (%v to %v)", leaf.NotBefore, leaf.NotAfter)
	}
	return nil
}
