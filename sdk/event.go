package warren

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/warren-mesh/warren/internal/wire"
)

// Event is one server message on the agent channel: a Warren message (control, error, tool_call, pong) or
// one of the agent's events (system, assistant, user, stream_event, result), exactly as Claude Code emits
// them in stream-json. The accessors (System, Assistant, User, StreamEvent, Result, Control, SessionInfo,
// Ready, ToolCall, Err) decode Raw, the whole message, into typed views; decode Raw yourself for anything
// they leave out.
type Event struct {
	Type    string
	Seq     int64 // per-session sequence number; 0 when the server did not send one
	Subtype string
	Raw     json.RawMessage
}

// ToolCall is the payload of a tool_call event: the agent called a tool that the client executes.
type ToolCall struct {
	CallID string `json:"callId"`
	// ToolName is the tool's name as declared (ServerName's tool); from a runner that does not say
	// declaredToolNames in ready, and for a server declared with a type, mcp__<server>__<tool>.
	ToolName string `json:"toolName"`
	// ServerName is the client tool server that declared it ("" from such a runner).
	ServerName string `json:"serverName,omitempty"`
	// QualifiedName is the name the agent called: mcp__<server>__<tool> ("" from such a runner).
	QualifiedName string          `json:"qualifiedName,omitempty"`
	Input         json.RawMessage `json:"input"`
}

// AgentName is the name the agent called the tool by, mcp__<server>__<tool>, from any runner.
func (c ToolCall) AgentName() string {
	if c.QualifiedName != "" {
		return c.QualifiedName
	}
	return c.ToolName
}

// decodeEvent reads the envelope of one server message. Only a frame that is not a JSON object is an error:
// fields of unexpected types are left empty so agent events with new shapes still get through.
func decodeEvent(b []byte) (Event, error) {
	var env map[string]json.RawMessage
	if err := json.Unmarshal(b, &env); err != nil || env == nil {
		if err == nil {
			err = errors.New("null")
		}
		return Event{}, fmt.Errorf("warren: malformed server message: %w", err)
	}
	ev := Event{Raw: json.RawMessage(b)}
	_ = json.Unmarshal(env["type"], &ev.Type)
	_ = json.Unmarshal(env["subtype"], &ev.Subtype)
	if raw, ok := env["seq"]; ok {
		var n json.Number
		if json.Unmarshal(raw, &n) == nil {
			if v, err := n.Int64(); err == nil {
				ev.Seq = v
			}
		}
	}
	return ev, nil
}

// body is the part of a Warren message that carries its fields: "payload" when present (the form Warren
// sends), else the message itself (the flat form some agent-service servers use).
func (e Event) body() json.RawMessage {
	var env struct {
		Payload json.RawMessage `json:"payload"`
	}
	if json.Unmarshal(e.Raw, &env) == nil && len(env.Payload) > 0 && !bytes.Equal(env.Payload, []byte("null")) {
		return env.Payload
	}
	return e.Raw
}

// Control returns the action and data of a control event; ok is false for any other event.
func (e Event) Control() (action string, data json.RawMessage, ok bool) {
	if e.Type != wire.TypeControl {
		return "", nil, false
	}
	var c struct {
		Action string          `json:"action"`
		Data   json.RawMessage `json:"data"`
	}
	if json.Unmarshal(e.body(), &c) != nil {
		return "", nil, false
	}
	return c.Action, c.Data, true
}

// Err returns the error carried by an error event, nil for any other event.
func (e Event) Err() *Error {
	if e.Type != wire.TypeError {
		return nil
	}
	var we Error
	if err := json.Unmarshal(e.body(), &we); err != nil {
		return &Error{Code: wire.Internal, Message: "malformed error message: " + err.Error()}
	}
	if we.Code == "" {
		we.Code = wire.Internal
	}
	return &we
}

// ToolCall returns the call of a tool_call event; ok is false for any other event.
func (e Event) ToolCall() (call ToolCall, ok bool) {
	if e.Type != wire.TypeToolCall {
		return ToolCall{}, false
	}
	if json.Unmarshal(e.body(), &call) != nil {
		return ToolCall{}, false
	}
	return call, true
}
