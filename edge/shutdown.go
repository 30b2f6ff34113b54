package edge

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/coder/websocket"

	"github.com/warren-mesh/warren/internal/wire"
)

// errEdgeShutdown is the error message an agent channel gets before the edge's own 1001 close when the
// edge shuts down: the client reconnects (through another edge) and resumes with lastSeq.
var errEdgeShutdown = wire.Errorf(wire.Unavailable, "edge shutting down; reconnect to resume")

// Shutdown ends every agent channel the edge serves, each with an unavailable error message and then a
// 1001 (going away) close, so clients reconnect elsewhere instead of waiting on a connection that will be
// cut (docs/PROTOCOL.md#errors); channels opened afterwards are refused the same way. It waits for them
// until ctx ends. Call it before the HTTP server's Shutdown, which does not track WebSockets. Idempotent.
func (e *Edge) Shutdown(ctx context.Context) error {
	e.stopMu.Lock()
	if !e.stopped {
		e.stopped = true
		e.stopAll()
	}
	e.stopMu.Unlock()
	done := make(chan struct{})
	go func() { e.channels.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("edge shutdown: agent channels still open: %w", ctx.Err())
	}
}

// channelStarted counts an agent channel for Shutdown; false when the edge is shutting down (the channel
// must be refused). A true answer must be paired with channels.Done.
func (e *Edge) channelStarted() bool {
	e.stopMu.Lock()
	defer e.stopMu.Unlock()
	if e.stopped {
		return false
	}
	e.channels.Add(1)
	return true
}

// closeGoingAway ends c for the edge's shutdown: the error message, then 1001 with the error as reason.
func (e *Edge) closeGoingAway(c msgConn) {
	wctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = c.Write(wctx, websocket.MessageText, wire.ErrorMessage(errEdgeShutdown))
	_ = c.Close(websocket.StatusGoingAway, wire.CloseReason(errEdgeShutdown))
}

// endOnShutdown closes c for the edge's shutdown and cancels the relay, unless the stop it returns is
// called first (when the relay ends). Waiting holds no goroutine: an idle channel costs its readers only.
func (e *Edge) endOnShutdown(cancel context.CancelFunc, c msgConn) (stop func() bool) {
	return context.AfterFunc(e.stopCtx, func() {
		e.closeGoingAway(c)
		cancel()
	})
}

// maxErrorFrame bounds the runner frames looked at for being an error message (they are small).
const maxErrorFrame = 64 << 10

// isErrorFrame reports whether a runner frame is an error message. The runner writes them with "type"
// last ({"seq":n,"payload":{...},"type":"error"}), so only such frames are decoded.
func isErrorFrame(data []byte) bool {
	if len(data) > maxErrorFrame || !bytes.HasSuffix(bytes.TrimRight(data, " \t\r\n"), []byte(`"type":"error"}`)) {
		return false
	}
	var m struct {
		Type string `json:"type"`
	}
	return json.Unmarshal(data, &m) == nil && m.Type == wire.TypeError
}

// closeError is the error message the edge sends before relaying a runner's close that no error message
// preceded (a runner dropping a client too slow to read, an older runner): the close reason's {code,
// message} when it is one (wire.CloseReason), else its code, else the close code's.
func closeError(code websocket.StatusCode, reason string) *wire.Error {
	var we wire.Error
	if json.Unmarshal([]byte(reason), &we) == nil && we.Code.Valid() && we.Message != "" {
		return wire.Errorf(we.Code, "%s", we.Message)
	}
	c := wire.Code(reason)
	if !c.Valid() {
		c = wire.CodeForCloseCode(int(code))
	}
	if c == "" {
		c = wire.Unavailable
	}
	return wire.Errorf(c, "the sandbox closed the connection (%d)", code)
}
