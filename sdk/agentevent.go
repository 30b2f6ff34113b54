package warren

import (
	"encoding/json"
	"errors"
	"strings"

	"github.com/warren-mesh/warren/internal/wire"
)

// Types of Event. The agent's events (system, assistant, user, stream_event, result) are Claude Code's
// stream-json messages; the others are Warren's own (docs/PROTOCOL.md#server-messages).
const (
	EventSystem    = "system"
	EventAssistant = "assistant"
	EventUser      = "user"
	EventStream    = "stream_event"
	EventResult    = "result"
	EventControl   = wire.TypeControl
	EventError     = wire.TypeError
	EventToolCall  = wire.TypeToolCall
	EventPong      = wire.TypePong
)

// States of a session, as reported by SessionInfo.
const (
	StateIdle         = wire.StateIdle
	StateInitializing = wire.StateInitializing
	StateReady        = wire.StateReady
	StateProcessing   = wire.StateProcessing
	StateWaitingTool  = wire.StateWaitingTool
	StateCompleted    = wire.StateCompleted
	StateError        = wire.StateError
)

// Subtypes of a result. Every subtype but ResultSuccess ends the turn early; IsError is then true.
const (
	ResultSuccess              = "success"
	ResultErrorMaxTurns        = "error_max_turns"        // the turn reached SessionOptions.MaxTurns
	ResultErrorDuringExecution = "error_during_execution" // the agent failed (or was interrupted)
	ResultErrorMaxBudget       = "error_max_budget_usd"   // the budget ran out during the turn
)

// Types of ContentBlock. Other types (image, redacted_thinking, server_tool_use, ...) are kept as they
// came: read ContentBlock.Raw.
const (
	BlockText       = "text"
	BlockThinking   = "thinking"
	BlockToolUse    = "tool_use"
	BlockToolResult = "tool_result"
)

// SystemEvent is a system message. Subtype "init" opens every turn and describes the agent's environment;
// other subtypes (compact_boundary, status, hook_response, ...) carry fields that are left in Event.Raw.
type SystemEvent struct {
	Subtype           string            `json:"subtype"`
	SessionID         string            `json:"session_id"` // Claude Code's session id, not Session.ID
	UUID              string            `json:"uuid"`
	Cwd               string            `json:"cwd"`
	Model             string            `json:"model"`
	Tools             []string          `json:"tools"`
	MCPServers        []MCPServerStatus `json:"mcp_servers"`
	PermissionMode    string            `json:"permissionMode"`
	APIKeySource      string            `json:"apiKeySource"`
	ClaudeCodeVersion string            `json:"claude_code_version"`
	SlashCommands     []string          `json:"slash_commands"`
}

// MCPServerStatus is one MCP server of a system init message.
type MCPServerStatus struct {
	Name   string `json:"name"`
	Status string `json:"status"` // connected, failed, pending, ...
}

// AssistantEvent is a message of the model. Claude Code emits one for each content block as it completes,
// so several AssistantEvents may share a Message.ID.
type AssistantEvent struct {
	Message Message `json:"message"`
	// ParentToolUseID is empty for the main agent; for a subagent it is the id of the Task tool call that
	// started it.
	ParentToolUseID string `json:"parent_tool_use_id"`
	SessionID       string `json:"session_id"`
	UUID            string `json:"uuid"`
	// Error names why the model call failed (authentication_failed, billing_error, rate_limit,
	// invalid_request, server_error, unknown); empty when it did not.
	Error string `json:"error"`
}

// Text is the text blocks of the message, concatenated.
func (a *AssistantEvent) Text() string { return a.Message.Text() }

// ToolUses is the tool_use blocks of the message: the tools the model calls.
func (a *AssistantEvent) ToolUses() []ContentBlock { return a.Message.Blocks(BlockToolUse) }

// UserEvent is a user message in the agent's stream: mostly the results of the tools the model called
// (tool_result blocks), sometimes a prompt being replayed.
type UserEvent struct {
	Message         Message `json:"message"`
	ParentToolUseID string  `json:"parent_tool_use_id"`
	SessionID       string  `json:"session_id"`
	UUID            string  `json:"uuid"`
	// ToolUseResult is Claude Code's structured form of the tool's result (for Bash: stdout, stderr,
	// interrupted; for Write: filePath, content, ...), when it adds one.
	ToolUseResult json.RawMessage `json:"tool_use_result"`
}

// ToolResults is the tool_result blocks of the message.
func (u *UserEvent) ToolResults() []ContentBlock { return u.Message.Blocks(BlockToolResult) }

// Text is the text blocks of the message, concatenated.
func (u *UserEvent) Text() string { return u.Message.Text() }

// Message is a message of the Anthropic Messages API as Claude Code relays it. Content given as a plain
// string becomes one text block.
type Message struct {
	ID         string         `json:"id"`
	Model      string         `json:"model"`
	Role       string         `json:"role"`
	Content    []ContentBlock `json:"content"`
	StopReason string         `json:"stop_reason"`
	Usage      *Usage         `json:"usage"`
}

// UnmarshalJSON decodes a message leniently (see decodeLenient) and accepts string content.
func (m *Message) UnmarshalJSON(b []byte) error {
	type plain Message
	var aux struct {
		plain
		Content json.RawMessage `json:"content"`
	}
	decodeLenient(b, &aux)
	*m = Message(aux.plain)
	m.Content = decodeContent(aux.Content)
	return nil
}

// Text is the text blocks of the message, concatenated.
func (m *Message) Text() string {
	var sb strings.Builder
	for _, b := range m.Content {
		if b.Type == BlockText {
			sb.WriteString(b.Text)
		}
	}
	return sb.String()
}

// Blocks is the content blocks of the given type.
func (m *Message) Blocks(typ string) []ContentBlock {
	var out []ContentBlock
	for _, b := range m.Content {
		if b.Type == typ {
			out = append(out, b)
		}
	}
	return out
}

// ContentBlock is one block of a message's content. Which fields are set depends on Type: text has Text;
// thinking has Thinking and Signature; tool_use has ID, Name and Input; tool_result has ToolUseID, Content
// and IsError. Raw is the block as it came, for the fields and block types not listed here.
type ContentBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	Thinking  string          `json:"thinking,omitempty"`
	Signature string          `json:"signature,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   json.RawMessage `json:"content,omitempty"` // a string or an array of blocks
	IsError   bool            `json:"is_error,omitempty"`
	Raw       json.RawMessage `json:"-"`
}

// UnmarshalJSON decodes a block leniently and keeps it in Raw. It never fails: a block that is not an
// object is left with only Raw set.
func (b *ContentBlock) UnmarshalJSON(data []byte) error {
	type plain ContentBlock
	var p plain
	decodeLenient(data, &p)
	*b = ContentBlock(p)
	b.Raw = append(json.RawMessage(nil), data...)
	return nil
}

// ResultText is the content of a tool_result block as text: the string itself, or the text blocks joined
// by newlines, with "[image]" standing for each image.
func (b ContentBlock) ResultText() string {
	blocks := decodeContent(b.Content)
	var parts []string
	for _, c := range blocks {
		switch c.Type {
		case BlockText:
			parts = append(parts, c.Text)
		case "image":
			parts = append(parts, "[image]")
		}
	}
	return strings.Join(parts, "\n")
}

// decodeContent reads message content: a string (one text block) or an array of blocks. Anything else
// is no content.
func decodeContent(raw json.RawMessage) []ContentBlock {
	raw = json.RawMessage(strings.TrimSpace(string(raw)))
	if len(raw) == 0 {
		return nil
	}
	switch raw[0] {
	case '"':
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return nil
		}
		return []ContentBlock{{Type: BlockText, Text: s, Raw: raw}}
	case '[':
		var blocks []ContentBlock
		decodeLenient(raw, &blocks)
		return blocks
	}
	return nil
}

// Usage counts the tokens of a model call or, in a result, of the whole turn.
type Usage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
}

// StreamEvent is a partial message (sent when SessionOptions.IncludePartialMessages is set): one event of
// the Messages API stream of the model call in progress. The complete AssistantEvent follows it.
type StreamEvent struct {
	Event           MessageStreamEvent `json:"event"`
	ParentToolUseID string             `json:"parent_tool_use_id"`
	SessionID       string             `json:"session_id"`
	UUID            string             `json:"uuid"`
}

// TextDelta is the text added by a content_block_delta of type text_delta.
func (s *StreamEvent) TextDelta() (string, bool) {
	if s.Event.Type != "content_block_delta" || s.Event.Delta == nil || s.Event.Delta.Type != "text_delta" {
		return "", false
	}
	return s.Event.Delta.Text, true
}

// MessageStreamEvent is one event of the Messages API stream. Type is message_start (Message set),
// content_block_start (Index, ContentBlock), content_block_delta (Index, Delta), content_block_stop
// (Index), message_delta (Delta with StopReason, Usage) or message_stop. Raw is the event as it came.
type MessageStreamEvent struct {
	Type         string          `json:"type"`
	Index        int             `json:"index"`
	Message      *Message        `json:"message"`
	ContentBlock *ContentBlock   `json:"content_block"`
	Delta        *StreamDelta    `json:"delta"`
	Usage        *Usage          `json:"usage"`
	Raw          json.RawMessage `json:"-"`
}

// UnmarshalJSON decodes the event leniently and keeps it in Raw.
func (e *MessageStreamEvent) UnmarshalJSON(b []byte) error {
	type plain MessageStreamEvent
	var p plain
	decodeLenient(b, &p)
	*e = MessageStreamEvent(p)
	e.Raw = append(json.RawMessage(nil), b...)
	return nil
}

// StreamDelta is the delta of a content_block_delta (Type text_delta with Text, input_json_delta with
// PartialJSON, thinking_delta with Thinking, signature_delta with Signature) or of a message_delta
// (StopReason).
type StreamDelta struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	PartialJSON string `json:"partial_json"`
	Thinking    string `json:"thinking"`
	Signature   string `json:"signature"`
	StopReason  string `json:"stop_reason"`
}

// ResultEvent ends every turn: how it ended, what the agent answered and what it cost.
type ResultEvent struct {
	Subtype       string  `json:"subtype"` // ResultSuccess, ResultErrorMaxTurns, ...
	IsError       bool    `json:"is_error"`
	Result        string  `json:"result"` // the agent's final answer; empty for most error subtypes
	DurationMs    int64   `json:"duration_ms"`
	DurationAPIMs int64   `json:"duration_api_ms"`
	NumTurns      int     `json:"num_turns"`
	SessionID     string  `json:"session_id"`
	UUID          string  `json:"uuid"`
	StopReason    string  `json:"stop_reason"`
	TotalCostUSD  float64 `json:"total_cost_usd"` // what Warren charged for the turn (Cost.AIMicrodollars in dollars)
	Usage         Usage   `json:"usage"`
	// ModelUsage is Claude Code's usage per model; each CostUSD is what Warren charged for that model, so
	// they add up to TotalCostUSD.
	ModelUsage        map[string]ModelUsage `json:"modelUsage"`
	PermissionDenials []PermissionDenial    `json:"permission_denials"`
	// Errors explains an error subtype (every error_* result has at least one entry).
	Errors           []string        `json:"errors"`
	StructuredOutput json.RawMessage `json:"structured_output"`
	// Cost is what Warren charged for the turn (Warren's extension); nil when the server did not send it.
	Cost *Cost `json:"cost"`
}

// CostUSD is what the turn cost in US dollars: Warren's charge when the result carries one, else Claude
// Code's estimate.
func (r *ResultEvent) CostUSD() float64 {
	if r.Cost != nil {
		return r.Cost.USD()
	}
	return r.TotalCostUSD
}

// ModelUsage is Claude Code's account of one model's use in a turn.
type ModelUsage struct {
	InputTokens              int64   `json:"inputTokens"`
	OutputTokens             int64   `json:"outputTokens"`
	CacheReadInputTokens     int64   `json:"cacheReadInputTokens"`
	CacheCreationInputTokens int64   `json:"cacheCreationInputTokens"`
	WebSearchRequests        int64   `json:"webSearchRequests"`
	CostUSD                  float64 `json:"costUSD"`
	ContextWindow            int64   `json:"contextWindow"`
}

// PermissionDenial is a tool call the agent was not allowed to make.
type PermissionDenial struct {
	ToolName  string          `json:"tool_name"`
	ToolUseID string          `json:"tool_use_id"`
	ToolInput json.RawMessage `json:"tool_input"`
}

// Cost is Warren's charge for a turn, the `cost` extension of every result (docs/PROTOCOL.md#cost): the model
// cost in microdollars (1 USD = 1,000,000), the sandbox's compute time, and the breakdown by model.
type Cost struct {
	AIMicrodollars int64                `json:"ai_microdollars"`
	ComputeSeconds float64              `json:"compute_seconds"`
	Models         map[string]ModelCost `json:"models"`
}

// ModelCost is the tokens of one model in a turn and what they cost.
type ModelCost struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	Microdollars             int64 `json:"microdollars"`
}

// USD is the model cost in US dollars.
func (c *Cost) USD() float64 { return float64(c.AIMicrodollars) / 1e6 }

// Total sums the models.
func (c *Cost) Total() ModelCost {
	var t ModelCost
	for _, m := range c.Models {
		t.InputTokens += m.InputTokens
		t.OutputTokens += m.OutputTokens
		t.CacheReadInputTokens += m.CacheReadInputTokens
		t.CacheCreationInputTokens += m.CacheCreationInputTokens
		t.Microdollars += m.Microdollars
	}
	return t
}

// SessionInfo is the data of a control session_info: the session's new state.
type SessionInfo struct {
	State     string `json:"state"` // StateProcessing, StateReady, ...
	SessionID string `json:"sessionId"`
	// UUID names the prompt of the turn a processing, waiting_tool or ready session_info is about, when the
	// prompt had one (docs/PROTOCOL.md#prompt-identity).
	UUID string `json:"uuid,omitempty"`
}

// ReadyInfo is the data of a control ready: the sandbox is up and the session open.
type ReadyInfo struct {
	SessionID string `json:"sessionId"`
	Region    string `json:"region"`
	Model     string `json:"model"`
	// Notice is set when the platform wants the user told something, e.g. that a scripted demo model
	// answers instead of Claude.
	Notice string `json:"notice,omitempty"`
	// PromptUUIDs: the runner echoes prompt uuids and runs a prompt sent again with the same uuid once.
	PromptUUIDs bool `json:"promptUuids,omitempty"`
	// DeclaredToolNames: a tool_call names the tool as its client declared it, with serverName and
	// qualifiedName (ToolCall).
	DeclaredToolNames bool `json:"declaredToolNames,omitempty"`
}

// System returns the system message of a system event; ok is false for any other event.
func (e Event) System() (*SystemEvent, bool) { return decodeTyped[SystemEvent](e, EventSystem) }

// Assistant returns the message of an assistant event; ok is false for any other event.
func (e Event) Assistant() (*AssistantEvent, bool) {
	return decodeTyped[AssistantEvent](e, EventAssistant)
}

// User returns the message of a user event; ok is false for any other event.
func (e Event) User() (*UserEvent, bool) { return decodeTyped[UserEvent](e, EventUser) }

// StreamEvent returns the partial message of a stream_event; ok is false for any other event.
func (e Event) StreamEvent() (*StreamEvent, bool) { return decodeTyped[StreamEvent](e, EventStream) }

// Result returns the result of a result event; ok is false for any other event.
func (e Event) Result() (*ResultEvent, bool) { return decodeTyped[ResultEvent](e, EventResult) }

// SessionInfo returns the data of a control session_info; ok is false for any other event.
func (e Event) SessionInfo() (*SessionInfo, bool) {
	return decodeControl[SessionInfo](e, wire.ActionSessionInfo)
}

// Ready returns the data of a control ready; ok is false for any other event.
func (e Event) Ready() (*ReadyInfo, bool) { return decodeControl[ReadyInfo](e, wire.ActionReady) }

// decodeTyped decodes an agent event of type typ from e.Raw. The accessors are lenient because Claude Code
// adds and reshapes fields between versions: unknown fields are ignored and a field of an unexpected type
// is left at its zero value. Only a Raw that is not a JSON object (or the wrong type) gives ok false.
func decodeTyped[T any](e Event, typ string) (*T, bool) {
	if e.Type != typ {
		return nil, false
	}
	var v T
	if !isObject(e.Raw) || !decodeLenient(e.Raw, &v) {
		return nil, false
	}
	return &v, true
}

func decodeControl[T any](e Event, action string) (*T, bool) {
	a, data, ok := e.Control()
	if !ok || a != action {
		return nil, false
	}
	var v T
	if len(data) > 0 && isObject(data) {
		decodeLenient(data, &v)
	}
	return &v, true
}

// decodeLenient decodes b into v as far as the types allow: json.Unmarshal skips a value of the wrong type
// and carries on, so its UnmarshalTypeError only means some fields were left empty. It reports false when
// b is not JSON.
func decodeLenient(b []byte, v any) bool {
	err := json.Unmarshal(b, v)
	var te *json.UnmarshalTypeError
	return err == nil || errors.As(err, &te)
}

func isObject(b []byte) bool {
	s := strings.TrimSpace(string(b))
	return len(s) >= 2 && s[0] == '{'
}
