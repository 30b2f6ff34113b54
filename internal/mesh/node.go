package mesh

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/quic-go/quic-go"
)

// Defaults of Config.
const (
	DefaultKeepAlive         = 10 * time.Second
	DefaultIdleTimeout       = 30 * time.Second
	DefaultHandshakeTimeout  = 5 * time.Second
	DefaultHeaderTimeout     = 5 * time.Second
	DefaultMaxStreamsPerPeer = 4096
	DefaultMaxConnsPerPeer   = 4
	DefaultStreamWindow      = 1 << 20
	DefaultConnectionWindow  = 64 << 20
	// initialStreamWindow is a new stream's receive window before quic-go's auto-tuning grows it.
	initialStreamWindow = 64 << 10
	// MaxWindow bounds StreamWindow and ConnectionWindow.
	MaxWindow = 1 << 30
)

// Config configures New.
type Config struct {
	// Region is this edge's region; its certificate must name it.
	Region string
	// Certificate returns the certificate to present, leaf first, with its private key. It is called at every
	// handshake, so a renewed certificate is used from the next connection on.
	Certificate func() (*tls.Certificate, error)
	// Roots are the CAs a peer's certificate must chain to.
	Roots *x509.CertPool
	// KnownRegions says whether a region is part of the mesh: a peer naming any other is refused. It may be
	// called concurrently.
	KnownRegions func(region string) bool
	// Handler is called, on a goroutine of its own, for every stream a peer opens once its header is read;
	// from is the peer's region. ctx ends when the connection or the node does. The stream is closed when
	// Handler returns. Required to accept streams; a node without one only opens them.
	Handler func(ctx context.Context, from string, s *Stream)
	// Logger receives the node's logs; discarded when nil.
	Logger *slog.Logger
	// Metrics registers the warren_mesh_* metrics when set.
	Metrics prometheus.Registerer

	// KeepAlive is how often an otherwise idle connection sends a ping, keeping it (and NAT bindings) alive:
	// DefaultKeepAlive when zero, none when negative. quic-go pings at least every IdleTimeout/2.
	KeepAlive time.Duration
	// IdleTimeout closes a connection that has heard nothing from its peer for that long (DefaultIdleTimeout
	// when zero); the effective value is the smaller of both peers'.
	IdleTimeout time.Duration
	// HandshakeTimeout bounds a dial, including the handshake (DefaultHandshakeTimeout when zero).
	HandshakeTimeout time.Duration
	// HeaderTimeout bounds the wait for an accepted stream's header (DefaultHeaderTimeout when zero).
	HeaderTimeout time.Duration
	// MaxStreamsPerPeer is how many streams a peer may have open at once on one connection to this node
	// (DefaultMaxStreamsPerPeer when zero); its further Opens wait for one to end.
	MaxStreamsPerPeer int
	// MaxConnsPerPeer is how many connections of one region this node accepts at once
	// (DefaultMaxConnsPerPeer when zero); more are closed right after the handshake.
	MaxConnsPerPeer int
	// StreamWindow is the most a peer may send on one stream before this node's reader has read it, and
	// ConnectionWindow the most on all streams of one connection (DefaultStreamWindow, DefaultConnectionWindow
	// when zero; at most MaxWindow). They bound the memory a peer can make this node hold per stream and per
	// connection.
	StreamWindow, ConnectionWindow uint64
	// DialAddr is the local UDP address connections this node dials are sent from (":0", any, when "").
	DialAddr string
	// StatelessResetKey, when set, lets this node tell peers at once that a connection it no longer knows
	// (after a restart) is gone, rather than leaving them to find out at the idle timeout. It must be the same
	// across restarts and secret.
	StatelessResetKey *quic.StatelessResetKey
}

func (c *Config) validate() error {
	switch {
	case !ValidRegion(c.Region):
		return fmt.Errorf("%w: region %q is not 1 to %d characters of [a-z0-9-]", ErrConfig, truncate(c.Region), maxRegionLen)
	case c.Certificate == nil:
		return fmt.Errorf("%w: no certificate source", ErrConfig)
	case c.Roots == nil:
		return fmt.Errorf("%w: no roots", ErrConfig)
	case c.KnownRegions == nil:
		return fmt.Errorf("%w: no known regions", ErrConfig)
	case c.IdleTimeout < 0 || c.HandshakeTimeout < 0 || c.HeaderTimeout < 0:
		return fmt.Errorf("%w: negative timeout", ErrConfig)
	case c.MaxStreamsPerPeer < 0 || c.MaxConnsPerPeer < 0:
		return fmt.Errorf("%w: negative limit", ErrConfig)
	case c.StreamWindow > MaxWindow || c.ConnectionWindow > MaxWindow:
		return fmt.Errorf("%w: a receive window above %d bytes", ErrConfig, MaxWindow)
	}
	c.KeepAlive = cmp.Or(c.KeepAlive, DefaultKeepAlive)
	if c.KeepAlive < 0 {
		c.KeepAlive = 0
	}
	c.IdleTimeout = cmp.Or(c.IdleTimeout, DefaultIdleTimeout)
	c.HandshakeTimeout = cmp.Or(c.HandshakeTimeout, DefaultHandshakeTimeout)
	c.HeaderTimeout = cmp.Or(c.HeaderTimeout, DefaultHeaderTimeout)
	c.MaxStreamsPerPeer = cmp.Or(c.MaxStreamsPerPeer, DefaultMaxStreamsPerPeer)
	c.MaxConnsPerPeer = cmp.Or(c.MaxConnsPerPeer, DefaultMaxConnsPerPeer)
	c.StreamWindow = cmp.Or(c.StreamWindow, DefaultStreamWindow)
	c.ConnectionWindow = cmp.Or(c.ConnectionWindow, max(DefaultConnectionWindow, c.StreamWindow))
	c.DialAddr = cmp.Or(c.DialAddr, ":0")
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.ConnectionWindow < c.StreamWindow {
		return fmt.Errorf("%w: ConnectionWindow %d below StreamWindow %d", ErrConfig, c.ConnectionWindow, c.StreamWindow)
	}
	return nil
}

// Node is one edge's end of the mesh: it accepts streams from peer edges (Listen, Serve) and opens streams to
// them (Open) over one QUIC connection per peer. Safe for concurrent use.
type Node struct {
	cfg    Config
	log    *slog.Logger
	m      metrics
	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // every goroutine the node started

	mu         sync.Mutex
	closed     bool
	transports map[*quic.Transport]struct{} // listening ones
	dialTr     *quic.Transport
	dialPC     *net.UDPConn
	peers      map[peerKey]*peer
	conns      map[*quic.Conn]liveConn
	inbound    map[string]int // accepted connections by region
}

type liveConn struct {
	conn      *quic.Conn
	peer, dir string
}

// New makes a node; it neither listens nor dials until told to.
func New(cfg Config) (*Node, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &Node{
		cfg: cfg, log: cfg.Logger.With("region", cfg.Region), ctx: ctx, cancel: cancel,
		transports: map[*quic.Transport]struct{}{},
		peers:      map[peerKey]*peer{},
		conns:      map[*quic.Conn]liveConn{},
		inbound:    map[string]int{},
	}
	m, err := newMetrics(cfg.Metrics, n)
	if err != nil {
		cancel()
		return nil, err
	}
	n.m = m
	return n, nil
}

func (n *Node) quicConfig(incomingStreams int64) *quic.Config {
	return &quic.Config{
		HandshakeIdleTimeout: n.cfg.HandshakeTimeout,
		MaxIdleTimeout:       n.cfg.IdleTimeout,
		KeepAlivePeriod:      n.cfg.KeepAlive,
		// A stream starts with a small window, grown up to StreamWindow while its reader keeps up: a stream
		// whose reader stalls (a client that stops reading) holds little of the connection's window.
		InitialStreamReceiveWindow:     min(n.cfg.StreamWindow, initialStreamWindow),
		MaxStreamReceiveWindow:         n.cfg.StreamWindow,
		InitialConnectionReceiveWindow: min(n.cfg.ConnectionWindow, 512<<10),
		MaxConnectionReceiveWindow:     n.cfg.ConnectionWindow,
		MaxIncomingStreams:             incomingStreams,
		MaxIncomingUniStreams:          -1,
		// A Handler that aborts its stream at once still has the header's acknowledgement delivered
		// (RESET_STREAM_AT up to the reliable boundary set after it), so the opener sees a reset, not a refusal.
		EnableStreamResetPartialDelivery: true,
	}
}

// verifier is a tls.Config.VerifyConnection that checks the peer as verifyPeer does (want "" accepts any
// known region), counts a refusal and keeps its error in *got for the dialer.
func (n *Node) verifier(usage x509.ExtKeyUsage, want string, got *error) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		_, err := verifyPeer(cs.PeerCertificates, n.cfg.Roots, usage, time.Now(), n.cfg.KnownRegions, want)
		if err != nil {
			peer := peerUnknown
			if want != "" {
				peer = want // dialed, so a known region
			}
			if got != nil {
				*got = err // the dialer counts and logs it
			} else {
				n.m.fail(peer, Reason(err))
				n.log.Warn("mesh peer refused", "peer", peer, "reason", Reason(err), "err", err)
			}
		}
		return err
	}
}

func (n *Node) serverTLS() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		NextProtos: []string{alpn},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return n.cfg.Certificate()
		},
		// The chain and the region are checked by VerifyConnection against Roots, so that each refusal is
		// counted with its reason; a client without a certificate is refused there too (untrusted).
		ClientAuth:       tls.RequestClientCert,
		VerifyConnection: n.verifier(x509.ExtKeyUsageClientAuth, "", nil),
	}
}

func (n *Node) clientTLS(region string, got *error) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		NextProtos: []string{alpn},
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return n.cfg.Certificate()
		},
		ServerName: "warren-region-" + region,
		// The standard verification checks DNS names, which edge certificates need not carry: VerifyConnection
		// verifies the chain against Roots and the region URI instead, and it always runs.
		InsecureSkipVerify: true,
		VerifyConnection:   n.verifier(x509.ExtKeyUsageServerAuth, region, got),
	}
}

// add starts f on a goroutine the node waits for at Close; false when the node is closed.
func (n *Node) add(f func()) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return false
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		f()
	}()
	return true
}

// Listen binds a UDP socket on addr and serves peers on it until ctx ends or the node is closed. It answers
// the bound address (addr may have port 0).
func (n *Node) Listen(ctx context.Context, addr string) (net.Addr, error) {
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("mesh listen on %q: %w", addr, err)
	}
	pc, err := net.ListenUDP("udp", ua)
	if err != nil {
		return nil, fmt.Errorf("mesh listen on %q: %w", addr, err)
	}
	tr, ln, err := n.listen(pc)
	if err != nil {
		return nil, err
	}
	if !n.add(func() { n.serve(ctx, pc, tr, ln) }) {
		tr.Close()
		pc.Close()
		return nil, ErrClosed
	}
	return pc.LocalAddr(), nil
}

// Serve serves peers on pc until ctx ends or the node is closed, then closes pc and the connections accepted
// on it. It answers nil then, or why it could not start.
func (n *Node) Serve(ctx context.Context, pc *net.UDPConn) error {
	tr, ln, err := n.listen(pc)
	if err != nil {
		return err
	}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		tr.Close()
		pc.Close()
		return ErrClosed
	}
	n.wg.Add(1)
	n.mu.Unlock()
	defer n.wg.Done()
	n.serve(ctx, pc, tr, ln)
	return nil
}

func (n *Node) listen(pc *net.UDPConn) (*quic.Transport, *quic.Listener, error) {
	tr := &quic.Transport{Conn: pc, StatelessResetKey: n.cfg.StatelessResetKey}
	ln, err := tr.Listen(n.serverTLS(), n.quicConfig(int64(n.cfg.MaxStreamsPerPeer)))
	if err != nil {
		tr.Close()
		pc.Close()
		return nil, nil, fmt.Errorf("mesh listen on %s: %w", pc.LocalAddr(), err)
	}
	n.mu.Lock()
	n.transports[tr] = struct{}{}
	n.mu.Unlock()
	return tr, ln, nil
}

func (n *Node) serve(ctx context.Context, pc *net.UDPConn, tr *quic.Transport, ln *quic.Listener) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(n.ctx, cancel)
	defer stop()
	n.log.Info("mesh listening", "addr", pc.LocalAddr().String())
	for {
		conn, err := ln.Accept(ctx)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, quic.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
				n.log.Error("mesh accept failed", "err", err)
			}
			break
		}
		if !n.add(func() { n.serveConn(conn) }) {
			conn.CloseWithError(connCodeClosing, "node closing")
		}
	}
	// The connections accepted here end with the listener: tell their peers, then drop them.
	for _, lc := range n.liveConns() {
		if lc.dir == dirIn && lc.conn.LocalAddr().String() == pc.LocalAddr().String() {
			lc.conn.CloseWithError(connCodeClosing, "listener closing")
		}
	}
	n.mu.Lock()
	delete(n.transports, tr)
	n.mu.Unlock()
	ln.Close()
	tr.Close()
	pc.Close()
	n.log.Info("mesh listener stopped", "addr", pc.LocalAddr().String())
}

// serveConn accepts the streams of one connection a peer dialed.
func (n *Node) serveConn(conn *quic.Conn) {
	cs := conn.ConnectionState().TLS
	if len(cs.PeerCertificates) == 0 {
		conn.CloseWithError(connCodeNoRegion, "no certificate")
		return
	}
	region, err := RegionOf(cs.PeerCertificates[0]) // verified in the handshake; this only reads it
	if err != nil {
		conn.CloseWithError(connCodeNoRegion, "no region")
		return
	}
	n.mu.Lock()
	if n.inbound[region] >= n.cfg.MaxConnsPerPeer {
		n.mu.Unlock()
		n.m.fail(region, ReasonTooManyConns)
		conn.CloseWithError(connCodeTooManyConns, "too many connections")
		return
	}
	n.inbound[region]++
	n.conns[conn] = liveConn{conn, region, dirIn}
	n.mu.Unlock()
	log := n.log.With("peer", region, "remote", conn.RemoteAddr().String())
	log.Info("mesh peer connected")
	defer func() {
		n.mu.Lock()
		n.inbound[region]--
		if n.inbound[region] == 0 {
			delete(n.inbound, region)
		}
		delete(n.conns, conn)
		n.mu.Unlock()
		log.Info("mesh peer disconnected", "cause", context.Cause(conn.Context()))
	}()
	for {
		qs, err := conn.AcceptStream(conn.Context())
		if err != nil {
			return
		}
		if n.cfg.Handler == nil || !n.add(func() { n.serveStream(conn, region, qs) }) {
			qs.CancelRead(streamCodeClosing)
			qs.CancelWrite(streamCodeClosing)
		}
	}
}

// serveStream reads an accepted stream's header, acknowledges it and runs the Handler.
func (n *Node) serveStream(conn *quic.Conn, region string, qs *quic.Stream) {
	qs.SetReadDeadline(time.Now().Add(n.cfg.HeaderTimeout))
	h, err := ReadHeader(qs)
	if err != nil {
		code := refusalCode(err)
		qs.CancelRead(code)
		qs.CancelWrite(code)
		n.m.accepted.WithLabelValues(region, ReasonBadHeader).Inc()
		n.m.fail(region, ReasonBadHeader)
		n.log.Warn("mesh stream refused", "peer", region, "err", err)
		return
	}
	qs.SetReadDeadline(time.Time{})
	qs.SetWriteDeadline(time.Now().Add(n.cfg.HeaderTimeout))
	if _, err := qs.Write([]byte{0}); err != nil {
		qs.CancelRead(streamCodeCanceled)
		qs.CancelWrite(streamCodeCanceled)
		n.m.accepted.WithLabelValues(region, ReasonOther).Inc()
		return
	}
	qs.SetReliableBoundary()
	qs.SetWriteDeadline(time.Time{})
	n.m.accepted.WithLabelValues(region, reasonOK).Inc()
	s := newStream(qs, conn, region, dirIn, h, &n.m)
	defer s.Close()
	n.cfg.Handler(conn.Context(), region, s)
}

// Open opens a stream to the edge of region at addr (host:port of its mesh listener), dialing a connection to
// it if there is none (or the one there was has died), and waits until the peer has accepted the stream's
// header. All Opens to one peer share one connection. The error wraps ErrUnknownRegion, ErrRegionMismatch,
// ErrUntrusted, ErrHandshakeRefused, ErrDial, ErrStreamRefused, ErrClosed, or ctx's error.
func (n *Node) Open(ctx context.Context, region, addr string, h Header) (*Stream, error) {
	return n.OpenWith(ctx, region, addr, h, nil)
}

// OpenWith is Open sending early, the stream's first bytes, in the same write as its header, without
// waiting for the peer's acknowledgement: a forwarded request's grant and head reach the peer one round
// trip sooner. A refused stream drops them unread (the peer reads nothing past a header it refuses, and
// the stream is reset).
func (n *Node) OpenWith(ctx context.Context, region, addr string, h Header, early []byte) (*Stream, error) {
	s, err := n.open(ctx, region, addr, h, early)
	if err != nil {
		outcome := Reason(err)
		if ctx.Err() != nil && outcome == ReasonOther {
			outcome = reasonCanceled
		}
		peer := region
		if !ValidRegion(region) || !n.cfg.KnownRegions(region) {
			peer = peerUnknown
		}
		n.m.opened.WithLabelValues(peer, outcome).Inc()
		return nil, fmt.Errorf("mesh open to %s at %s: %w", truncate(region), truncate(addr), err)
	}
	n.m.opened.WithLabelValues(region, reasonOK).Inc()
	return s, nil
}

func (n *Node) open(ctx context.Context, region, addr string, h Header, early []byte) (*Stream, error) {
	if !ValidRegion(region) || !n.cfg.KnownRegions(region) {
		return nil, fmt.Errorf("%w: %q", ErrUnknownRegion, truncate(region))
	}
	hdr, err := AppendHeader(nil, h)
	if err != nil {
		return nil, err
	}
	hdr = append(hdr, early...)
	p, err := n.peer(region, addr)
	if err != nil {
		return nil, err
	}
	for retried := false; ; retried = true {
		conn, fresh, err := p.get(ctx)
		if err != nil {
			return nil, err
		}
		s, err := n.openOn(ctx, conn, region, hdr, h)
		if err == nil {
			s.sent.Add(float64(len(early)))
			return s, nil
		}
		if ctx.Err() != nil || errors.Is(err, ErrStreamRefused) {
			return nil, err
		}
		// The connection died under us (every error of a closed quic-go connection is a net.ErrClosed). One
		// that was already there may have died long ago, unnoticed (say the peer restarted): dial once more.
		// One just dialed failing is the answer.
		p.drop(conn)
		if !fresh && !retried {
			n.log.Info("mesh connection gone, redialing", "peer", region, "err", err)
			continue
		}
		err = connErr(err)
		n.m.fail(region, Reason(err))
		return nil, err
	}
}

// openOn opens a stream on conn, writes its header (and early data) and waits for the peer's acknowledgement.
func (n *Node) openOn(ctx context.Context, conn *quic.Conn, region string, hdr []byte, h Header) (*Stream, error) {
	qs, err := conn.OpenStreamSync(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { qs.SetDeadline(time.Unix(1, 0)) })
	var ack [1]byte
	_, err = qs.Write(hdr)
	if err == nil {
		_, err = io.ReadFull(qs, ack[:])
	}
	if !stop() {
		qs.CancelRead(streamCodeCanceled)
		qs.CancelWrite(streamCodeCanceled)
		return nil, ctx.Err()
	}
	if err != nil {
		qs.CancelRead(streamCodeCanceled)
		qs.CancelWrite(streamCodeCanceled)
		var se *quic.StreamError
		if errors.As(err, &se) && se.Remote {
			if why := refusal(se.ErrorCode); why != nil {
				err = fmt.Errorf("%w: %w", ErrStreamRefused, why)
			} else {
				err = fmt.Errorf("%w: %w", ErrStreamRefused, err)
			}
			n.m.fail(region, ReasonStreamRefused)
			return nil, err
		}
		return nil, err
	}
	if ack[0] != 0 {
		qs.CancelRead(streamCodeCanceled)
		qs.CancelWrite(streamCodeCanceled)
		n.m.fail(region, ReasonStreamRefused)
		return nil, fmt.Errorf("%w: acknowledgement %d", ErrStreamRefused, ack[0])
	}
	return newStream(qs, conn, region, dirOut, h, &n.m), nil
}

// connErr says why a connection failed, from the error quic-go gave: ErrHandshakeRefused when the peer closed
// it over our certificate (a TLS alert) or refused it after the handshake, ErrDial otherwise.
func connErr(err error) error {
	var te *quic.TransportError
	if errors.As(err, &te) && te.Remote && te.ErrorCode.IsCryptoError() {
		return fmt.Errorf("%w: %w", ErrHandshakeRefused, err)
	}
	var ae *quic.ApplicationError
	if errors.As(err, &ae) && ae.Remote && ae.ErrorCode != connCodeClosing {
		return fmt.Errorf("%w: %w", ErrHandshakeRefused, err)
	}
	return fmt.Errorf("%w: %w", ErrDial, err)
}

// liveConns lists the connections open now, both ways.
func (n *Node) liveConns() []liveConn {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]liveConn, 0, len(n.conns))
	for _, lc := range n.conns {
		out = append(out, lc)
	}
	return out
}

// Close closes every connection (telling peers), stops the listeners and waits, until ctx ends, for the
// Handlers to return. Opens fail with ErrClosed from now on.
func (n *Node) Close(ctx context.Context) error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true // the listening transports close with their serve loops (n.cancel below)
	dialTr, dialPC := n.dialTr, n.dialPC
	n.mu.Unlock()
	for _, lc := range n.liveConns() {
		lc.conn.CloseWithError(connCodeClosing, "node closing")
	}
	n.cancel()
	if dialTr != nil {
		dialTr.Close()
		dialPC.Close()
	}
	done := make(chan struct{})
	go func() {
		n.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("close mesh node: handlers still running: %w", ctx.Err())
	}
}

// dialTransport is the transport connections are dialed from, bound on first use.
func (n *Node) dialTransport() (*quic.Transport, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, ErrClosed
	}
	if n.dialTr != nil {
		return n.dialTr, nil
	}
	ua, err := net.ResolveUDPAddr("udp", n.cfg.DialAddr)
	if err != nil {
		return nil, fmt.Errorf("mesh dial address %q: %w", n.cfg.DialAddr, err)
	}
	pc, err := net.ListenUDP("udp", ua)
	if err != nil {
		return nil, fmt.Errorf("mesh dial address %q: %w", n.cfg.DialAddr, err)
	}
	n.dialTr = &quic.Transport{Conn: pc, StatelessResetKey: n.cfg.StatelessResetKey}
	n.dialPC = pc
	return n.dialTr, nil
}

// resolve turns host:port into a UDP address, looking the host up under ctx.
func resolve(ctx context.Context, addr string) (*net.UDPAddr, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	pn, err := net.DefaultResolver.LookupPort(ctx, "udp", port)
	if err != nil {
		return nil, err
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		ips, lerr := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		if lerr != nil {
			return nil, lerr
		}
		if len(ips) == 0 {
			return nil, fmt.Errorf("no address for %q", host)
		}
		ip = ips[0]
	}
	return net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip.Unmap(), uint16(pn))), nil
}
