package warren

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/warren-mesh/warren/internal/wire"
)

// Client tools (docs/PROTOCOL.md#host-tools): tools the application executes itself, which the agent in the
// sandbox calls as MCP tools named mcp__<server>__<tool>; a tool_call names the tool as declared, with its
// server (ToolCall). Declare them in SessionOptions.MCPServers with ToolServer.MCPServer, and answer the
// tool_call events with Session.HandleToolCall:
//
//	srv := &warren.ToolServer{Name: "app", Tools: []warren.Tool{{
//		Name: "lookup", Description: "Looks a customer up",
//		InputSchema: json.RawMessage(`{"type":"object","properties":{"id":{"type":"string"}}}`),
//		Handler: func(ctx context.Context, input json.RawMessage) (warren.ToolResult, error) {
//			return warren.TextResult("found"), nil
//		},
//	}}}
//	s, _ := c.Dial(ctx, &warren.SessionOptions{MCPServers: warren.MCPServerList{srv.MCPServer()}})
//	for ev, err := range s.Prompt(ctx, "look customer 7 up") {
//		if handled, err := s.HandleToolCall(ctx, ev, srv); handled || err != nil { ... }
//	}

// ToolResult is what a client tool answers: MCP content blocks ({"type":"text","text":...}, images,
// resources), and whether the call failed. At most wire.MaxToolResultBytes encoded.
type ToolResult = wire.ToolResult

// MCPServerList is SessionOptions.MCPServers.
type MCPServerList = wire.MCPServerList

// ToolHandler runs one call of a client tool with the input the agent gave (a JSON object). An error
// becomes an error result carrying its message.
type ToolHandler func(ctx context.Context, input json.RawMessage) (ToolResult, error)

// Tool is one client tool.
type Tool struct {
	Name        string // [a-zA-Z0-9_-], at most 64
	Description string
	// InputSchema is the JSON Schema of the input; nil accepts any object.
	InputSchema json.RawMessage
	Handler     ToolHandler
	// Timeout is how long the runner waits for this tool's answer (1 s to 30 min; 0: its default, 5 min).
	// Past it the agent gets an error result and the session an error event with code timeout.
	Timeout time.Duration
}

// ToolServer groups client tools under one MCP server name.
type ToolServer struct {
	// Name is 1 to 64 of [a-zA-Z0-9_-], without "__" and not ending with "_": the agent reads
	// mcp__<server>__<tool> up to the first "__", so such a name would name another server's tools.
	Name    string
	Version string
	Tools   []Tool
}

// MCPServer is the server's entry for SessionOptions.MCPServers. It has no type (a server with tools is a
// client server), so its tool_calls name the tools as declared (docs/PROTOCOL.md#host-tools).
func (t *ToolServer) MCPServer() wire.MCPServer {
	s := wire.MCPServer{Name: t.Name, Version: t.Version}
	for _, tool := range t.Tools {
		s.Tools = append(s.Tools, wire.MCPTool{Name: tool.Name, Description: tool.Description, InputSchema: tool.InputSchema,
			TimeoutMs: tool.Timeout.Milliseconds()})
	}
	return s
}

// Validate checks the server's entry as the edge does at init (names, bounds): an invalid_argument *Error
// naming the field, or nil.
func (t *ToolServer) Validate() error {
	return wire.SessionOptions{MCPServers: MCPServerList{t.MCPServer()}}.Validate()
}

// lookup finds the tool a call is for by the name the agent called (mcp__<server>__<tool>), which every
// runner sends (ToolCall.AgentName), whichever name the call's toolName is. A server whose name does not
// read back (ValidMCPServerName) handles nothing: mcp__app__lookup__x is not server app__lookup's.
func (t *ToolServer) lookup(call ToolCall) (Tool, bool) {
	rest, ok := strings.CutPrefix(call.AgentName(), "mcp__"+t.Name+"__")
	if !ok || !wire.ValidMCPServerName(t.Name) {
		return Tool{}, false
	}
	for _, tool := range t.Tools {
		if tool.Name == rest {
			return tool, true
		}
	}
	return Tool{}, false
}

// TextResult is a result of one text block.
func TextResult(text string) ToolResult {
	b, _ := json.Marshal(map[string]string{"type": "text", "text": text})
	return ToolResult{Content: []json.RawMessage{b}}
}

// ErrorResult is a failed call's result, saying why.
func ErrorResult(msg string) ToolResult { return wire.ErrorToolResult(msg) }

// HandleToolCall answers ev when it is a tool_call of a tool one of servers declares: it runs the tool's
// handler (in this goroutine) and sends its result, an error result when the handler fails. handled is
// false for any other event, and for a call of a tool none of servers declares (the application may answer
// it itself with SendToolResult). err is a failure to send the result. The first answer to a call wins
// (another client of the session may have answered it first: that answer is refused with conflict). A call
// the runner sends again after a failover is not delivered twice by a Session (toolCalls), so a handler
// runs once per call.
func (s *Session) HandleToolCall(ctx context.Context, ev Event, servers ...*ToolServer) (handled bool, err error) {
	call, ok := ev.ToolCall()
	if !ok {
		return false, nil
	}
	for _, srv := range servers {
		tool, ok := srv.lookup(call)
		if !ok {
			continue
		}
		res, herr := runTool(ctx, tool, call.Input)
		if herr != nil {
			res = ErrorResult(herr.Error())
		}
		if err := s.SendToolResult(ctx, call.CallID, res.Content, res.IsError); err != nil {
			return true, fmt.Errorf("warren: answer tool call %s (%s): %w", call.CallID, call.AgentName(), err)
		}
		return true, nil
	}
	return false, nil
}

// runTool runs a handler; a missing one is an error.
func runTool(ctx context.Context, tool Tool, input json.RawMessage) (ToolResult, error) {
	if tool.Handler == nil {
		return ToolResult{}, fmt.Errorf("tool %s has no handler", tool.Name)
	}
	if len(input) == 0 {
		input = json.RawMessage("{}")
	}
	return tool.Handler(ctx, input)
}

// Bounds of toolCalls.
const (
	maxDeliveredCalls = 1024 // callIds remembered
	maxKeptAnswers    = 32   // answers kept to send again (the runner holds at most 16 calls pending)
)

// toolCalls remembers, per Session and across its reconnects, the tool_call callIds delivered to the
// application and its latest answers. After a failover the runner sends the calls still pending again
// (with new seqs, so the seq check does not drop them): a repeat of a delivered call is dropped, so a
// handler runs once per call; when the application's answer to it was sent (on the lost connection, where
// it may never have arrived), that answer is sent again instead.
type toolCalls struct {
	mu        sync.Mutex
	delivered map[string]struct{}
	order     []string // delivered, oldest first
	answers   map[string]toolResultMsg
	answered  []string // answers, oldest first
}

type toolResultMsg struct {
	Content []json.RawMessage `json:"content"`
	IsError bool              `json:"isError,omitempty"`
}

// deliver records a tool_call's callId; false when it was delivered before, with the answer sent to it if
// one is kept.
func (c *toolCalls) deliver(callID string) (first bool, answer *toolResultMsg) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.delivered[callID]; ok {
		if a, ok := c.answers[callID]; ok {
			return false, &a
		}
		return false, nil
	}
	if c.delivered == nil {
		c.delivered = make(map[string]struct{})
	}
	c.delivered[callID] = struct{}{}
	c.order = append(c.order, callID)
	if len(c.order) > maxDeliveredCalls {
		delete(c.delivered, c.order[0])
		c.order = slices.Delete(c.order, 0, 1)
	}
	return true, nil
}

// answer keeps the latest answers sent.
func (c *toolCalls) answer(callID string, r toolResultMsg) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.answers == nil {
		c.answers = make(map[string]toolResultMsg)
	}
	if _, ok := c.answers[callID]; !ok {
		c.answered = append(c.answered, callID)
	}
	c.answers[callID] = r
	if len(c.answered) > maxKeptAnswers {
		delete(c.answers, c.answered[0])
		c.answered = slices.Delete(c.answered, 0, 1)
	}
}

// repeatedToolCall says whether ev is a tool_call this Session delivered already (to be dropped); when
// the application had answered it, the answer is sent again in the background.
func (s *Session) repeatedToolCall(ev Event) bool {
	if ev.Type != wire.TypeToolCall {
		return false
	}
	call, ok := ev.ToolCall()
	if !ok || call.CallID == "" {
		return false
	}
	first, answer := s.calls.deliver(call.CallID)
	if !first && answer != nil {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = s.sendToolResult(ctx, call.CallID, *answer)
		}()
	}
	return !first
}
