package terms

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/coder/websocket"

	"github.com/warren-mesh/warren/internal/httpx"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner/internal/web"
)

// Routes of the terminal API (docs/PROTOCOL.md#terminals):
//
//	POST   /v1/sandbox/terminals              create (wire.TermCreateRequest) → 201 wire.TermInfo
//	GET    /v1/sandbox/terminals              list → wire.TermList
//	GET    /v1/sandbox/terminals/{id}         → wire.TermInfo
//	DELETE /v1/sandbox/terminals/{id}         kill (if running) and forget → 204
//	POST   /v1/sandbox/terminals/{id}/resize  {"cols","rows"} → wire.TermInfo
//	GET    /v1/sandbox/terminals/{id}/attach  WebSocket: replay of the kept output, then live
//
// On the WebSocket, binary messages are terminal bytes (output from the runner, keyboard input from the
// client, at most wire.MaxTermInput each) and text messages are JSON control messages (wire.TermControl):
// resize from the client, exit from the runner just before it closes the connection normally. A bad
// message closes the connection with the wire close code of its error.

// termChunk bounds one binary message of output.
const termChunk = 32 << 10

// termCloseWait bounds the closing handshake and the last writes to a client that does not read.
const termCloseWait = 5 * time.Second

// Routes mounts the terminal API on s.
func (t *Table) Routes(s web.Serve) {
	a := &api{t: t, s: s}
	s.Handle("/v1/sandbox/terminals", httpx.Methods{http.MethodGet: a.listTerms, http.MethodPost: a.createTerm})
	s.Handle("/v1/sandbox/terminals/", web.ItemRoute("/v1/sandbox/terminals/", map[string]http.Handler{
		"":       httpx.Methods{http.MethodGet: a.getTerm, http.MethodDelete: a.deleteTerm},
		"resize": httpx.Methods{http.MethodPost: a.resizeTerm},
		"attach": httpx.Methods{http.MethodGet: a.attachTerm},
	}))
}

// api is the terminal API of one Run.
type api struct {
	t *Table
	s web.Serve
}

func (a *api) termOf(w http.ResponseWriter, req *http.Request) (*term, bool) {
	tm, err := a.t.terms.Get(req.PathValue("id"))
	if err != nil {
		web.Fail(w, req, err)
		return nil, false
	}
	return tm, true
}

func (a *api) createTerm(w http.ResponseWriter, req *http.Request) {
	var tm *term
	tr, err := wire.DecodeTermCreate(req.Body)
	if err == nil {
		var dir string
		if dir, err = a.s.Root.Dir(tr.Cwd); err == nil {
			tm, err = a.t.start(a.s.Work, dir, tr)
		}
	}
	if err := a.t.terms.Counted(err); err != nil {
		web.Fail(w, req, err)
		return
	}
	web.Logger(req).Info("terminal created by request", "terminal", tm.id)
	_ = httpx.WriteJSON(w, http.StatusCreated, tm.info())
}

func (a *api) listTerms(w http.ResponseWriter, req *http.Request) {
	_ = httpx.WriteJSON(w, http.StatusOK, wire.TermList{Terminals: a.t.list()})
}

func (a *api) getTerm(w http.ResponseWriter, req *http.Request) {
	if tm, ok := a.termOf(w, req); ok {
		_ = httpx.WriteJSON(w, http.StatusOK, tm.info())
	}
}

func (a *api) deleteTerm(w http.ResponseWriter, req *http.Request) {
	if err := a.t.remove(req.Context(), req.PathValue("id")); err != nil {
		web.Fail(w, req, err)
		return
	}
	web.Logger(req).Info("terminal removed by request", "terminal", req.PathValue("id"))
	w.WriteHeader(http.StatusNoContent)
}

func (a *api) resizeTerm(w http.ResponseWriter, req *http.Request) {
	tm, ok := a.termOf(w, req)
	if !ok {
		return
	}
	var sz struct {
		Cols int `json:"cols"`
		Rows int `json:"rows"`
	}
	err := wire.DecodeBody(req.Body, "resize request", &sz)
	if err == nil {
		err = tm.resize(sz.Cols, sz.Rows)
	}
	if err != nil {
		web.Fail(w, req, err)
		return
	}
	_ = httpx.WriteJSON(w, http.StatusOK, tm.info())
}

// attachTerm serves the terminal's WebSocket: everything refusable (no upgrade, no terminal, too many
// clients) is refused with an HTTP error before the upgrade.
func (a *api) attachTerm(w http.ResponseWriter, req *http.Request) {
	a.s.Conns.Add(1) // before the upgrade: shutdown waits for hijacked connections through conns
	defer a.s.Conns.Done()
	if !web.IsUpgrade(req) {
		web.Fail(w, req, wire.Errorf(wire.InvalidArgument, "expected a WebSocket upgrade"))
		return
	}
	tm, ok := a.termOf(w, req)
	if !ok {
		return
	}
	detach, err := tm.attach()
	if err != nil {
		web.Fail(w, req, err)
		return
	}
	defer detach()
	// Bearer key, no cookies: the browser-oriented origin check protects nothing here (see agent).
	c, err := websocket.Accept(w, req, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		web.Logger(req).Debug("websocket upgrade failed", "err", err)
		return
	}
	c.SetReadLimit(wire.MaxTermInput)
	log := web.Logger(req).With("terminal", tm.id)
	log.Info("terminal attached")
	// The connection ends with the client, the runner's work, or the terminal's end (after the output).
	ctx, cancel := context.WithCancelCause(req.Context())
	defer cancel(nil)
	out := make(chan error, 1)
	go func() {
		err := a.termOutput(ctx, c, tm)
		if errors.Is(err, errTermExited) {
			// The closing handshake ends the pending read of termInput.
			_ = c.Close(websocket.StatusNormalClosure, "")
		}
		out <- err
	}()
	in := a.termInput(ctx, c, tm)
	cancel(in)
	if err := <-out; errors.Is(err, errTermExited) {
		log.Info("terminal detached", "reason", err)
		return
	}
	closeTerm(c, in)
	log.Info("terminal detached", "reason", in)
}

// errTermExited ends a connection normally: the terminal exited and the client was told.
var errTermExited = errors.New("terminal exited")

// termOutput sends the kept output, then the live output, then the exit message once the terminal ended.
func (a *api) termOutput(ctx context.Context, c *websocket.Conn, tm *term) error {
	var offset int64
	for {
		data, next, exited, code, more := tm.outputFrom(offset, termChunk)
		offset = next
		if len(data) > 0 {
			if err := c.Write(ctx, websocket.MessageBinary, data); err != nil {
				return err
			}
			continue
		}
		if exited {
			b, _ := json.Marshal(wire.TermControl{Type: wire.TermExit, Code: &code})
			wctx, cancel := context.WithTimeout(ctx, termCloseWait)
			err := c.Write(wctx, websocket.MessageText, b)
			cancel()
			if err != nil {
				return err
			}
			return errTermExited
		}
		select {
		case <-more:
		case <-ctx.Done():
			return nil
		}
	}
}

// termInput relays keyboard input and applies control messages until the connection or ctx ends.
func (a *api) termInput(ctx context.Context, c *websocket.Conn, tm *term) error {
	for {
		typ, b, err := c.Read(ctx)
		if err != nil {
			if cause := context.Cause(ctx); cause != nil {
				return cause
			}
			return err
		}
		if typ == websocket.MessageBinary {
			if err := tm.input(ctx, b); err != nil {
				return err
			}
			continue
		}
		ctl, err := wire.ParseTermControl(b)
		if err == nil && ctl.Type != wire.TermResize {
			err = wire.Errorf(wire.InvalidArgument, "a client sends only %s control messages", wire.TermResize)
		}
		if err == nil {
			err = tm.resize(ctl.Cols, ctl.Rows)
		}
		if err != nil && wire.CodeOf(err) != wire.Conflict { // resizing an exited terminal is harmless
			return err
		}
	}
}

// closeTerm closes the connection: normally when the client left, otherwise with the wire close code of
// err.
func closeTerm(c *websocket.Conn, err error) {
	var we *wire.Error
	if !errors.As(err, &we) {
		_ = c.Close(websocket.StatusNormalClosure, "")
		return
	}
	pub, _ := wire.Public(err)
	_ = c.Close(websocket.StatusCode(pub.Code.CloseCode()), wire.CloseReason(pub))
}
