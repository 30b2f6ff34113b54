package claude

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/warren-mesh/warren/internal/strictjson"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner/session"
)

// Client tools reach the agent as MCP servers hosted by the runner over the CLI's control protocol, the way
// the Claude Agent SDK hosts in-process ("sdk") MCP servers: --mcp-config declares each client server as
// {"type":"sdk","name":N}; the CLI then writes control_request {"subtype":"mcp_message","server_name":N,
// "message":<JSON-RPC>} lines on stdout (initialize, notifications/initialized, tools/list, tools/call) and
// reads the JSON-RPC answer back on stdin in a control_response {"response":{"mcp_response":...}}. The
// runner answers initialize and tools/list from the tools the client declared and turns tools/call into a
// tool_call to the client (session.ToolCaller).

// mcpConfig is the CLI's --mcp-config for the session's servers: client tool servers as "sdk" servers the
// runner answers, stdio/http/sse servers as given ("" when there is none).
func mcpConfig(servers []wire.MCPServer) string {
	if len(servers) == 0 {
		return ""
	}
	cfg := make(map[string]map[string]any, len(servers))
	for _, s := range servers {
		switch s.Kind() {
		case wire.MCPClient:
			cfg[s.Name] = map[string]any{"type": "sdk", "name": s.Name}
		case wire.MCPStdio:
			e := map[string]any{"type": "stdio", "command": s.Command, "args": s.Args}
			if s.Args == nil {
				e["args"] = []string{}
			}
			if len(s.Env) > 0 {
				e["env"] = s.Env
			}
			cfg[s.Name] = e
		case wire.MCPHTTP, wire.MCPSSE:
			e := map[string]any{"type": s.Kind(), "url": s.URL}
			if len(s.Headers) > 0 {
				e["headers"] = s.Headers
			}
			cfg[s.Name] = e
		}
	}
	b, _ := json.Marshal(map[string]any{"mcpServers": cfg}) // validated, compact: one argument
	return string(b)
}

// mcpRequest is an mcp_message control request from the CLI.
type mcpRequest struct {
	RequestID string
	Server    string
	Message   rpcMessage
}

// rpcMessage is the part of a JSON-RPC 2.0 message the bridge reads.
type rpcMessage struct {
	ID     json.RawMessage `json:"id,omitempty"` // absent for a notification
	Method string          `json:"method"`
	Params json.RawMessage `json:"params,omitempty"`
}

// MaxToolInput bounds the input of a client tool call: a larger one is refused with an error result and
// never sent to the client (a tool_call must fit the client's frames, wire.MaxFrame).
const MaxToolInput = 1 << 20

// maxRequestID bounds the control request id the bridge echoes back.
const maxRequestID = 256

// parseMCPRequest decodes a CLI stdout line that is a control_request with subtype mcp_message. The CLI
// runs in the tenant's sandbox, so the line is untrusted: ids are bounded, a JSON-RPC id must be a number
// or a string, and anything malformed is an error (answered as such, never acted on).
func parseMCPRequest(line []byte) (mcpRequest, error) {
	var env struct {
		Type      string `json:"type"`
		RequestID string `json:"request_id"`
		Request   struct {
			Subtype    string          `json:"subtype"`
			ServerName string          `json:"server_name"`
			Message    json.RawMessage `json:"message"`
		} `json:"request"`
	}
	if err := strictjson.Unmarshal(line, &env, strictjson.AllowInvalidUTF8); err != nil {
		return mcpRequest{}, fmt.Errorf("not a control request: %w", err)
	}
	if env.Type != "control_request" || env.Request.Subtype != "mcp_message" {
		return mcpRequest{}, errors.New("not an mcp_message control request")
	}
	if env.RequestID == "" || len(env.RequestID) > maxRequestID {
		return mcpRequest{}, errors.New("mcp_message without a valid request_id")
	}
	r := mcpRequest{RequestID: env.RequestID, Server: env.Request.ServerName}
	if err := strictjson.Unmarshal(env.Request.Message, &r.Message, strictjson.AllowInvalidUTF8); err != nil {
		return r, fmt.Errorf("mcp_message carries no JSON-RPC message: %w", err)
	}
	if id := bytes.TrimSpace(r.Message.ID); len(id) > 0 {
		if len(id) > maxRequestID || (id[0] != '"' && id[0] != '-' && (id[0] < '0' || id[0] > '9')) {
			return r, errors.New("JSON-RPC id must be a number or a string")
		}
		r.Message.ID = id
	}
	if r.Message.Method == "" {
		return r, errors.New("JSON-RPC message without a method")
	}
	return r, nil
}

// mcpBridge answers one CLI process's mcp_message requests for the session's client tool servers.
type mcpBridge struct {
	servers map[string]wire.MCPServer
	write   func(line []byte) error
	log     *slog.Logger

	mu       sync.Mutex
	caller   session.ToolCaller // the running turn's; nil between turns
	ctx      context.Context    // the running turn's
	calls    sync.WaitGroup     // tools/call in flight
	inflight int                // tools/call in flight: at most maxBridgeCalls

	writeMu sync.Mutex // one answer at a time
	broken  bool       // an answer could not be written: the CLI stopped reading, answers are dropped
}

// maxBridgeCalls bounds the tools/call a bridge runs at once, each in its own goroutine holding its request
// until the answer is written. The hub refuses past maxPendingCalls (16) waiting on the client; the rest
// of the margin is calls answered but not yet written. A call past the bound is answered at once with an
// error result, from the reading goroutine (no goroutine of its own): a CLI that keeps writing calls while
// it does not read its answers (stopped, or a sandbox process writing to its stdout) holds at most this
// many goroutines, and the reading goroutine waits on the write like any answer.
const maxBridgeCalls = 32

func newMCPBridge(servers []wire.MCPServer, write func([]byte) error, log *slog.Logger) *mcpBridge {
	b := &mcpBridge{servers: make(map[string]wire.MCPServer), write: write, log: log}
	for _, s := range servers {
		if s.Kind() == wire.MCPClient {
			b.servers[s.Name] = s
		}
	}
	return b
}

// begin makes caller the target of tool calls until the returned function is called; that function
// cancels the calls still in flight and waits until each has been answered.
func (b *mcpBridge) begin(ctx context.Context, caller session.ToolCaller) (end func()) {
	ctx, cancel := context.WithCancel(ctx)
	b.mu.Lock()
	b.caller, b.ctx = caller, ctx
	b.mu.Unlock()
	return func() {
		b.mu.Lock()
		b.caller, b.ctx = nil, nil
		b.mu.Unlock()
		cancel()
		b.calls.Wait()
	}
}

// handle answers one control_request line with subtype mcp_message. tools/call is answered from its own
// goroutine once the client has answered; everything else at once.
func (b *mcpBridge) handle(line []byte) {
	req, err := parseMCPRequest(line)
	if err != nil {
		b.log.Warn("malformed mcp_message from the agent", "err", err)
		if req.RequestID != "" {
			b.reply(controlError(req.RequestID, err.Error()))
		}
		return
	}
	srv, ok := b.servers[req.Server]
	if !ok {
		b.reply(controlError(req.RequestID, "no client tool server named "+truncate(req.Server, 64)))
		return
	}
	m := req.Message
	if len(m.ID) == 0 { // a notification: acknowledged as the Agent SDK does
		b.reply(mcpReply(req.RequestID, json.RawMessage("0"), map[string]any{}))
		return
	}
	switch m.Method {
	case "initialize":
		var p struct {
			ProtocolVersion string `json:"protocolVersion"`
		}
		_ = strictjson.Unmarshal(m.Params, &p, strictjson.AllowInvalidUTF8)
		if p.ProtocolVersion == "" || len(p.ProtocolVersion) > 32 {
			p.ProtocolVersion = "2025-06-18"
		}
		version := srv.Version
		if version == "" {
			version = "1.0.0"
		}
		b.reply(mcpReply(req.RequestID, m.ID, map[string]any{
			"protocolVersion": p.ProtocolVersion,
			"capabilities":    map[string]any{"tools": map[string]any{}},
			"serverInfo":      map[string]any{"name": srv.Name, "version": version},
		}))
	case "tools/list":
		tools := make([]map[string]any, 0, len(srv.Tools))
		for _, t := range srv.Tools {
			tools = append(tools, map[string]any{"name": t.Name, "description": t.Description, "inputSchema": t.ToolSchema()})
		}
		b.reply(mcpReply(req.RequestID, m.ID, map[string]any{"tools": tools}))
	case "tools/call":
		b.call(req, srv)
	case "ping":
		b.reply(mcpReply(req.RequestID, m.ID, map[string]any{}))
	default:
		b.reply(mcpRPCError(req.RequestID, m.ID, -32601, "method not found: "+truncate(m.Method, 64)))
	}
}

// call runs a tools/call through the turn's ToolCaller.
func (b *mcpBridge) call(req mcpRequest, srv wire.MCPServer) {
	var p struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
		Meta      struct {
			ToolUseID string `json:"claudecode/toolUseId"`
		} `json:"_meta"`
	}
	if err := strictjson.Unmarshal(req.Message.Params, &p, strictjson.AllowInvalidUTF8); err != nil {
		b.reply(mcpRPCError(req.RequestID, req.Message.ID, -32602, "invalid tools/call params"))
		return
	}
	i := slices.IndexFunc(srv.Tools, func(t wire.MCPTool) bool { return t.Name == p.Name })
	if i < 0 {
		b.reply(mcpReply(req.RequestID, req.Message.ID, wire.ErrorToolResult("unknown tool "+truncate(p.Name, 64))))
		return
	}
	if a := bytes.TrimSpace(p.Arguments); len(a) == 0 || a[0] != '{' {
		p.Arguments = json.RawMessage("{}")
	}
	if len(p.Arguments) > MaxToolInput {
		// It would not fit the client's frames; the agent is told, the client never sees it.
		b.reply(mcpReply(req.RequestID, req.Message.ID, wire.ErrorToolResult(fmt.Sprintf("the input of %s exceeds %d bytes", srv.ToolName(p.Name), MaxToolInput))))
		return
	}
	if !wire.ValidCallID(p.Meta.ToolUseID) {
		p.Meta.ToolUseID = ""
	}
	b.mu.Lock()
	caller, ctx, full := b.caller, b.ctx, b.inflight >= maxBridgeCalls
	if caller != nil && !full {
		b.calls.Add(1)
		b.inflight++
	}
	b.mu.Unlock()
	switch {
	case caller == nil:
		b.reply(mcpReply(req.RequestID, req.Message.ID, wire.ErrorToolResult("no turn is running")))
		return
	case full:
		b.reply(mcpReply(req.RequestID, req.Message.ID, wire.ErrorToolResult("too many client tool calls are in flight")))
		return
	}
	go func() {
		defer func() {
			b.mu.Lock()
			b.inflight--
			b.mu.Unlock()
			b.calls.Done()
		}()
		r := caller.CallTool(ctx, session.ToolCall{Name: srv.ToolName(p.Name), Server: srv.Name, CallName: srv.CallName(p.Name), Input: p.Arguments, ToolUseID: p.Meta.ToolUseID,
			Timeout: time.Duration(srv.Tools[i].TimeoutMs) * time.Millisecond})
		b.reply(mcpReply(req.RequestID, req.Message.ID, r))
	}()
}

// reply writes one answer to the CLI. Once a write has failed (the CLI did not read within
// bridgeWriteTimeout, or it is gone) the bridge stops writing: a partial line may be on its stdin already,
// and each further answer would wait the whole timeout again, one after the other, holding end.
func (b *mcpBridge) reply(line []byte) {
	b.writeMu.Lock()
	defer b.writeMu.Unlock()
	if b.broken {
		return
	}
	if err := b.write(line); err != nil {
		b.broken = true
		b.log.Warn("cannot answer the agent's mcp_message; further answers are dropped", "err", err)
	}
}

// mcpReply is a control_response carrying a JSON-RPC result.
func mcpReply(requestID string, id json.RawMessage, result any) []byte {
	return controlSuccess(requestID, map[string]any{"jsonrpc": "2.0", "id": id, "result": result})
}

// mcpRPCError is a control_response carrying a JSON-RPC error.
func mcpRPCError(requestID string, id json.RawMessage, code int, msg string) []byte {
	return controlSuccess(requestID, map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": code, "message": msg}})
}

func controlSuccess(requestID string, mcpResponse any) []byte {
	b, _ := json.Marshal(map[string]any{"type": "control_response", "response": map[string]any{
		"subtype": "success", "request_id": requestID, "response": map[string]any{"mcp_response": mcpResponse},
	}})
	return b
}

// controlError refuses a control request.
func controlError(requestID, msg string) []byte {
	b, _ := json.Marshal(map[string]any{"type": "control_response", "response": map[string]any{
		"subtype": "error", "request_id": requestID, "error": msg,
	}})
	return b
}

func truncate(s string, n int) string {
	if len(s) > n {
		s = s[:n]
	}
	return s
}

// bridgeWriteTimeout bounds one answer written to the CLI's stdin.
const bridgeWriteTimeout = 10 * time.Second
