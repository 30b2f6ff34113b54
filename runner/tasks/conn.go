package tasks

import (
	"context"
	"encoding/json"
	"io"
	"sync"
	"time"

	"github.com/warren-mesh/warren/internal/strictjson"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner/session"
)

// taskOutcome is what a task's turn produced.
type taskOutcome struct {
	sessionID    string
	result       string
	subtype      string
	numTurns     int
	cost         *Cost
	totalCostUSD float64
	err          *wire.Error
}

// taskConn is the task's in-process client of the hub: it sends init and the prompt, reads the session's
// messages until the turn has ended (session_info ready after processing), then closes. It is the agent
// channel a client would have, so the task runs, is metered and is snapshotted exactly like a chat turn.
type taskConn struct {
	grant wire.Grant
	in    chan []byte
	done  chan struct{} // closed by Close
	once  sync.Once

	mu         sync.Mutex
	out        taskOutcome
	processing bool
	ended      chan struct{} // closed when the turn has ended
	endOnce    sync.Once
}

var (
	_ session.Conn     = (*taskConn)(nil)
	_ session.MetaConn = (*taskConn)(nil)
)

func (c *taskConn) Meta() any { return c.grant }

func (c *taskConn) Read(ctx context.Context) ([]byte, error) {
	select {
	case b := <-c.in:
		return b, nil
	case <-c.done:
		return nil, io.EOF
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// send queues a client message; false once the connection is closed.
func (c *taskConn) send(b []byte) bool {
	select {
	case c.in <- b:
		return true
	case <-c.done:
		return false
	}
}

func (c *taskConn) Close(reason error) error {
	c.once.Do(func() {
		close(c.done)
		c.mu.Lock()
		if c.out.err == nil && c.out.subtype == "" && reason != nil {
			pub, _ := wire.Public(reason)
			c.out.err = pub
		}
		c.mu.Unlock()
		c.end()
	})
	return nil
}

func (c *taskConn) end() { c.endOnce.Do(func() { close(c.ended) }) }

// Write takes one server message: the session id, the turn's result, an error, and the end of the turn.
func (c *taskConn) Write(_ context.Context, msg []byte) error {
	var m struct {
		Type    string `json:"type"`
		Payload struct {
			Action  string          `json:"action"`
			Data    json.RawMessage `json:"data"`
			Code    wire.Code       `json:"code"`
			Message string          `json:"message"`
		} `json:"payload"`
		Subtype      string   `json:"subtype"`
		IsError      bool     `json:"is_error"`
		Result       string   `json:"result"`
		NumTurns     int      `json:"num_turns"`
		Cost         *Cost    `json:"cost"`
		TotalCostUSD float64  `json:"total_cost_usd"`
		Errors       []string `json:"errors"`
	}
	if strictjson.Unmarshal(msg, &m, strictjson.AllowInvalidUTF8) != nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch m.Type {
	case "result":
		c.out.result, c.out.subtype, c.out.numTurns = m.Result, m.Subtype, m.NumTurns
		c.out.cost, c.out.totalCostUSD = m.Cost, m.TotalCostUSD
		if m.IsError {
			c.out.err = resultError(m.Subtype, m.Result, m.Errors)
		}
	case wire.TypeError:
		if c.out.err == nil && m.Payload.Code.Valid() {
			c.out.err = &wire.Error{Code: m.Payload.Code, Message: m.Payload.Message}
		}
		if !c.processing {
			c.end() // refused before any turn (init): nothing more comes
		}
	case wire.TypeControl:
		var d struct {
			SessionID string `json:"sessionId"`
			State     string `json:"state"`
		}
		_ = strictjson.Unmarshal(m.Payload.Data, &d, strictjson.AllowInvalidUTF8)
		if d.SessionID != "" {
			c.out.sessionID = d.SessionID
		}
		if m.Payload.Action == wire.ActionSessionInfo {
			switch {
			case d.State == wire.StateProcessing:
				c.processing = true
			case d.State == wire.StateReady && c.processing:
				c.end()
			}
		}
	}
	return nil
}

// resultError is the typed error of a result the agent ended in error.
func resultError(subtype, result string, errs []string) *wire.Error {
	msg := result
	if len(errs) > 0 {
		msg = errs[len(errs)-1]
	}
	if msg == "" {
		msg = "the agent ended the task with " + subtype
	}
	switch subtype {
	case "error_max_budget_usd":
		return wire.Errorf(wire.BudgetExceeded, "%s", msg)
	case "error_max_turns":
		return wire.Errorf(wire.ResourceExhausted, "%s", msg)
	default:
		return wire.Errorf(wire.Internal, "%s", msg)
	}
}

// runTaskTurn runs prompt as the one turn of a fresh session of hub under grant g, interrupting it after
// timeout; ctx ending (the runner stopping) ends it too.
func runTaskTurn(ctx context.Context, hub *session.Hub, g wire.Grant, opts json.RawMessage, prompt string,
	timeout time.Duration) taskOutcome {
	c := &taskConn{grant: g, in: make(chan []byte, 4), done: make(chan struct{}), ended: make(chan struct{})}
	init, _ := json.Marshal(map[string]any{"type": wire.TypeInit, "payload": opts})
	user, _ := json.Marshal(map[string]any{"type": wire.TypeUser,
		"message": map[string]any{"role": "user", "content": prompt}})
	c.in <- init
	c.in <- user
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = hub.Serve(ctx, c)
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	timedOut := false
	select {
	case <-c.ended:
	case <-timer.C:
		timedOut = true
		interrupt, _ := json.Marshal(map[string]any{"type": wire.TypeControl, "payload": map[string]any{"action": wire.ActionInterrupt}})
		if c.send(interrupt) {
			select { // the interrupted turn ends with session_info ready
			case <-c.ended:
			case <-time.After(30 * time.Second):
			}
		}
	}
	closeMsg, _ := json.Marshal(map[string]any{"type": wire.TypeControl, "payload": map[string]any{"action": wire.ActionClose}})
	if !c.send(closeMsg) {
		_ = c.Close(nil)
	}
	<-served
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.out
	if timedOut {
		out.err = wire.Errorf(wire.Timeout, "the task did not finish within %s", timeout)
	}
	if out.err == nil && out.subtype == "" {
		out.err = wire.Errorf(wire.Internal, "the turn ended without a result")
	}
	return out
}
