package wire

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/warren-mesh/warren/internal/strictjson"
)

// MaxFrame is the largest message either side accepts (docs/PROTOCOL.md#transports).
const MaxFrame = 4 << 20

// Client → server message types (docs/PROTOCOL.md#client-messages).
const (
	TypeInit       = "init"
	TypeUser       = "user"
	TypeControl    = "control"
	TypeToolResult = "tool_result"
	TypePing       = "ping"
)

// Server → client message types that Warren itself produces; agent events pass through with their own types.
const (
	TypeError    = "error"
	TypePong     = "pong"
	TypeToolCall = "tool_call"
)

// Control actions.
const (
	ActionClose       = "close"
	ActionEndInput    = "end_input"
	ActionInterrupt   = "interrupt"
	ActionReady       = "ready"
	ActionSessionInfo = "session_info"
)

// Session states (docs/PROTOCOL.md#session-states; the runner sends initializing, ready and processing).
const (
	StateIdle         = "idle"
	StateInitializing = "initializing"
	StateReady        = "ready"
	StateProcessing   = "processing"
	StateWaitingTool  = "waiting_tool"
	StateCompleted    = "completed"
	StateError        = "error"
)

// ClientMessage is one client → server message. Payload is kept raw and decoded by type-specific accessors
// so unknown fields in agent-compatible messages survive relaying.
type ClientMessage struct {
	Type            string          `json:"type"`
	Payload         json.RawMessage `json:"payload,omitempty"`
	SessionID       string          `json:"session_id,omitempty"`
	Message         json.RawMessage `json:"message,omitempty"`
	ParentToolUseID *string         `json:"parent_tool_use_id,omitempty"`
	UUID            string          `json:"uuid,omitempty"`
}

// MaxPromptUUID bounds the uuid of a user message (a session remembers its last prompts' uuids).
const MaxPromptUUID = 100

// ControlPayload is the payload of a client control message.
type ControlPayload struct {
	Action string `json:"action"`
}

// PingPayload is the payload of ping and pong.
type PingPayload struct {
	Timestamp int64 `json:"timestamp"`
}

// ParseClientMessage decodes and validates one client frame. Every failure is an *Error with code
// invalid_argument or payload_too_large; nothing is partially applied.
func ParseClientMessage(b []byte) (ClientMessage, error) {
	var m ClientMessage
	if len(b) > MaxFrame {
		return m, Errorf(PayloadTooLarge, "message of %d bytes exceeds the %d byte limit", len(b), MaxFrame)
	}
	if err := strictjson.Unmarshal(b, &m); err != nil {
		return ClientMessage{}, JSONError(err, "message is not a JSON object")
	}
	switch m.Type {
	case TypeInit:
		if _, err := m.Init(); err != nil {
			return ClientMessage{}, err
		}
	case TypeUser:
		if len(m.Message) == 0 || string(m.Message) == "null" {
			return ClientMessage{}, Errorf(InvalidArgument, "user message needs a message")
		}
		var um struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		}
		if err := strictjson.Unmarshal(m.Message, &um); err != nil {
			return ClientMessage{}, JSONError(err, "user message")
		}
		if len(m.UUID) > MaxPromptUUID {
			return ClientMessage{}, Errorf(InvalidArgument, "user message uuid of %d bytes exceeds the %d byte limit", len(m.UUID), MaxPromptUUID)
		}
		if um.Role != "user" {
			return ClientMessage{}, Errorf(InvalidArgument, "user message role must be \"user\", got %q", um.Role)
		}
		if len(um.Content) == 0 || (um.Content[0] != '"' && um.Content[0] != '[') {
			return ClientMessage{}, Errorf(InvalidArgument, "user message content must be a string or an array of blocks")
		}
	case TypeControl:
		c, err := m.Control()
		if err != nil {
			return ClientMessage{}, err
		}
		switch c.Action {
		case ActionClose, ActionEndInput, ActionInterrupt:
		default:
			return ClientMessage{}, Errorf(InvalidArgument, "unknown control action %q", c.Action)
		}
	case TypeToolResult:
		// Only the envelope here: the runner checks the result itself (ParseToolResult) and answers a bad
		// one with an error while the call stays pending and the connection open.
		var p struct {
			CallID string `json:"callId"`
		}
		if err := strictjson.Unmarshal(m.Payload, &p); err != nil || p.CallID == "" {
			return ClientMessage{}, Errorf(InvalidArgument, "tool_result needs payload.callId")
		}
	case TypePing:
		if len(m.Payload) > 0 {
			var p PingPayload
			if err := strictjson.Unmarshal(m.Payload, &p); err != nil {
				return ClientMessage{}, JSONError(err, "ping payload")
			}
		}
	case "":
		return ClientMessage{}, Errorf(InvalidArgument, "message has no type")
	default:
		return ClientMessage{}, Errorf(InvalidArgument, "unknown message type %q", m.Type)
	}
	return m, nil
}

// Init decodes the init payload (see DecodeSessionOptions).
func (m ClientMessage) Init() (SessionOptions, error) {
	return DecodeSessionOptions(m.Payload)
}

// Control decodes a control payload.
func (m ClientMessage) Control() (ControlPayload, error) {
	var c ControlPayload
	if err := strictjson.Unmarshal(m.Payload, &c); err != nil {
		return c, JSONError(err, "control payload")
	}
	return c, nil
}

// ServerMessage builders. Each returns one encoded frame without seq; WithSeq adds it.

// Control encodes {"type":"control","payload":{"action":A,"data":D}}.
func Control(action string, data any) []byte {
	return mustJSON(map[string]any{"type": TypeControl, "payload": map[string]any{"action": action, "data": data}})
}

// ErrorMessage encodes {"type":"error","payload":{code,message,details}}, the message starting with its
// code's phrase (ChannelMessage).
func ErrorMessage(e *Error) []byte {
	return mustJSON(map[string]any{"type": TypeError, "payload": channelError(e)})
}

// Pong answers a ping with the same payload.
func Pong(payload json.RawMessage) []byte {
	if len(payload) == 0 {
		payload = json.RawMessage("{}")
	}
	return mustJSON(map[string]any{"type": TypePong, "payload": payload})
}

// WithSeq adds "seq": n to an encoded JSON object, leaving the rest byte-for-byte as it was (agent events are
// relayed as Claude Code emitted them). A non-object is returned unchanged.
func WithSeq(obj []byte, seq int64) []byte {
	obj = bytes.TrimRight(obj, " \t\r\n")
	if len(obj) < 2 || obj[0] != '{' || obj[len(obj)-1] != '}' {
		return obj
	}
	out := make([]byte, 0, len(obj)+24)
	out = append(out, `{"seq":`...)
	out = strconv.AppendInt(out, seq, 10)
	inner := bytes.TrimSpace(obj[1 : len(obj)-1])
	if len(inner) > 0 {
		out = append(out, ',')
		out = append(out, inner...)
	}
	return append(out, '}')
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("wire: encoding a server message: " + err.Error())
	}
	return b
}
