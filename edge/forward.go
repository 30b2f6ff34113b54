package edge

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/internal/httpx"
	"github.com/warren-mesh/warren/internal/mesh"
	"github.com/warren-mesh/warren/internal/regions"
	"github.com/warren-mesh/warren/internal/token"
	"github.com/warren-mesh/warren/internal/wire"
)

// Forwarding over the mesh (docs/ARCHITECTURE.md#regions): when the scheduler answers that another region
// holds the user (an unavailable error with details.region), the edge the client reached, having admitted
// the connection or request and taken its session lease, opens a mesh stream to a live edge of that region
// and relays over it. The grant it admitted travels first on the stream; the receiving edge (ServeMesh)
// trusts it because the peer proved, with its mesh certificate, to be an edge of a known region, and it
// neither admits nor leases again: it finds its region's runner for the user and relays to it with that
// grant.

// Mesh opens streams to the edges of other regions: a *mesh.Node.
type Mesh interface {
	// OpenWith opens a stream whose first bytes, early, go with its header (mesh.Node.OpenWith).
	OpenWith(ctx context.Context, region, addr string, h mesh.Header, early []byte) (*mesh.Stream, error)
}

// meshStream is what the edge needs of a *mesh.Stream.
type meshStream interface {
	net.Conn
	CloseWrite() error
	Abort()
}

// Timeouts of forwarding: opening a stream to one edge (dial included) and writing the grant, reading a
// forwarded stream's grant, sending a close frame.
const (
	forwardOpenTimeout = 5 * time.Second
	grantReadTimeout   = 5 * time.Second
	closeWriteTimeout  = 2 * time.Second
	// peerCacheTTL is how long a read of the region directory answers for forwarding and KnownRegion.
	peerCacheTTL = 2 * time.Second
	// peerMissRefresh: an unknown region makes KnownRegion read the directory again at most this often.
	peerMissRefresh = time.Second
)

// ownerRegion is the region an Ensure error says holds the user: the details.region of an unavailable
// refusal (docs/PROTOCOL.md#errors), "" for any other error.
func ownerRegion(err error) string {
	var we *wire.Error
	if errors.As(err, &we) && we.Code == wire.Unavailable {
		if r, ok := we.Details["region"].(string); ok && regions.ValidRegion(r) {
			return r
		}
	}
	return ""
}

// ownedElsewhere is the refusal a client gets when the user's region cannot be reached through this edge: it
// names the region, so clients can connect there themselves.
func ownedElsewhere(region string, cause error) *wire.Error {
	return wire.Wrap(wire.Unavailable, cause, "this user's sandbox is served in region "+region+", which this edge cannot reach now; connect there").
		WithDetails(map[string]any{"region": region})
}

// peers caches the region directory for forwarding, for the mesh's KnownRegions (inside every inbound
// handshake) and for GET /v1/regions.
type peers struct {
	dir  regions.Directory
	self string

	mu      sync.Mutex
	edges   []regions.Edge
	at      time.Time // of the last successful read
	tried   time.Time // of the last read started
	err     error     // of the last read, when it failed
	reading bool      // a read is under way
}

// list answers the directory's edges, read again when the last read is older than maxAge. One read runs at
// a time, outside the lock: meanwhile, and for peerMissRefresh after a failed read, callers get the last
// list (with the failure), so a slow or unreachable directory never queues them behind each other.
func (p *peers) list(ctx context.Context, maxAge time.Duration) ([]regions.Edge, error) {
	p.mu.Lock()
	if p.dir == nil {
		p.mu.Unlock()
		return nil, errors.New("no region directory")
	}
	now := time.Now()
	fresh := !p.at.IsZero() && now.Sub(p.at) < maxAge
	backingOff := p.err != nil && now.Sub(p.tried) < peerMissRefresh
	if fresh || p.reading || backingOff {
		edges, err := p.edges, p.err
		if fresh {
			err = nil
		} else if err == nil && p.reading && p.at.IsZero() {
			err = errors.New("the region directory is being read")
		}
		p.mu.Unlock()
		return edges, err
	}
	p.reading, p.tried = true, now
	p.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	edges, err := p.dir.Edges(rctx)
	cancel()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reading, p.err = false, err
	if err != nil {
		return p.edges, err
	}
	p.edges, p.at = edges, time.Now()
	return edges, nil
}

// known reports whether region has announced edges (this edge's region always is).
func (p *peers) known(region string) bool {
	if region == p.self {
		return true
	}
	has := func(edges []regions.Edge) bool {
		return slices.ContainsFunc(edges, func(e regions.Edge) bool { return e.Region == region })
	}
	edges, _ := p.list(context.Background(), peerCacheTTL)
	if has(edges) {
		return true
	}
	p.mu.Lock()
	recent := time.Since(p.tried) < peerMissRefresh
	p.mu.Unlock()
	if recent {
		return false
	}
	edges, _ = p.list(context.Background(), 0) // a region that just appeared
	return has(edges)
}

// KnownRegion reports whether region is part of the mesh: any region with edges in the directory (read at
// most every 2 s; an unknown name reads it again at most every second). It is the mesh.Config.KnownRegions
// of this edge's node.
func (e *Edge) KnownRegion(region string) bool { return e.peers.known(region) }

// openForward opens a stream of kind to a live, non-draining edge of a.owner, trying each in a random order,
// and sends on it the grant followed by next (a forwarded request's head, or nothing), in the same write as
// the stream's header. None reachable: unavailable naming the region.
func (e *Edge) openForward(ctx context.Context, a *admitted, kind mesh.Kind, next []byte) (meshStream, error) {
	kl := string(kind)
	cands, err := e.forwardTargets(ctx, a, kl)
	if err != nil {
		return nil, err
	}
	frame, err := e.grantFrame(a, kl, nil)
	if err != nil {
		return nil, err
	}
	frame = append(frame, next...)
	h := mesh.Header{Kind: kind, RequestID: httpx.RequestID(ctx), Issuer: a.claims.Issuer, User: a.claims.Subject}
	s, _, err := e.openTo(ctx, a, kl, cands, h, frame)
	return s, err
}

// forwardTargets lists the live, non-draining edges of a.owner with a mesh address, in a random order. None:
// unavailable naming the region.
func (e *Edge) forwardTargets(ctx context.Context, a *admitted, kl string) ([]regions.Edge, error) {
	edges, err := e.peers.list(ctx, peerCacheTTL)
	if err != nil && len(edges) == 0 {
		e.m.forwarded.WithLabelValues(kl, a.owner, "no_edge").Inc()
		return nil, ownedElsewhere(a.owner, err)
	}
	var cands []regions.Edge
	for _, ed := range edges {
		if ed.Region == a.owner && !ed.Draining && ed.Mesh != "" {
			cands = append(cands, ed)
		}
	}
	if len(cands) == 0 {
		e.m.forwarded.WithLabelValues(kl, a.owner, "no_edge").Inc()
		a.log.Warn("no live edge of the user's region to forward to", "owner", a.owner)
		return nil, ownedElsewhere(a.owner, errors.New("no live edge announced"))
	}
	rand.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
	return cands, nil
}

// grantFrame appends the frame of the grant a admitted to b.
func (e *Edge) grantFrame(a *admitted, kl string, b []byte) ([]byte, error) {
	b, err := appendGrant(b, a.grant(a.budget))
	if err != nil {
		e.m.forwarded.WithLabelValues(kl, a.owner, "error").Inc()
		return nil, wire.Wrap(wire.Internal, err, "encode the grant")
	}
	return b, nil
}

// openTo opens a stream with header h and first bytes early to the first of cands that takes it, and says
// which. None: unavailable naming the region.
func (e *Edge) openTo(ctx context.Context, a *admitted, kl string, cands []regions.Edge, h mesh.Header, early []byte) (*mesh.Stream, regions.Edge, error) {
	var last error
	for _, ed := range cands {
		octx, cancel := context.WithTimeout(ctx, forwardOpenTimeout)
		s, err := e.cfg.Mesh.OpenWith(octx, a.owner, ed.Mesh, h, early)
		cancel()
		if err == nil {
			e.m.forwarded.WithLabelValues(kl, a.owner, "ok").Inc()
			a.log.Info("forwarding over the mesh", "owner", a.owner, "peer_edge", ed.ID)
			return s, ed, nil
		}
		last = err
		a.log.Warn("mesh forward failed; trying the next edge", "owner", a.owner, "peer_edge", ed.ID, "err", err)
		if ctx.Err() != nil {
			break
		}
	}
	e.m.forwarded.WithLabelValues(kl, a.owner, "mesh_failed").Inc()
	return nil, regions.Edge{}, ownedElsewhere(a.owner, last)
}

// sendExchange sends a forwarded request as an exchange (meshpool.go) to an edge of a.owner: on a kept
// stream to one of them when there is one and fresh is false, else on a stream opened for it. first is
// the exchange's first bytes after the per-request header and the grant (the request's head, and its body
// when whole); whole says they are all of the request, sent with its end. It answers the exchange and
// whether its stream was a kept one.
func (e *Edge) sendExchange(ctx context.Context, a *admitted, first []byte, whole, fresh bool) (*exchange, bool, error) {
	const kl = "http"
	cands, err := e.forwardTargets(ctx, a, kl)
	if err != nil {
		return nil, false, err
	}
	b, err := mesh.AppendHeader(nil, mesh.Header{Kind: mesh.KindHTTP, RequestID: httpx.RequestID(ctx), Issuer: a.claims.Issuer, User: a.claims.Subject})
	if err != nil {
		e.m.forwarded.WithLabelValues(kl, a.owner, "error").Inc()
		return nil, false, wire.Wrap(wire.Internal, err, "encode the exchange header")
	}
	if b, err = e.grantFrame(a, kl, b); err != nil {
		return nil, false, err
	}
	b = append(b, first...)
	if !fresh {
		for _, ed := range cands {
			s := e.mpool.get(ed.Mesh)
			if s == nil {
				continue
			}
			x := &exchange{s: s, pool: e.mpool, addr: ed.Mesh}
			a.log.Info("forwarding over the mesh", "owner", a.owner, "peer_edge", ed.ID, "kept_stream", true)
			// A failed write is learned by the answer's read, which tells a stream the peer ended idle.
			if whole {
				_ = x.writeAll(b)
			} else {
				_, _ = x.Write(b)
			}
			e.m.forwarded.WithLabelValues(kl, a.owner, "ok").Inc()
			return x, true, nil
		}
	}
	// A new stream: the exchange's first chunk (and its end) go with the stream's header.
	x := &exchange{pool: e.mpool, once: !whole}
	var early []byte
	for len(b) > 0 {
		c := b[:min(len(b), maxChunk)]
		early = binary.BigEndian.AppendUint32(early, uint32(len(c)))
		early = append(early, c...)
		b = b[len(c):]
	}
	if whole {
		early = binary.BigEndian.AppendUint32(early, 0)
		x.wended = true
	}
	s, ed, err := e.openTo(ctx, a, kl, cands, mesh.Header{Kind: mesh.KindRequests}, early)
	if err != nil {
		return nil, false, err
	}
	x.s, x.addr = s, ed.Mesh
	return x, false, nil
}

// msgConn is one side of an agent channel relay: a WebSocket (*websocket.Conn) or a mesh stream (msgStream).
type msgConn interface {
	Read(ctx context.Context) (websocket.MessageType, []byte, error)
	Write(ctx context.Context, typ websocket.MessageType, data []byte) error
	Close(code websocket.StatusCode, reason string) error
	CloseNow() error
}

// msgStream carries WebSocket messages over a mesh stream, one frame per message (readWS): a read holds one
// message, a write blocks while the peer's window is full, so nothing queues beyond the stream's flow control.
// A close frame read is a websocket.CloseError.
type msgStream struct {
	s   meshStream
	wmu sync.Mutex
	buf []byte
}

var _ msgConn = (*msgStream)(nil)

func (m *msgStream) Read(ctx context.Context) (websocket.MessageType, []byte, error) {
	stop := context.AfterFunc(ctx, func() { _ = m.s.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	return readWS(m.s)
}

func (m *msgStream) Write(ctx context.Context, typ websocket.MessageType, data []byte) error {
	t := byte(wsText)
	if typ == websocket.MessageBinary {
		t = wsBinary
	}
	return m.write(ctx, func(b []byte) []byte { return appendWS(b, t, data) })
}

func (m *msgStream) write(ctx context.Context, frame func([]byte) []byte) error {
	m.wmu.Lock()
	defer m.wmu.Unlock()
	stop := context.AfterFunc(ctx, func() { _ = m.s.SetWriteDeadline(time.Unix(1, 0)) })
	defer stop()
	m.buf = frame(m.buf[:0])
	_, err := m.s.Write(m.buf)
	if cap(m.buf) > 64<<10 {
		m.buf = nil // keep no large message's buffer
	}
	return err
}

// Close sends a close frame (bounded by closeWriteTimeout), then closes the stream.
func (m *msgStream) Close(code websocket.StatusCode, reason string) error {
	ctx, cancel := context.WithTimeout(context.Background(), closeWriteTimeout)
	defer cancel()
	err := m.write(ctx, func(b []byte) []byte { return appendWSClose(b, code, reason) })
	_ = m.s.Close()
	return err
}

func (m *msgStream) CloseNow() error { return m.s.Close() }

// meshTransport is the http.RoundTripper of a request forwarded to a.owner: one mesh stream per request,
// the head and the body streamed on it, the response's head and body streamed back.
type meshTransport struct {
	e    *Edge
	a    *admitted
	body *bodyGuard // the client's request body (nil without one)
	// bodyDone is closed when the request body has been sent (or given up): the handler waits for it.
	bodyDone chan struct{}
}

func (t *meshTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	head := reqHead{Method: req.Method, Path: withoutToken(req.URL).RequestURI(), Header: req.Header, ContentLength: req.ContentLength}
	if req.Body == nil || req.Body == http.NoBody {
		head.ContentLength = 0
	}
	exchanged := !isUpgrade(req.Header) // else a stream of its own, which the upgraded connection's bytes follow
	var frame []byte
	var err error
	if exchanged {
		frame, err = appendExchangeHead(nil, head)
	} else {
		frame, err = appendHead(nil, head)
	}
	if err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		if errors.Is(err, errBadFrame) {
			return nil, wire.Wrap(wire.InvalidArgument, err, "request headers too large")
		}
		return nil, wire.Wrap(wire.Internal, err, "encode the request head")
	}
	if exchanged {
		return t.roundTripExchange(req, head, frame)
	}
	s, err := t.e.openForward(ctx, t.a, mesh.KindHTTP, frame) // the head goes with the stream's header
	if err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	stop := context.AfterFunc(ctx, s.Abort)
	t.sendBody(s, req, head.ContentLength, true)
	var rh respHead
	if err := readHead(s, &rh); err != nil {
		stop()
		s.Abort()
		return nil, wire.Wrap(wire.Unavailable, err, "the forwarded request failed")
	}
	cl := int64(-1)
	if v := rh.Header.Get("Content-Length"); v != "" {
		cl = parseLen(v)
	}
	var body io.ReadCloser = &streamBody{s: s, stop: stop, left: -1}
	if rh.Status == http.StatusSwitchingProtocols {
		body = upgradedBody{body.(*streamBody)}
		cl = 0 // as net/http has it for a 101: what follows is the upgraded connection, not a body
	}
	return &http.Response{
		Status: http.StatusText(rh.Status), StatusCode: rh.Status, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: rh.Header, Body: body, ContentLength: cl, Request: req,
	}, nil
}

// sendBody copies req's body (of length n, -1 unknown) to s on a goroutine of its own, then half-closes s
// unless upgrade (an upgraded connection's bytes follow: upgradedBody); bodyDone is closed when it is done.
func (t *meshTransport) sendBody(s meshStream, req *http.Request, n int64, upgrade bool) {
	t.bodyDone = make(chan struct{})
	go func() {
		defer close(t.bodyDone)
		if n != 0 {
			br := &errReader{r: req.Body}
			_, err := io.Copy(s, br)
			req.Body.Close()
			if br.err != nil {
				s.Abort() // the client's body was cut short: the peer must not take it as complete
				return
			}
			if err != nil {
				return // the peer stopped reading (it answered early); its answer is still read
			}
		}
		if !upgrade {
			_ = s.CloseWrite()
		}
	}()
}

// roundTripExchange forwards a request that is not an upgrade as an exchange (meshpool.go): on a kept
// stream when its body is held whole (none, or at most smallBody), so that it can go again on a new stream
// when the kept one turns out ended by the peer before it (errIdleClosed) or, for an idempotent request,
// failed before any answer. A body streamed from the client goes on a stream of its own, ended after the
// exchange: its answer may have come before the body's end, which the serving edge then drains only up to
// drainLimit, resetting the stream past it, and a reset kept stream would fail the next request.
func (t *meshTransport) roundTripExchange(req *http.Request, head reqHead, frame []byte) (*http.Response, error) {
	ctx := req.Context()
	whole := head.ContentLength == 0
	if head.ContentLength > 0 && head.ContentLength <= smallBody {
		n := len(frame)
		frame = append(frame, make([]byte, head.ContentLength)...)
		_, err := io.ReadFull(req.Body, frame[n:])
		if err != nil {
			req.Body.Close()
			return nil, wire.Wrap(wire.InvalidArgument, err, "the request body was cut short")
		}
		whole = true
	}
	if whole && req.Body != nil {
		req.Body.Close()
	}
	for attempt := 0; ; attempt++ {
		x, kept, err := t.e.sendExchange(ctx, t.a, frame, whole, attempt > 0 || !whole)
		if err != nil {
			if !whole {
				req.Body.Close()
			}
			return nil, err
		}
		stop := context.AfterFunc(ctx, x.Abort)
		if !whole {
			t.sendBody(x, req, head.ContentLength, false)
		}
		var rh respHead
		if err := readExchangeHead(x, &rh); err != nil {
			stop()
			x.Abort()
			if ctx.Err() == nil && kept && attempt == 0 && (x.idleEnded || idempotent(req)) {
				t.a.log.Info("kept mesh stream failed before the answer; sending the request again", "err", err)
				continue
			}
			return nil, wire.Wrap(wire.Unavailable, err, "the forwarded request failed")
		}
		if rh.Status == http.StatusSwitchingProtocols {
			stop()
			x.Abort()
			return nil, wire.Errorf(wire.Unavailable, "the forwarded request was answered with a protocol switch it did not ask for")
		}
		cl := int64(-1)
		if v := rh.Header.Get("Content-Length"); v != "" {
			cl = parseLen(v)
		}
		return &http.Response{
			Status: http.StatusText(rh.Status), StatusCode: rh.Status, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: rh.Header, Body: &streamBody{s: x, stop: stop, left: cl}, ContentLength: cl, Request: req,
		}, nil
	}
}

// errReader remembers the error of its reader other than io.EOF.
type errReader struct {
	r   io.Reader
	err error
}

func (e *errReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && err != io.EOF {
		e.err = err
	}
	return n, err
}

func parseLen(v string) int64 {
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' || n > (1<<62)/10 {
			return -1
		}
		n = n*10 + int64(c-'0')
	}
	return n
}

// streamBody is a forwarded response's body: the stream (or exchange) up to its end. With left, the length
// its head announced, it ends there, with its last bytes: the exchange's end is read then to keep the
// stream, but the answer is whole without it (a peer gone just after its last bytes does not cut an answer
// the client has whole).
type streamBody struct {
	s    meshStream
	stop func() bool
	once sync.Once
	left int64 // bytes to come; -1 unknown
}

func (b *streamBody) Read(p []byte) (int, error) {
	if b.left == 0 { // an empty answer
		b.readEnd()
	}
	if b.left == -2 {
		return 0, io.EOF
	}
	if b.left > 0 && int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.s.Read(p)
	if b.left > 0 {
		if b.left -= int64(n); b.left == 0 && err == nil {
			b.readEnd()
			err = io.EOF
		}
	}
	return n, err
}

// readEnd reads what follows an answer's announced length: the exchange's end, normally there already, within
// closeWriteTimeout (else, or if anything else is there, the exchange is not complete and its stream is not
// kept).
func (b *streamBody) readEnd() {
	_ = b.s.SetReadDeadline(time.Now().Add(closeWriteTimeout))
	var end [1]byte
	_, _ = b.s.Read(end[:])
	b.left = -2
}

func (b *streamBody) Close() error {
	b.once.Do(func() {
		if !b.stop() { // the request's context ended: the stream is (being) aborted
			b.s.Abort()
			return
		}
		_ = b.s.Close()
	})
	return nil
}

// ServeMesh serves a stream an edge of region from forwarded to this edge: the mesh.Config.Handler of this
// edge's node. It reads the grant (a malformed one aborts the stream), finds this region's runner of the
// user and relays the agent channel or the request to it under that grant, without admitting or leasing:
// the forwarding edge did.
func (e *Edge) ServeMesh(ctx context.Context, from string, s *mesh.Stream) {
	switch s.Header().Kind {
	case mesh.KindRequests:
		e.serveExchanges(ctx, from, s)
		return
	case mesh.KindHTTP:
		// A forwarded request's work ends when its peer gives up on the stream (the client behind the
		// forwarding edge went away), not when the mesh connection does: the runner request is cancelled
		// as a direct one would be. (An agent channel ends by its own close frames and read errors.)
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(s.Context(), cancel)()
	}
	e.serveMesh(ctx, from, s, s.Header())
}

// serveExchanges serves the exchanges of a KindRequests stream (meshpool.go) one after the other, each under
// the header and grant it carries, as a stream of its own would be. The stream ends quietly when the
// forwarding edge ends it (or leaves it idle for meshServeIdleTimeout) between two exchanges, and is reset
// when an exchange fails or is malformed.
func (e *Edge) serveExchanges(ctx context.Context, from string, s *mesh.Stream) {
	for {
		x := &exchange{s: s}
		started, err := x.await(time.Duration(e.meshIdle.Load()))
		if !started {
			if err != nil {
				s.Abort()
			}
			return // the node closes the stream: the forwarding edge reads its end
		}
		_ = s.SetReadDeadline(time.Now().Add(grantReadTimeout))
		h, err := mesh.ReadHeader(x)
		if err == nil && h.Kind != mesh.KindHTTP {
			err = fmt.Errorf("an exchange of kind %q", h.Kind)
		}
		if err != nil {
			e.m.forwardServed.WithLabelValues("http", from, "bad_grant").Inc()
			e.log.Warn("forwarded exchange refused", "from_region", from, "err", err)
			s.Abort()
			return
		}
		// The exchange's work ends when the forwarding edge gives up on it (it resets the stream).
		xctx, cancel := context.WithCancel(ctx)
		stop := context.AfterFunc(s.Context(), cancel)
		e.serveMesh(xctx, from, x, h)
		stop()
		cancel()
		if !x.reusable {
			s.Abort() // never a quiet end after an exchange began: the forwarding edge would send it again
			return
		}
	}
}

func (e *Edge) serveMesh(ctx context.Context, from string, s meshStream, h mesh.Header) {
	kl := string(h.Kind)
	log := e.log.With("request_id", h.RequestID, "from_region", from, "issuer", h.Issuer, "user", h.User, "forwarded", true)
	_ = s.SetReadDeadline(time.Now().Add(grantReadTimeout))
	g, err := readGrant(s, h)
	if err != nil {
		e.m.forwardServed.WithLabelValues(kl, from, "bad_grant").Inc()
		log.Warn("forwarded stream refused", "err", err)
		s.Abort()
		return
	}
	_ = s.SetReadDeadline(time.Time{})
	id := h.RequestID
	if !httpx.ValidRequestID(id) {
		id = "mesh"
	}
	ctx = httpx.WithRequestID(ctx, id)
	a := forwardedAdmission(g, log)
	entry, ensureErr := e.cfg.Sandboxes.Ensure(ctx, a.sandboxRequest())
	if ensureErr == nil {
		a.entry, a.log = entry, a.log.With("epoch", entry.Epoch)
	}
	switch h.Kind {
	case mesh.KindWebSocket:
		e.serveForwardedWS(ctx, from, s, a, ensureErr)
	case mesh.KindHTTP:
		e.serveForwardedHTTP(ctx, from, s, a, ensureErr)
	default:
		s.Abort()
	}
}

// forwardedAdmission is the admission another region's edge made, as its grant says.
func forwardedAdmission(g wire.Grant, log *slog.Logger) *admitted {
	return &admitted{
		claims:  &token.Claims{Issuer: g.Issuer, Subject: g.User},
		account: billing.Account{Issuer: g.Issuer, User: g.User, Window: billing.Window(g.Window), WindowStart: g.WindowStart},
		budget:  billing.Budget{AIMicros: g.AIMicros, ComputeSeconds: g.ComputeSeconds},
		fixed:   &g,
		log:     log,
	}
}

// serveForwardedWS relays a forwarded agent channel between the stream and the runner: messages as they
// are (the forwarding edge validated and rate-limited them), close codes and reasons both ways.
func (e *Edge) serveForwardedWS(ctx context.Context, from string, s meshStream, a *admitted, ensureErr error) {
	c := &msgStream{s: s}
	defer c.CloseNow()
	if ensureErr != nil {
		e.m.forwardServed.WithLabelValues("ws", from, "refused").Inc()
		e.closeWith(ctx, c, ensureErr)
		return
	}
	rc, err := e.dialRunner(ctx, a)
	if err != nil {
		e.m.forwardServed.WithLabelValues("ws", from, "refused").Inc()
		e.closeWith(ctx, c, err)
		return
	}
	e.m.forwardServed.WithLabelValues("ws", from, "ok").Inc()
	a.log.Info("forwarded agent channel open")
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer e.endOnShutdown(cancel, c)()
	done := make(chan struct{})
	go func() { // runner → stream
		defer close(done)
		e.fromRunner(ctx, cancel, c, rc, a)
	}()
	for { // stream → runner
		typ, data, err := c.Read(ctx)
		if err != nil {
			if st := websocket.CloseStatus(err); st != -1 {
				_ = rc.Close(st, closeReasonOf(err))
			} else if ctx.Err() == nil {
				a.log.Info("forwarding edge gone", "err", err)
			}
			break
		}
		if err := rc.Write(ctx, typ, data); err != nil {
			break
		}
	}
	cancel()
	_ = rc.Close(websocket.StatusNormalClosure, "")
	<-done
	a.log.Info("forwarded agent channel closed")
}

// serveForwardedHTTP serves a forwarded request: its head and body from the stream, relayed to the runner
// as a request reaching this edge would be, the response written back on the stream as it comes.
func (e *Edge) serveForwardedHTTP(ctx context.Context, from string, s meshStream, a *admitted, ensureErr error) {
	w := &streamResponse{s: s, header: http.Header{}}
	defer func() {
		if r := recover(); r != nil && r != http.ErrAbortHandler {
			panic(r)
		}
		if w.failed || !w.finish() {
			s.Abort() // the peer sees the response cut short, not complete
			return
		}
		_ = s.Close()
	}()
	var head reqHead
	read := readHead
	if _, exchanged := s.(*exchange); exchanged {
		read = readExchangeHead
	}
	if err := read(s, &head); err != nil {
		e.m.forwardServed.WithLabelValues("http", from, "bad_grant").Inc()
		a.log.Warn("forwarded request refused", "err", err)
		w.failed = true
		return
	}
	if ensureErr != nil {
		e.m.forwardServed.WithLabelValues("http", from, "refused").Inc()
		wire.WriteHTTPError(w, a.log, ensureErr)
		return
	}
	if _, exchanged := s.(*exchange); exchanged && isUpgrade(head.Header) {
		e.m.forwardServed.WithLabelValues("http", from, "bad_grant").Inc()
		a.log.Warn("forwarded upgrade refused on a kept stream")
		w.failed = true // an upgraded connection takes a stream of its own
		return
	}
	if isUpgrade(head.Header) {
		e.m.forwardServed.WithLabelValues("http", from, "ok").Inc()
		e.relayUpgrade(ctx, s, w, head, a)
		return
	}
	var body io.ReadCloser = http.NoBody
	if head.ContentLength != 0 {
		body = io.NopCloser(s)
	}
	r, err := http.NewRequestWithContext(ctx, head.Method, "http://forwarded"+head.Path, body)
	if err != nil {
		w.failed = true
		return
	}
	r.Header, r.ContentLength = head.Header, head.ContentLength
	if r.ContentLength == -1 {
		r.TransferEncoding = []string{"chunked"}
	}
	// The stream must not be read once this returns (the deferred close above ends it): the runner
	// transport's read in progress is cut and waited for.
	g := guardBody(r, nil, func() { _ = s.SetReadDeadline(time.Unix(1, 0)) })
	defer g.finish()
	e.m.forwardServed.WithLabelValues("http", from, "ok").Inc()
	e.proxyToRunner(w, r, a, g)
}

// streamResponse is the http.ResponseWriter of a forwarded request: the head frame, then the body bytes,
// held until a Flush (the relay flushes after every write of the runner's answer, but for the one that
// ends it: endingWriter), maxChunk bytes or finish, so that the head and the first bytes, and the last
// bytes and the answer's end, cross the mesh in one packet each rather than one a write. The relay's
// Flush may come from a goroutine of its own (httputil.ReverseProxy's first flush of the head).
type streamResponse struct {
	s       meshStream
	header  http.Header
	status  int
	written bool
	failed  bool

	mu  sync.Mutex
	buf []byte // written, not sent yet
}

func (w *streamResponse) Header() http.Header { return w.header }

func (w *streamResponse) WriteHeader(code int) {
	if w.written || code < 200 {
		return // informational answers are not forwarded
	}
	w.status = code
	w.written = true
	var frame []byte
	var err error
	if _, exchanged := w.s.(*exchange); exchanged {
		frame, err = appendExchangeHead(nil, respHead{Status: code, Header: w.header})
	} else {
		frame, err = appendHead(nil, respHead{Status: code, Header: w.header.Clone()})
	}
	if err != nil {
		w.failed = true
		return
	}
	w.mu.Lock()
	w.buf = append(w.buf, frame...)
	w.mu.Unlock()
}

func (w *streamResponse) Write(p []byte) (int, error) {
	if !w.written {
		w.WriteHeader(http.StatusOK)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failed {
		return 0, errors.New("forwarded response failed")
	}
	w.buf = append(w.buf, p...)
	if len(w.buf) >= maxChunk {
		if err := w.send(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// send writes what is held; under mu.
func (w *streamResponse) send() error {
	if len(w.buf) == 0 {
		return nil
	}
	_, err := w.s.Write(w.buf)
	w.buf = w.buf[:0]
	if err != nil {
		w.failed = true
	}
	return err
}

func (w *streamResponse) Flush() {
	if !w.written {
		w.WriteHeader(http.StatusOK)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	_ = w.send()
}

// finish sends what is held (the head of a response that wrote nothing included), with the exchange's end
// when the stream is one (exchange.writeAll); false when the response failed.
func (w *streamResponse) finish() bool {
	if !w.written {
		w.WriteHeader(http.StatusOK)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failed {
		return false
	}
	if x, ok := w.s.(*exchange); ok {
		if err := x.writeAll(w.buf); err != nil {
			w.failed = true
		}
		w.buf = nil
		return !w.failed
	}
	return w.send() == nil
}

// proxyToRunner relays r to a's runner: same path and query, the runner's key instead of the user's token,
// a's grant, bodies streamed both ways.
func (e *Edge) proxyToRunner(w http.ResponseWriter, r *http.Request, a *admitted, g *bodyGuard) {
	t := &proxyTarget{entry: a.entry}
	var small []byte // the whole body, when it is small (smallBody)
	if r.Body != nil && r.Body != http.NoBody {
		if r.ContentLength > 0 && r.ContentLength <= smallBody {
			small = make([]byte, r.ContentLength)
			if _, err := io.ReadFull(r.Body, small); err != nil {
				g.answering(w.Header())
				if r.Context().Err() == nil {
					a.log.Info("request body cut short", "err", err)
					wire.WriteHTTPError(w, a.log, wire.Wrap(wire.InvalidArgument, err, "the request body was cut short"))
				}
				return
			}
			r.Body = &requestBody{ReadCloser: io.NopCloser(bytes.NewReader(small))} // for a retry: unread
		} else if _, ok := r.Body.(*requestBody); !ok {
			r.Body = &requestBody{ReadCloser: r.Body}
		}
	}
	again, in := false, r // a.running's runner was not there: asked for afresh (retryRunning)
	rw := &endingWriter{ResponseWriter: w}
	transport := e.runners.Transport
	if e.lean != nil {
		transport = e.lean // in this goroutine when it can (leanhop.go)
	}
	p := &httputil.ReverseProxy{
		Transport:     transport,
		FlushInterval: -1, // flush every write: exec streams as it happens
		BufferPool:    relayBuffers,
		ErrorLog:      proxyErrorLog(r.Context(), a.log.Handler()),
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL = withoutToken(pr.Out.URL)
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = t.entry.Addr
			pr.Out.Host = t.entry.Addr
			runnerHeaders(pr.Out.Header, a, httpx.RequestID(pr.In.Context()), pr.Out.URL.Path)
			if small != nil { // a body the transport knows the whole of goes in the same write as the head
				pr.Out.Body = io.NopCloser(bytes.NewReader(small))
			}
		},
		ModifyResponse: func(resp *http.Response) error {
			if a.running && resp.StatusCode == http.StatusUnauthorized {
				return errNotThisRunner
			}
			g.answering(resp.Header)                              // an answer before the body's end closes the client's connection
			if resp.StatusCode != http.StatusSwitchingProtocols { // an upgrade's body is the connection
				resp.Body = &endingBody{ReadCloser: resp.Body, w: rw}
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				g.answering(w.Header())
				return // the client went away
			}
			if errors.Is(err, errRequestBody) {
				g.answering(w.Header())
				// The client's body broke off (over the mesh, the forwarding edge's client went away): the
				// runner is not at fault and must not be stopped for it.
				a.log.Info("request body cut short", "err", err)
				wire.WriteHTTPError(w, a.log, wire.Wrap(wire.InvalidArgument, err, "the request body was cut short"))
				return
			}
			if errors.Is(err, errNotThisRunner) {
				// Another runner listens where the user's ran (its key differs): the user's sandbox stopped
				// or moved since the admission whose entry was kept. Not the user's runner: not forgotten.
				e.admits.dropRunning(admissionKey{issuer: a.account.Issuer, user: a.account.User})
				if again = untouched(in); again {
					return
				}
				g.answering(w.Header())
				wire.WriteHTTPError(w, a.log, wire.Wrap(wire.Unavailable, err, "your sandbox was restarting; retry the request"))
				return
			}
			// The runner could not be reached: forget it so the next request starts a fresh one.
			a.log.Warn("runner unreachable", "addr", t.entry.Addr, "err", err)
			e.cfg.Sandboxes.Forget(context.WithoutCancel(r.Context()), t.entry)
			if a.running {
				e.admits.dropRunning(admissionKey{issuer: a.account.Issuer, user: a.account.User})
				if again = dialFailed(err) && untouched(in); again {
					return // nothing written: admitted and relayed afresh below
				}
			}
			g.answering(w.Header())
			wire.WriteHTTPError(w, a.log, wire.Wrap(wire.Unavailable, err, "your sandbox was restarting; retry the request"))
		},
	}
	p.ServeHTTP(rw, r)
	if again {
		e.retryRunning(w, r, a, g)
	}
}

// endingWriter is the client's ResponseWriter of a relay whose answer body is an endingBody: the flush after
// the write of the body's last bytes is left to the end of the handler, which writes them with the end of
// the chunked body in one write (and the client reads them in one), instead of two.
type endingWriter struct {
	http.ResponseWriter
	// ended: the answer's body gave its last bytes. Set by the relay's copy and read by Flush, which
	// httputil.ReverseProxy also calls from a timer goroutine of its own (the first flush of the head).
	ended atomic.Bool
}

func (w *endingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *endingWriter) Flush() {
	if w.ended.Load() {
		return
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// endingBody marks its endingWriter ended when a Read gives the body's last bytes with its end.
type endingBody struct {
	io.ReadCloser
	w *endingWriter
}

func (b *endingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 && err == io.EOF {
		b.w.ended.Store(true)
	}
	return n, err
}

// errNotThisRunner: the runner at a kept running entry's address refused the entry's key.
var errNotThisRunner = errors.New("the runner there refused the sandbox's key")

// dialFailed reports whether err is a failure to dial the runner (nothing was sent).
func dialFailed(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// untouched reports whether the handler's request r can be sent again: its body (if any) was never read.
func untouched(r *http.Request) bool {
	b, ok := r.Body.(*requestBody)
	return r.Body == nil || r.Body == http.NoBody || ok && !b.touched.Load()
}

// retryRunning admits r afresh (the usage read, Ensure) after the running sandbox a was admitted to could
// not be dialled or another runner answered at its address (it stopped, for its budget say, or moved), and
// relays it to the runner found, once.
func (e *Edge) retryRunning(w http.ResponseWriter, r *http.Request, a *admitted, g *bodyGuard) {
	a.log.Info("the running sandbox was not there; admitting the request afresh")
	fresh, err := e.admit(r.Context(), r, false)
	if err != nil {
		g.answering(w.Header())
		wire.WriteHTTPError(w, a.log, err)
		return
	}
	if fresh.owner != "" {
		e.proxyForward(w, r, fresh, g)
		return
	}
	e.proxyToRunner(w, r, fresh, g) // fresh.running is false: no further retry
}

// smallBody is the largest request body (of a known length) the edge reads whole before relaying it to the
// runner: the runner then gets it in the same write as the request's head, not in a second one (net/http
// flushes the head first for a body it cannot see the whole of).
const smallBody = 4 << 10

// errRequestBody marks a failure to read the client's request body while relaying it.
var errRequestBody = errors.New("reading the request body")

// requestBody tells read failures of a request body from the runner's (see errRequestBody), and whether it
// was read at all (retryable).
type requestBody struct {
	io.ReadCloser
	touched atomic.Bool
}

func (b *requestBody) Read(p []byte) (int, error) {
	b.touched.Store(true)
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		err = fmt.Errorf("%w: %w", errRequestBody, err)
	}
	return n, err
}

// withoutToken is u without a token query parameter: a user's token passed as ?token= stays at the edge
// that verified it, never reaching a runner or another region.
func withoutToken(u *url.URL) *url.URL {
	out := *u
	if q := out.Query(); q.Has("token") {
		q.Del("token")
		out.RawQuery = q.Encode()
	}
	return &out
}

// proxyForward relays r to a.owner's region over the mesh; the other region's edge relays it to the runner.
func (e *Edge) proxyForward(w http.ResponseWriter, r *http.Request, a *admitted, g *bodyGuard) {
	t := &meshTransport{e: e, a: a, body: g}
	defer func() {
		// The answer is complete (or failed): a body the client still uploads is not wanted anymore. Its
		// read in progress is cut, which fails the connection's later reads, so the answer told the client
		// to close it (closeIfUploading). A body read to its end is never cut: that would fail the
		// server's read of the next request's first byte and with it the context of that request (a
		// keep-alive client's next request was refused "unavailable: context canceled"). Then the copy
		// has only the mesh half-close (or abort) left.
		g.finish()
		if t.bodyDone != nil {
			<-t.bodyDone
		}
	}()
	// The last bytes of an answer go to the client with the handler's end (endingWriter), after the
	// answer's body was closed: a stream kept for the next request is back in the pool before the client
	// can send it.
	rw := &endingWriter{ResponseWriter: w}
	p := &httputil.ReverseProxy{
		Transport:     t,
		FlushInterval: -1,
		BufferPool:    relayBuffers,
		ErrorLog:      proxyErrorLog(r.Context(), a.log.Handler()),
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host, pr.Out.Host = "http", "mesh", ""
			pr.Out.Header.Del("Authorization") // the user's token stays here; the grant goes on the stream
			pr.Out.Header.Del("Cookie")
			pr.Out.Header.Set("X-Request-Id", httpx.RequestID(pr.In.Context()))
		},
		ModifyResponse: func(resp *http.Response) error {
			t.closeIfUploading(resp.Header)
			if resp.StatusCode != http.StatusSwitchingProtocols { // an upgrade's body is the connection
				resp.Body = &endingBody{ReadCloser: resp.Body, w: rw}
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				return
			}
			t.closeIfUploading(w.Header())
			wire.WriteHTTPError(w, a.log, err)
		},
	}
	p.ServeHTTP(rw, r)
}

// closeIfUploading makes an answer given while the client is still uploading its body the last one on the
// client's connection: the rest of the body will be cut (proxyForward), and the connection with it.
func (t *meshTransport) closeIfUploading(h http.Header) { t.body.answering(h) }
