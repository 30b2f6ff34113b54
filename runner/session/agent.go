package session

import (
	"context"

	"github.com/warren-mesh/warren/internal/wire"
)

// Agent runs the turns of sessions. The hub calls Run from one goroutine per turn: at most one turn per
// session at a time, but turns of different sessions run concurrently, so implementations must be safe for
// concurrent use across sessions.
//
// Run blocks until the turn ends, passing each agent event (one JSON object, relayed to clients byte for
// byte apart from the added "seq") to emit, in order; emit may be called only until Run returns. ctx is
// cancelled when the client interrupts the turn or the runner shuts down. A returned error ends the turn
// with an error message: a *wire.Error keeps its code and message, anything else is reported as internal
// and its cause logged.
type Agent interface {
	Run(ctx context.Context, turn Turn, emit func(event []byte)) error
}

// Turn is one user prompt to a session.
type Turn struct {
	SessionID string
	// Options are the session's init options (from the init that created the session).
	Options wire.SessionOptions
	// Message is the client's user message as received.
	Message wire.ClientMessage
	// Meta is what the connection that sent the prompt carries (see MetaConn): in the runner, the grant of
	// the token that connection was admitted with.
	Meta any
	// Tools runs the turn's calls of client tools (tools declared in the session's mcpServers that the
	// client executes); set by the hub.
	Tools ToolCaller
}

// Checker is implemented by agents that validate a connection's session options before the session is
// attached (docs/PROTOCOL.md#session-options: options are refused at init, before ready, never later or
// silently). The hub calls Check for every init; an error is sent to the client instead of ready and ends
// the connection.
type Checker interface {
	Check(ctx context.Context, c Check) (Checked, error)
}

// Check is one init to validate.
type Check struct {
	// Options are the init's options.
	Options wire.SessionOptions
	// Open says the hub holds the session Options.SessionID names.
	Open bool
	// Meta is what the connection carries (see MetaConn).
	Meta any
}

// Checked is what the agent tells the connection in ready.
type Checked struct {
	// Model is the model the session's agent calls ("" leaves ready's model to the options).
	Model string
}

// Warmer is implemented by agents whose sessions keep a process between turns: the hub says when a session
// is wanted, so the process is started before the first prompt and stopped when nobody is there.
//
// The hub calls Warm each time a connection attaches to a session (an init, a resume, a reconnect), with
// the options the session runs with and what that connection carries (see MetaConn), and Cool when the
// session's last connection has left and no turn runs. Both are called with the session's lock held, in
// the order the events happened, so they must not block nor call back into the hub: the work (a start, a
// stop after a delay) happens in the background.
type Warmer interface {
	Warm(sessionID string, opts wire.SessionOptions, meta any)
	Cool(sessionID string)
}

// MetaConn is a Conn that says who is on the other end; its Meta goes with every turn it starts.
type MetaConn interface {
	Meta() any
}

// NoAgent is the Agent used until an agent driver is configured: every turn fails with unavailable.
type NoAgent struct{}

var _ Agent = NoAgent{}

// Run implements Agent.
func (NoAgent) Run(context.Context, Turn, func([]byte)) error {
	return wire.Errorf(wire.Unavailable, "no agent configured")
}
