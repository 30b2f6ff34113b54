package wire

import (
	"bytes"
	"encoding/json"
	"regexp"

	"github.com/warren-mesh/warren/internal/strictjson"
)

// Client tools on the agent channel (docs/PROTOCOL.md#host-tools): the runner sends tool_call when the
// agent calls a tool the client declared in mcpServers, and the client answers with tool_result.

// ToolCallPayload is the payload of a tool_call message.
type ToolCallPayload struct {
	CallID string `json:"callId"`
	// ToolName is the tool's name as its client named it: as declared, or mcp__<server>__<tool> for a
	// server declared with a type (MCPServer.CallName).
	ToolName string `json:"toolName"`
	// ServerName is the client tool server that declared the tool.
	ServerName string `json:"serverName,omitempty"`
	// QualifiedName is the name the agent called: mcp__<server>__<tool>.
	QualifiedName string          `json:"qualifiedName,omitempty"`
	Input         json.RawMessage `json:"input"`
	// ToolUseID is the agent's tool_use block id, when the CLI says it.
	ToolUseID string `json:"toolUseId,omitempty"`
	// TimeoutMs is how long the runner waits for the answer.
	TimeoutMs int64 `json:"timeoutMs"`
}

// ToolCallMessage encodes {"type":"tool_call","payload":p}.
func ToolCallMessage(p ToolCallPayload) []byte {
	if len(p.Input) == 0 {
		p.Input = json.RawMessage("{}")
	}
	return mustJSON(map[string]any{"type": TypeToolCall, "payload": p})
}

// ToolResult is a client tool's result: MCP content blocks, as an MCP server's tools/call answers.
type ToolResult struct {
	Content           []json.RawMessage `json:"content"`
	IsError           bool              `json:"isError,omitempty"`
	StructuredContent json.RawMessage   `json:"structuredContent,omitempty"`
}

// ToolResultPayload answers a tool_call.
type ToolResultPayload struct {
	CallID string     `json:"callId"`
	Result ToolResult `json:"result"`
}

// Bounds of a tool_result (docs/PROTOCOL.md#host-tools).
const (
	// MaxToolResultBytes bounds a tool_result's payload as received; a larger one is payload_too_large.
	MaxToolResultBytes = 1 << 20
	// MaxToolResultBlocks bounds its content blocks.
	MaxToolResultBlocks = 256
)

var callIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// ValidCallID reports whether id has the shape of a call id.
func ValidCallID(id string) bool { return callIDPattern.MatchString(id) }

// contentTypes are the MCP content block types a tool result may carry, with the string fields each needs.
var contentTypes = map[string][]string{
	"text":          {"text"},
	"image":         {"data", "mimeType"},
	"audio":         {"data", "mimeType"},
	"resource_link": {"uri", "name"},
	"resource":      nil, // {"resource": {uri, text | blob}}, checked below
}

// ParseToolResult decodes and validates the payload of a tool_result. Failures are *Error values:
// payload_too_large over MaxToolResultBytes, invalid_argument for anything malformed (naming the field).
// Unknown fields of the payload and of the result are refused; content blocks keep their own extra fields
// (annotations, _meta) as they are.
func ParseToolResult(payload json.RawMessage) (ToolResultPayload, error) {
	var p ToolResultPayload
	if len(payload) > MaxToolResultBytes {
		return p, Errorf(PayloadTooLarge, "tool_result of %d bytes exceeds the %d byte limit", len(payload), MaxToolResultBytes)
	}
	var env struct {
		CallID string          `json:"callId"`
		Result json.RawMessage `json:"result"`
	}
	if err := DecodeStrict(payload, &env); err != nil {
		return p, Errorf(InvalidArgument, "tool_result payload must be {callId, result}: %s", trimJSONErr(err))
	}
	if !ValidCallID(env.CallID) {
		return p, Errorf(InvalidArgument, "tool_result payload.callId must be 1 to 128 characters of [A-Za-z0-9_-]")
	}
	p.CallID = env.CallID
	var r struct {
		Content           *[]json.RawMessage `json:"content"`
		IsError           bool               `json:"isError"`
		StructuredContent json.RawMessage    `json:"structuredContent"`
	}
	if err := DecodeStrict(env.Result, &r); err != nil || r.Content == nil {
		msg := "content is required"
		if err != nil {
			msg = trimJSONErr(err)
		}
		return ToolResultPayload{}, Errorf(InvalidArgument, "tool_result payload.result must be {content: [blocks], isError?, structuredContent?}: %s", msg)
	}
	if len(*r.Content) > MaxToolResultBlocks {
		return ToolResultPayload{}, Errorf(InvalidArgument, "tool_result payload.result.content: at most %d blocks", MaxToolResultBlocks)
	}
	for i, b := range *r.Content {
		nb, err := checkContentBlock(b)
		if err != nil {
			return ToolResultPayload{}, Errorf(InvalidArgument, "tool_result payload.result.content[%d]: %s", i, err.Message)
		}
		(*r.Content)[i] = nb
	}
	if sc := bytes.TrimSpace(r.StructuredContent); len(sc) > 0 && string(sc) != "null" && sc[0] != '{' {
		return ToolResultPayload{}, Errorf(InvalidArgument, "tool_result payload.result.structuredContent must be an object")
	}
	p.Result = ToolResult{Content: *r.Content, IsError: r.IsError, StructuredContent: r.StructuredContent}
	return p, nil
}

// checkContentBlock validates b and returns it as the agent gets it: as written, except a flat resource
// block (mapped by flatResource).
func checkContentBlock(b json.RawMessage) (json.RawMessage, *Error) {
	var fields map[string]json.RawMessage
	if strictjson.Unmarshal(b, &fields) != nil || fields == nil {
		return nil, Errorf(InvalidArgument, "a content block must be an object")
	}
	var typ string
	if strictjson.Unmarshal(fields["type"], &typ) != nil {
		return nil, Errorf(InvalidArgument, "a content block needs a string type")
	}
	need, ok := contentTypes[typ]
	if !ok {
		return nil, Errorf(InvalidArgument, "content block type %q is not one of text, image, audio, resource, resource_link", clip(typ))
	}
	for _, f := range need {
		var s string
		if strictjson.Unmarshal(fields[f], &s) != nil {
			return nil, Errorf(InvalidArgument, "a %s block needs a string %s", clip(typ), f)
		}
	}
	if typ != "resource" {
		return b, nil
	}
	if _, nested := fields["resource"]; !nested && fields["uri"] != nil {
		if err := flatResource(fields); err != nil {
			return nil, err
		}
		b, _ = json.Marshal(fields)
	}
	var res struct {
		URI  *string `json:"uri"`
		Text *string `json:"text"`
		Blob *string `json:"blob"`
	}
	if strictjson.Unmarshal(fields["resource"], &res) != nil || res.URI == nil || (res.Text == nil) == (res.Blob == nil) {
		return nil, Errorf(InvalidArgument, "a resource block needs resource {uri, text or blob} (or uri and text or blob beside type)")
	}
	return b, nil
}

// resourceFields are the members of an embedded resource (MCP's resource.{uri, mimeType, text, blob}).
var resourceFields = []string{"uri", "mimeType", "text", "blob"}

// flatResource moves a flat resource block's fields into resource: {"type":"resource","uri","mimeType"?,
// "text"|"blob"}, the shape of Chucky Cloud's TypeScript SDK's ResourceContent, becomes MCP's
// {"type":"resource","resource":{...}}; other members (annotations, _meta) stay beside type.
func flatResource(fields map[string]json.RawMessage) *Error {
	res := map[string]json.RawMessage{}
	for _, f := range resourceFields {
		if v, ok := fields[f]; ok {
			var s string
			if strictjson.Unmarshal(v, &s) != nil {
				return Errorf(InvalidArgument, "a resource block's %s must be a string", f)
			}
			res[f] = v
			delete(fields, f)
		}
	}
	b, _ := json.Marshal(res)
	fields["resource"] = b
	return nil
}

// ErrorToolResult is the result the agent gets when a client tool call fails (timeout, refused call).
func ErrorToolResult(msg string) ToolResult {
	b, _ := json.Marshal(map[string]string{"type": "text", "text": msg})
	return ToolResult{Content: []json.RawMessage{b}, IsError: true}
}

func trimJSONErr(err error) string {
	s := err.Error()
	if len(s) > 200 {
		s = s[:200]
	}
	return string(bytes.TrimPrefix([]byte(s), []byte("json: ")))
}
