package edge

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/warren-mesh/warren/internal/httpx"
	"github.com/warren-mesh/warren/internal/mesh"
	"github.com/warren-mesh/warren/internal/wire"
)

// serveWS is GET /ws: accept, then serve the agent channel over the WebSocket (serveChannel).
func (e *Edge) serveWS(w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		// Tokens travel in the URL or a header, never in cookies, so cross-origin pages gain nothing.
		InsecureSkipVerify: true,
	})
	if err != nil {
		return // Accept already answered the request
	}
	c.SetReadLimit(wire.MaxFrame)
	e.serveChannel(r, c, transportWebSocket)
}

// serveRoot is GET /: a WebSocket upgrade there is the agent channel, for clients given a base URL with no
// path that dial it as is (Chucky Cloud's TypeScript SDK does); any other request is not found, as before.
func (e *Edge) serveRoot(w http.ResponseWriter, r *http.Request) {
	if !isUpgrade(r.Header) || !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		wire.WriteHTTPError(w, nil, httpx.NotFound("edge API", r))
		return
	}
	e.serveWS(w, r)
}

// Transports of the agent channel, the transport label of the connection metrics.
const (
	transportWebSocket    = "websocket"
	transportWebTransport = "webtransport"
)

// serveChannel serves an agent channel whose client connection c (a WebSocket, or a WebTransport
// session's stream: internal/wtconn.Conn) was opened by r: authenticate, admit, reach the runner (or the
// region holding the user, over the mesh), then relay messages both ways until one side ends. Errors
// before the relay are sent as an error message and a close with the wire close code, so a browser (which
// cannot see an HTTP status of a failed upgrade) learns why.
func (e *Edge) serveChannel(r *http.Request, c msgConn, transport string) {
	var ends channelEnds
	defer ends.run()
	e.m.connections.WithLabelValues(transport).Inc()
	e.m.active.WithLabelValues(transport).Inc()
	ends.add(e.m.active.WithLabelValues(transport).Dec)
	ctx := r.Context()
	if !e.channelStarted() {
		e.closeGoingAway(c)
		return
	}
	ends.add(e.channels.Done)

	claims, err := e.authenticate(ctx, r)
	if err == nil {
		err = wire.CheckChannelQuery(r.URL.Query())
	}
	if err != nil {
		e.closeWith(ctx, c, err)
		return
	}
	// Only a channel that opens with init (or a reconnect naming its session) is admitted: leased, rated,
	// its sandbox started. Until then it is bounded by the user's count of waiting channels instead.
	unwait, err := e.waiting.take(admissionKey{issuer: claims.Issuer, user: claims.Subject})
	if err != nil {
		e.closeWith(ctx, c, err)
		return
	}
	key := admissionKey{issuer: claims.Issuer, user: claims.Subject}
	op, err := e.firstMessages(ctx, c, key)
	unwait()
	if err != nil {
		return
	}
	first, c := op.first, op.conn
	track := &channelTrack{mem: &e.resumes, key: key, known: op.known}
	if op.orphan != "" {
		// A lost session the edge resumed on its own that does not open (refused, not found) is not
		// tried again, or a client that reconnects after every close would loop on it.
		ends.add(func() { track.failed(op.orphan) })
	}
	a, err := e.admitAs(ctx, claims, true)
	if err != nil {
		e.closeWith(ctx, c, err)
		return
	}
	a.track = track
	if op.prompt { // a reconnect's prompt passes the prompt rates as any prompt does
		if refused := e.admitPrompt(ctx, a); refused != nil {
			_ = c.Write(ctx, websocket.MessageText, wire.ErrorMessage(refused))
			first = first[:1]
		}
	}
	a.log = a.log.With("transport", transport)
	release := sync.OnceFunc(func() { e.releaseLease(a) })
	ends.add(release)
	if a.lease != "" {
		e.leases.add(a.lease, a.log)
	}
	var rc msgConn
	if a.owner != "" {
		s, err := e.openForward(ctx, a, mesh.KindWebSocket, nil)
		if err != nil {
			release() // before the client learns of the refusal
			e.closeWith(ctx, c, err)
			return
		}
		rc = &msgStream{s: s}
	} else {
		wc, err := e.dialRunner(ctx, a)
		if err != nil {
			e.closeWith(ctx, c, err)
			return
		}
		rc = wc
	}
	for _, m := range first {
		// A write that fails leaves it to the relay to read why (the runner's, or a forwarding peer's,
		// error and close; else the channel lost, an unavailable error).
		if rc.Write(ctx, websocket.MessageText, m) != nil {
			break
		}
	}
	a.log.Info("agent channel open")
	// The relay runs on the handler's goroutine. (Handing a WebSocket's relay to a goroutine of its own,
	// so the handler's grown stack could go, ended a reconnect resumed silently: reads still under the
	// request's context were cancelled with it, and the connection with them.)
	e.relay(ctx, c, rc, a)
}

// channelEnds are what ends with an agent channel, run last added first.
type channelEnds []func()

func (f *channelEnds) add(end func()) { *f = append(*f, end) }

func (f *channelEnds) run() {
	for i := len(*f) - 1; i >= 0; i-- {
		(*f)[i]()
	}
}

// dialRunner opens the runner's agent channel, replacing a runner that cannot be reached once.
func (e *Edge) dialRunner(ctx context.Context, a *admitted) (*websocket.Conn, error) {
	for attempt := 0; ; attempt++ {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		rc, _, err := websocket.Dial(dctx, "ws://"+a.entry.Addr+"/v1/agent", &websocket.DialOptions{
			HTTPClient: e.runners,
			HTTPHeader: http.Header{
				"Authorization":  {"Bearer " + a.entry.Key},
				"X-Request-Id":   {httpx.RequestID(ctx)},
				wire.HeaderGrant: {a.grant(a.budget).Encode()},
			},
		})
		cancel()
		if err == nil {
			rc.SetReadLimit(wire.MaxFrame + 64) // seq added by the runner
			return rc, nil
		}
		a.log.Warn("runner unreachable", "addr", a.entry.Addr, "attempt", attempt, "err", err)
		if attempt == 1 || ctx.Err() != nil {
			return nil, wire.Wrap(wire.Unavailable, err, "your sandbox could not be reached; retry shortly")
		}
		e.cfg.Sandboxes.Forget(ctx, a.entry)
		entry, err := e.cfg.Sandboxes.Ensure(ctx, a.sandboxRequest())
		if err != nil {
			return nil, err
		}
		a.entry = entry
	}
}

// relay copies frames client → runner (validated) and runner → client (as they are) until either side ends.
func (e *Edge) relay(ctx context.Context, c msgConn, rc msgConn, a *admitted) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.fromRunner(ctx, cancel, c, rc, a)
	}()
	defer e.endOnShutdown(cancel, c)()
	// pings keep idle connections alive through proxies and detect dead clients (a WebTransport session
	// has QUIC's keep-alive and idle timeout instead)
	if p, ok := pingerOf(c); ok {
		defer e.startPings(ctx, cancel, p, a)()
	}

	// client → runner
	clientClosed := false // the client ended the channel itself (a close frame, or control close)
	for {
		typ, data, err := c.Read(ctx)
		if err != nil {
			st := websocket.CloseStatus(err)
			var bad *wire.Error
			switch {
			case st == websocket.StatusMessageTooBig || errors.Is(err, websocket.ErrMessageTooBig):
				e.closeWith(context.Background(), c, wire.Errorf(wire.PayloadTooLarge, "frame exceeds %d bytes", wire.MaxFrame))
			case errors.As(err, &bad): // a malformed WebTransport frame (wtconn.Conn)
				e.closeWith(context.Background(), c, bad)
			case st != -1:
				clientClosed = true
				_ = rc.Close(websocket.StatusNormalClosure, "client closed")
			}
			break
		}
		if typ != websocket.MessageText {
			e.closeWith(ctx, c, wire.Errorf(wire.InvalidArgument, "binary frames are not part of the protocol; send JSON text frames"))
			break
		}
		m, perr := wire.ParseClientMessage(data)
		if perr != nil {
			e.closeWith(ctx, c, perr)
			break
		}
		clientClosed = clientClosed || (m.Type == wire.TypeControl && isClose(m))
		if m.Type == wire.TypeUser {
			if refused := e.admitPrompt(ctx, a); refused != nil {
				if ctx.Err() != nil {
					break // the channel is closing
				}
				// The prompt is refused, the channel stays open.
				_ = c.Write(ctx, websocket.MessageText, wire.ErrorMessage(refused))
				continue
			}
		}
		e.m.frames.WithLabelValues("to_runner").Inc()
		if err := rc.Write(ctx, websocket.MessageText, data); err != nil {
			break
		}
	}
	cancel()
	_ = rc.Close(websocket.StatusNormalClosure, "")
	<-done
	_ = c.CloseNow()
	a.track.end(!clientClosed)
	a.log.Info("agent channel closed")
}

// pinger is a client connection the edge pings (a WebSocket).
type pinger interface {
	Ping(ctx context.Context) error
}

// startPings pings c every PingInterval until ctx ends or the stop it returns is called; a ping not
// answered within the interval ends the channel (cancel). Between pings it holds a timer, not a goroutine.
func (e *Edge) startPings(ctx context.Context, cancel context.CancelFunc, c pinger, a *admitted) (stop func()) {
	p := &pings{ctx: ctx, cancel: cancel, c: c, a: a, every: e.cfg.PingInterval}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.t = time.AfterFunc(p.every, p.ping)
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.t.Stop()
	}
}

// pings is the ping timer of one channel.
type pings struct {
	ctx    context.Context
	cancel context.CancelFunc
	c      pinger
	a      *admitted
	every  time.Duration
	mu     sync.Mutex  // guards t
	t      *time.Timer // fires ping
}

// ping pings once, in the timer's goroutine, and arms the timer again while the channel lasts.
func (p *pings) ping() {
	pctx, pcancel := context.WithTimeout(p.ctx, p.every)
	err := p.c.Ping(pctx)
	pcancel()
	if p.ctx.Err() != nil {
		return
	}
	if err != nil {
		p.a.log.Info("client did not answer ping", "err", err)
		p.cancel()
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.t.Reset(p.every)
}

// fromRunner copies the runner's messages to c, as they are, until either side ends, then cancels. A close
// by the runner is passed on with its code and reason; a runner lost is an unavailable close.
func (e *Edge) fromRunner(ctx context.Context, cancel context.CancelFunc, c, rc msgConn, a *admitted) {
	defer cancel()
	lastError := false // the last message relayed was an error message
	budget := budgetStop{e: e, a: a}
	for {
		typ, data, err := rc.Read(ctx)
		if err != nil {
			if st := websocket.CloseStatus(err); st != -1 {
				// The runner ended the channel deliberately: pass its code and reason on, after an error
				// message saying why when the runner sent none (an error precedes every close).
				reason := closeReasonOf(err)
				if st != websocket.StatusNormalClosure && !lastError {
					ce := closeError(st, reason)
					if ce.Code == wire.Unavailable && budget.spent(ctx) != nil {
						ce = budget.err
					}
					_ = writeClient(context.WithoutCancel(ctx), c, websocket.MessageText, wire.ErrorMessage(ce))
				}
				if st != websocket.StatusNormalClosure && budget.err != nil {
					st, reason = websocket.StatusCode(wire.BudgetExceeded.CloseCode()), wire.CloseReason(budget.err)
				}
				_ = c.Close(st, reason)
			} else if ctx.Err() == nil {
				a.log.Warn("runner channel lost", "err", err)
				lost := wire.Errorf(wire.Unavailable, "the sandbox stopped unexpectedly; reconnect to resume")
				if spent := budget.spent(ctx); spent != nil {
					lost = spent
				}
				e.closeWith(context.Background(), c, lost)
			}
			return
		}
		var f runnerFrame
		if a.track != nil {
			if f = readRunnerFrame(data); a.track.skip(f) {
				continue // a tool call the client had before it reconnected
			}
		}
		e.m.frames.WithLabelValues("to_client").Inc()
		if lastError = isErrorFrame(data); lastError {
			data = budget.rewrite(ctx, data)
		}
		if err := writeClient(ctx, c, typ, data); err != nil {
			if ctx.Err() == nil {
				a.log.Info("client dropped: it stopped reading", "err", err)
			}
			return
		}
		a.track.delivered(f)
	}
}

// clientWriteTimeout is how long a client may leave a message unread before the edge drops it (it resumes
// with lastSeq): a client that stops reading holds no runner output, and, forwarded, no more of the mesh
// connection's flow-control window, for longer.
var clientWriteTimeout = 30 * time.Second

// writeClient writes one message to the client, bounded by clientWriteTimeout.
func writeClient(ctx context.Context, c msgConn, typ websocket.MessageType, data []byte) error {
	wctx, cancel := context.WithTimeout(ctx, clientWriteTimeout)
	defer cancel()
	return c.Write(wctx, typ, data)
}

// closeWith sends err as an error message, then closes with its close code. Internal causes are logged.
func (e *Edge) closeWith(ctx context.Context, c msgConn, err error) {
	pub, logIt := wire.Public(err)
	if logIt {
		e.log.Error("agent channel failed", "request_id", httpx.RequestID(ctx), "err", err)
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	_ = c.Write(wctx, websocket.MessageText, wire.ErrorMessage(pub))
	_ = c.Close(websocket.StatusCode(pub.Code.CloseCode()), wire.CloseReason(pub))
}

func closeReasonOf(err error) string {
	var ce websocket.CloseError
	if errors.As(err, &ce) {
		return ce.Reason
	}
	return ""
}
