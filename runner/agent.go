package runner

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"

	"github.com/coder/websocket"

	"github.com/warren-mesh/warren/internal/httpx"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner/internal/web"
	"github.com/warren-mesh/warren/runner/session"
)

// agentRoutes mounts the agent channel.
func (a *api) agentRoutes(s web.Serve) {
	s.Handle("/v1/agent", httpx.Methods{http.MethodGet: a.agent})
}

// agent serves GET /v1/agent: the agent channel (docs/PROTOCOL.md#agent-channel) over WebSocket, one JSON
// message per text frame, frames above wire.MaxFrame closed with 1009. The edge relays clients here.
func (a *api) agent(w http.ResponseWriter, req *http.Request) {
	// Counted before the upgrade, so Run's shutdown (which waits for non-hijacked requests first) cannot
	// miss a connection.
	a.conns.Add(1)
	defer a.conns.Done()
	if !web.IsUpgrade(req) {
		web.Fail(w, req, wire.Errorf(wire.InvalidArgument, "expected a WebSocket upgrade"))
		return
	}
	// The bearer key authenticates the caller and no cookies are involved, so the browser-oriented origin
	// check has nothing to protect (and the edge forwards clients' Origin headers).
	c, err := websocket.Accept(w, req, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		web.Logger(req).Debug("websocket upgrade failed", "err", err)
		return
	}
	c.SetReadLimit(wire.MaxFrame)
	a.r.clients.Add(1)
	defer a.r.clients.Add(-1)
	// This connection's own grant (not the newest of all callers) decides what its prompts may do and
	// which budget they spend.
	g := a.r.Grant()
	if h := req.Header.Get(wire.HeaderGrant); h != "" {
		if dg, err := wire.DecodeGrant(h); err == nil {
			g = dg
		}
	}
	reason := a.hub.Serve(req.Context(), &wsConn{c: c, grant: g})
	web.Logger(req).Debug("agent connection closed", "reason", reason)
}

// wsConn adapts a WebSocket to session.Conn.
type wsConn struct {
	c     *websocket.Conn
	once  sync.Once
	grant wire.Grant
}

// Meta implements session.MetaConn: the grant travels with every turn this connection starts.
func (w *wsConn) Meta() any { return w.grant }

var _ session.Conn = (*wsConn)(nil)

func (w *wsConn) Read(ctx context.Context) ([]byte, error) {
	typ, b, err := w.c.Read(ctx)
	if err != nil {
		if errors.Is(err, websocket.ErrMessageTooBig) {
			// The library has already closed the connection with 1009.
			return nil, wire.Wrap(wire.PayloadTooLarge, err, "frame exceeds the 4 MiB limit")
		}
		return nil, err
	}
	if typ != websocket.MessageText {
		return nil, wire.Errorf(wire.InvalidArgument, "binary frames are not accepted; send JSON in text frames")
	}
	return b, nil
}

func (w *wsConn) Write(ctx context.Context, msg []byte) error {
	return w.c.Write(ctx, websocket.MessageText, msg)
}

func (w *wsConn) Close(reason error) error {
	err := net.ErrClosed
	w.once.Do(func() {
		code, text := closeStatus(reason)
		err = w.c.Close(code, text)
	})
	return err
}

// closeStatus maps why a connection ends to a WebSocket close code and reason (docs/PROTOCOL.md#errors).
func closeStatus(reason error) (websocket.StatusCode, string) {
	if reason == nil || websocket.CloseStatus(reason) != -1 {
		return websocket.StatusNormalClosure, ""
	}
	if errors.Is(reason, session.ErrShuttingDown) {
		var we *wire.Error // why the runner stops, when the hub failed (Hub.Fail)
		if !errors.As(reason, &we) {
			we = wire.Errorf(wire.Unavailable, "runner shutting down")
		}
		return websocket.StatusGoingAway, wire.CloseReason(we)
	}
	// The reason is JSON like the edge's, whatever the cause; internal causes stay in the logs.
	pub, _ := wire.Public(reason)
	return websocket.StatusCode(pub.Code.CloseCode()), wire.CloseReason(pub)
}
