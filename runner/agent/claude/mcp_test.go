package claude

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/testenv"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner/session"
)

// recordingTools is a session.ToolCaller that answers every call with result and records it.
type recordingTools struct {
	mu     sync.Mutex
	calls  []session.ToolCall
	result wire.ToolResult
}

func (r *recordingTools) CallTool(_ context.Context, c session.ToolCall) wire.ToolResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, c)
	return r.result
}

func textResult(text string) wire.ToolResult {
	b, _ := json.Marshal(map[string]string{"type": "text", "text": text})
	return wire.ToolResult{Content: []json.RawMessage{b}}
}

var lookupServer = wire.MCPServer{Name: "app", Tools: []wire.MCPTool{{
	Name: "lookup", Description: "Looks a word up", InputSchema: json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"}}}`),
}}}

// lastToolResult is the last message the model was given: after a tool call, its tool_result.
func lastToolResult(t *testing.T, r *rig) string {
	t.Helper()
	msg, n := r.ms.LastMessage()
	if n < 2 || !strings.Contains(string(msg), `"tool_result"`) {
		t.Fatalf("%d model requests, the last ending with %s: want a tool_result after the tool call", n, msg)
	}
	return string(msg)
}

// TestClientToolThroughTheBridge: the real CLI sees a client tool as mcp__app__lookup, calls it through
// the runner's MCP bridge, and the client's answer is the tool_result of the next model request; an error
// result reaches the model as an error.
func TestClientToolThroughTheBridge(t *testing.T) {
	r := newRig(t)
	d := r.driver(t, "", nil)
	opts := wire.SessionOptions{MCPServers: wire.MCPServerList{lookupServer}}
	tools := &recordingTools{result: textResult("LOOKUP-ANSWER-42")}
	id := session.NewID()
	tr := runTurn(t, context.Background(), d, session.Turn{SessionID: id, Options: opts, Message: userMessage(`call mcp__app__lookup {"q":"warren"}`), Tools: tools}, "call", nil)
	mustSucceed(t, tr)
	if init := tr.events[0]; !containsAny(init["tools"].([]any), "mcp__app__lookup") {
		t.Fatalf("init tools %v lack mcp__app__lookup", init["tools"])
	}
	if len(tools.calls) != 1 || tools.calls[0].Name != "mcp__app__lookup" || !strings.Contains(string(tools.calls[0].Input), `"warren"`) ||
		!strings.HasPrefix(tools.calls[0].ToolUseID, "toolu_") {
		t.Fatalf("calls %+v", tools.calls)
	}
	if msg := lastToolResult(t, r); !strings.Contains(msg, "LOOKUP-ANSWER-42") || strings.Contains(msg, `"is_error":true`) {
		t.Fatalf("tool_result sent to the model: %s", msg)
	}

	// The same process, next turn: a failed call (what a timeout gives) is an error result for the model.
	tools.result = wire.ErrorToolResult("the client did not answer in time")
	mustSucceed(t, runTurn(t, context.Background(), d, session.Turn{SessionID: id, Options: opts, Message: userMessage(`call mcp__app__lookup {"q":"again"}`), Tools: tools}, "call", nil))
	if msg := lastToolResult(t, r); !strings.Contains(msg, "did not answer in time") || !strings.Contains(msg, `"is_error":true`) {
		t.Fatalf("error tool_result sent to the model: %s", msg)
	}
	if d.processCount() != 1 {
		t.Errorf("%d processes, want the session's one", d.processCount())
	}
}

// blockingTools is a session.ToolCaller that never answers: it signals the call and waits for its end.
type blockingTools struct{ called chan struct{} }

func (b blockingTools) CallTool(ctx context.Context, _ session.ToolCall) wire.ToolResult {
	close(b.called)
	<-ctx.Done()
	return wire.ErrorToolResult("cancelled")
}

// TestClientToolInterrupted: interrupting a turn that waits for a client tool ends the call and the turn
// (the CLI's own result, not a kill), and the process takes the next turn with the conversation.
func TestClientToolInterrupted(t *testing.T) {
	r := newRig(t)
	d := r.driver(t, "", nil)
	opts := wire.SessionOptions{MCPServers: wire.MCPServerList{lookupServer}}
	id := session.NewID()
	ctx, cancel := context.WithCancel(context.Background())
	tools := blockingTools{called: make(chan struct{})}
	go func() {
		<-tools.called
		cancel()
	}()
	tr := runTurn(t, ctx, d, session.Turn{SessionID: id, Options: opts, Message: userMessage(`call mcp__app__lookup {"q":"stuck"}`), Tools: tools}, "call", nil)
	if !errors.Is(tr.err, context.Canceled) {
		t.Fatalf("interrupted turn returned %v", tr.err)
	}
	tr.result(t)
	pid := d.pid(id)
	if pid == 0 {
		t.Fatal("the interrupt killed the process; the CLI should have ended the turn itself")
	}
	mustSucceed(t, run(t, context.Background(), d, id, opts, "are you there"))
	reqs := mainRequests(r.ms)
	if text := messagesText(reqs[len(reqs)-1]); !strings.Contains(text, "are you there") || !strings.Contains(text, "stuck") || d.pid(id) != pid {
		t.Errorf("next turn: pid %d (was %d), model given %.500s", d.pid(id), pid, text)
	}
}

// TestStdioMCPServer: a stdio MCP server given in mcpServers runs inside the sandbox; the model calls its
// tool and the server's answer reaches the next model request.
func TestStdioMCPServer(t *testing.T) {
	r := newRig(t)
	script := testenv.ShoutMCPServer(t, r.ws)
	d := r.driver(t, "", nil)
	opts := wire.SessionOptions{MCPServers: wire.MCPServerList{{Name: "loud", Command: "python3", Args: []string{"/workspace/" + script}}}}
	tr := run(t, context.Background(), d, session.NewID(), opts, `call mcp__loud__shout {"text":"hello"}`)
	mustSucceed(t, tr)
	if msg := lastToolResult(t, r); !strings.Contains(msg, "stdio-mcp:HELLO!") {
		t.Fatalf("tool_result sent to the model: %s", msg)
	}
}

// TestHTTPMCPServer: an http MCP server is reached from inside the sandbox under its egress policy: one the
// sandbox may reach (here a forwarded loopback port) answers the model's call, with the configured headers;
// one on the host's loopback, which no sandbox reaches, gets no request and its tool does not exist for
// the agent.
func TestHTTPMCPServer(t *testing.T) {
	r := newRig(t)
	near, far := testenv.StartHTTPMCPServer(t), testenv.StartHTTPMCPServer(t)
	r.forward = []string{near.URL}
	d := r.driver(t, "", nil)
	opts := wire.SessionOptions{MCPServers: wire.MCPServerList{
		{Name: "web", Type: wire.MCPHTTP, URL: near.URL, Headers: map[string]string{"Authorization": "Bearer mcp-secret"}},
		{Name: "far", Type: wire.MCPHTTP, URL: far.URL},
	}}
	id := session.NewID()
	mustSucceed(t, run(t, context.Background(), d, id, opts, `call mcp__web__shout {"text":"net"}`))
	if msg := lastToolResult(t, r); !strings.Contains(msg, "http-mcp:NET!") {
		t.Fatalf("tool_result sent to the model: %s", msg)
	}
	if auths := near.Auths(); len(auths) == 0 || auths[0] != "Bearer mcp-secret" {
		t.Errorf("the server got Authorization %q", auths)
	}
	if os.Geteuid() != 0 {
		t.Log("not root: the sandbox shares the host's network, so the egress half is not tried")
		return
	}
	mustSucceed(t, run(t, context.Background(), d, id, opts, `call mcp__far__shout {"text":"out"}`))
	if msg := lastToolResult(t, r); strings.Contains(msg, "http-mcp:") || !strings.Contains(msg, `"is_error":true`) {
		t.Fatalf("a server on the host's loopback answered from inside the sandbox: %s", msg)
	}
	if n := len(far.Auths()); n != 0 {
		t.Fatalf("the host's loopback server got %d requests from inside the sandbox", n)
	}
}

// TestMCPPermissions: the token's permissions bind MCP servers: a blocked server or tool is refused before
// any process starts, a server the token's sdkConfig declares is always there and cannot be replaced, and
// a blocked tool of an allowed server stays disallowed.
func TestMCPPermissions(t *testing.T) {
	client := wire.MCPServerList{lookupServer}
	for name, c := range map[string]struct {
		perm Permissions
		sdk  string
		want string // "" accepted
	}{
		"blocked server":          {perm: Permissions{BlockedTools: []string{"mcp__app"}}, want: "blocked by this token"},
		"blocked server wildcard": {perm: Permissions{BlockedTools: []string{"mcp__app__*"}}, want: "blocked by this token"},
		"blocked tool":            {perm: Permissions{BlockedTools: []string{"mcp__app__lookup"}}, want: "mcp__app__lookup is blocked"},
		"tools list without it":   {perm: Permissions{Tools: []string{"Read"}}, want: "not among them"},
		"tools list with it":      {perm: Permissions{Tools: []string{"Read", "mcp__app__lookup"}}},
		"tools list with server":  {perm: Permissions{Tools: []string{"mcp__app"}}},
		"token's server name":     {sdk: `{"mcpServers":{"app":{"command":"x"}}}`, want: "is the token's"},
		"token's server added":    {sdk: `{"mcpServers":{"tok":{"command":"x"}}}`},
	} {
		t.Run(name, func(t *testing.T) {
			sdk, err := parseSDKConfig(json.RawMessage(c.sdk))
			if err != nil {
				t.Fatal(err)
			}
			o, err := effectiveOptions(wire.SessionOptions{MCPServers: client}, sdk, c.perm, "", nil)
			if c.want != "" {
				if wire.CodeOf(err) != wire.InvalidArgument || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("effectiveOptions = %v, want invalid_argument with %q", err, c.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			args := strings.Join(cliArgs(o, launch{SessionID: "s"}), " ")
			if !strings.Contains(args, `"app":{"name":"app","type":"sdk"}`) || !strings.Contains(args, "--allowedTools=mcp__app") {
				t.Errorf("args %s: want the client server as an sdk server, allowed", args)
			}
			if c.sdk != "" && !strings.Contains(args, `"tok":{"args":[],"command":"x","type":"stdio"}`) {
				t.Errorf("args %s: want the token's server", args)
			}
			for _, a := range cliArgs(o, launch{SessionID: "s"}) {
				if strings.HasPrefix(a, "--tools=") && strings.Contains(a, "mcp__") {
					t.Errorf("%s: --tools names built-in tools only", a)
				}
			}
		})
	}
	// A blocked tool of an allowed external server stays in --disallowedTools whatever the client allows.
	o, err := effectiveOptions(wire.SessionOptions{AllowedTools: []string{"mcp__ext__rm"}, MCPServers: wire.MCPServerList{{Name: "ext", Type: "http", URL: "https://mcp.example.com"}}},
		nil, Permissions{BlockedTools: []string{"mcp__ext__rm"}}, "", nil)
	if err != nil || !strings.Contains(strings.Join(cliArgs(o, launch{SessionID: "s"}), " "), "--disallowedTools=mcp__ext__rm") || len(o.AllowedTools) != 0 {
		t.Fatalf("blocked tool of an external server: %v %+v", err, o)
	}
}

// TestBridgeRefusesHostileCalls: calls the CLI could be made to send (it runs in the tenant's sandbox) are
// answered without reaching the client: an undeclared tool, an oversize input, a server that is not a
// client server, a call between turns, a malformed message.
func TestBridgeRefusesHostileCalls(t *testing.T) {
	tools := &recordingTools{result: textResult("ok")}
	var out []string
	b := newMCPBridge([]wire.MCPServer{lookupServer, {Name: "ext", Command: "x"}}, func(l []byte) error { out = append(out, string(l)); return nil }, slog.New(slog.DiscardHandler))
	req := func(server, msg string) string {
		return `{"type":"control_request","request_id":"r","request":{"subtype":"mcp_message","server_name":"` + server + `","message":` + msg + `}}`
	}
	call := func(name, args string) string {
		return req("app", `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"`+name+`","arguments":`+args+`}}`)
	}
	end := b.begin(context.Background(), tools)
	for line, want := range map[string]string{
		call("rm", `{}`): `"isError":true`,
		call("lookup", `{"q":"`+strings.Repeat("x", MaxToolInput)+`"}`):  "exceeds",
		req("ext", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`):     `"subtype":"error"`,
		req("app", `{"jsonrpc":"2.0","id":{},"method":"tools/list"}`):    `"subtype":"error"`,
		req("app", `{"jsonrpc":"2.0","id":1,"method":"resources/list"}`): `-32601`,
		req("app", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`):     `"inputSchema":{"type":"object","properties":{"q":{"type":"string"}}}`,
	} {
		out = nil
		b.handle([]byte(line))
		if len(out) != 1 || !strings.Contains(out[0], want) || !strings.Contains(out[0], `"request_id":"r"`) {
			t.Errorf("%.100s: answered %.300q, want one answer with %s", line, out, want)
		}
	}
	end()
	out = nil
	b.handle([]byte(call("lookup", `{"q":"between turns"}`)))
	if len(out) != 1 || !strings.Contains(out[0], "no turn is running") {
		t.Errorf("call between turns: %q", out)
	}
	if len(tools.calls) != 0 {
		t.Errorf("refused calls reached the client: %+v", tools.calls)
	}
}

func FuzzParseMCPRequest(f *testing.F) {
	for _, s := range []string{
		`{"type":"control_request","request_id":"r1","request":{"subtype":"mcp_message","server_name":"app","message":{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"lookup","arguments":{"q":"x"},"_meta":{"claudecode/toolUseId":"toolu_1"}}}}}`,
		`{"type":"control_request","request_id":"r2","request":{"subtype":"mcp_message","server_name":"app","message":{"jsonrpc":"2.0","method":"notifications/initialized"}}}`,
		`{"type":"control_request","request_id":"r3","request":{"subtype":"mcp_message","server_name":"app","message":{"id":"a","method":"tools/list"}}}`,
		`{"type":"control_request","request_id":"r4","request":{"subtype":"mcp_message","message":{"id":{},"method":"x"}}}`,
		`{"type":"control_request"}`, `null`, `{`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		req, err := parseMCPRequest(line)
		if err != nil {
			return
		}
		if req.RequestID == "" || len(req.RequestID) > maxRequestID || req.Message.Method == "" {
			t.Fatalf("accepted %+v", req)
		}
		if id := req.Message.ID; len(id) > 0 && !json.Valid(id) {
			t.Fatalf("invalid id %q", id)
		}
		// Whatever is accepted gets an answer that is one line of valid JSON.
		b := &mcpBridge{servers: map[string]wire.MCPServer{"app": lookupServer}, log: slog.New(slog.DiscardHandler)}
		var out [][]byte
		b.write = func(l []byte) error { out = append(out, l); return nil }
		b.handle(line)
		b.calls.Wait()
		for _, l := range out {
			if !json.Valid(l) || strings.Contains(string(l), "\n") {
				t.Fatalf("answer %q", l)
			}
		}
	})
}

// The CLI reads mcp__<server>__<tool> with the server name up to the first "__". A server named with "__"
// (app__lookup) would make mcp__app__lookup, a tool a token allows, read as "the whole server app__lookup".

// TestStdioServerNamedLikeAllowedClientTool: permissions.tools = [Read, mcp__app__lookup] allows one client
// tool and no Bash. A stdio server named app__lookup is refused (invalid_argument naming the field) and its
// tool never runs; before the fix checkMCP took mcp__app__lookup for the whole server and the agent ran
// mcp__app__lookup__shout in the sandbox.
func TestStdioServerNamedLikeAllowedClientTool(t *testing.T) {
	r := newRig(t)
	script := testenv.ShoutMCPServer(t, r.ws)
	d := r.driver(t, "", func(c *Config) { c.Permissions = Permissions{Tools: []string{"Read", "mcp__app__lookup"}} })
	opts := wire.SessionOptions{MCPServers: wire.MCPServerList{{Name: "app__lookup", Command: "python3", Args: []string{"/workspace/" + script}}}}
	tr := run(t, context.Background(), d, session.NewID(), opts, `call mcp__app__lookup__shout {"text":"bypass"}`)
	if wire.CodeOf(tr.err) != wire.InvalidArgument || !strings.Contains(tr.err.Error(), "mcpServers[0].name") {
		t.Errorf("turn err = %v, want invalid_argument naming mcpServers[0].name", tr.err)
	}
	if msg, n := r.ms.LastMessage(); n > 0 && strings.Contains(string(msg), "stdio-mcp:BYPASS!") {
		t.Fatalf("a stdio server the token does not list ran its tool for the agent: %s", msg)
	}
}

// TestClientServerNameCannotAllowTokenTool: the token's sdkConfig declares a stdio server "loud" and runs
// the agent in dontAsk mode allowing no tool, so the agent may not call mcp__loud__shout. A client server
// named "loud__shout" is refused; before the fix the runner added --allowedTools=mcp__loud__shout for it,
// which the CLI reads as server "loud", tool "shout", and the token server's tool ran.
func TestClientServerNameCannotAllowTokenTool(t *testing.T) {
	r := newRig(t)
	script := testenv.ShoutMCPServer(t, r.ws)
	sdk := json.RawMessage(`{"permissionMode":"dontAsk","allowedTools":[],"mcpServers":{"loud":{"command":"python3","args":["/workspace/` + script + `"]}}}`)
	d := r.driver(t, "", func(c *Config) { c.SDKConfig = sdk })
	prompt := `call mcp__loud__shout {"text":"allowed"}`

	// Control: without a client server the CLI denies the call.
	tr := run(t, context.Background(), d, session.NewID(), wire.SessionOptions{}, prompt)
	mustSucceed(t, tr)
	if msg := lastToolResult(t, r); strings.Contains(msg, "stdio-mcp:ALLOWED!") || !strings.Contains(msg, "denied") {
		t.Fatalf("control: the token server's tool was not denied in dontAsk mode: %s", msg)
	}

	opts := wire.SessionOptions{MCPServers: wire.MCPServerList{{Name: "loud__shout", Tools: []wire.MCPTool{{Name: "x"}}}}}
	tr = run(t, context.Background(), d, session.NewID(), opts, prompt)
	if wire.CodeOf(tr.err) != wire.InvalidArgument {
		t.Errorf("turn err = %v, want invalid_argument", tr.err)
	}
	if msg, _ := r.ms.LastMessage(); strings.Contains(string(msg), "stdio-mcp:ALLOWED!") {
		t.Fatalf("the client's server name allowed the token server's tool: %s", msg)
	}
}

// TestWorkspaceMCPServersNotLoaded: permissions.tools = [Read] allows no MCP tool. The tenant can write a
// project .mcp.json into its workspace and a settings file approving it (enableAllProjectMcpServers) into
// its home; the CLI runs with --strict-mcp-config, so only the servers Warren passed (none) are loaded.
// Before the fix the CLI loaded the workspace's server and the agent called its tool.
func TestWorkspaceMCPServersNotLoaded(t *testing.T) {
	r := newRig(t)
	script := testenv.ShoutMCPServer(t, r.ws)
	if err := os.WriteFile(filepath.Join(r.ws, ".mcp.json"), []byte(`{"mcpServers":{"proj":{"command":"python3","args":["/workspace/`+script+`"]}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(r.home, ".claude"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.home, ".claude", "settings.json"), []byte(`{"enableAllProjectMcpServers":true}`), 0o644); err != nil {
		t.Fatal(err)
	}
	d := r.driver(t, "", func(c *Config) { c.Permissions = Permissions{Tools: []string{"Read"}} })
	tr := run(t, context.Background(), d, session.NewID(), wire.SessionOptions{}, `call mcp__proj__shout {"text":"workspace"}`)
	mustSucceed(t, tr)
	if msg := lastToolResult(t, r); strings.Contains(msg, "stdio-mcp:WORKSPACE!") {
		t.Fatalf("an MCP server from the workspace ran under permissions.tools [Read]: %s", msg)
	}
}

// silentTools is a client that never answers: each call waits until its turn ends.
type silentTools struct{}

func (silentTools) CallTool(ctx context.Context, _ session.ToolCall) wire.ToolResult {
	<-ctx.Done()
	return wire.ErrorToolResult("the turn ended")
}

func toolsCallLine(i int) []byte {
	return fmt.Appendf(nil, `{"type":"control_request","request_id":"r%d","request":{"subtype":"mcp_message","server_name":"app","message":{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"lookup","arguments":{}}}}}`, i, i)
}

// TestBridgeBoundsCallsInFlight: a CLI (or a sandbox process writing to its stdout) sends 20,000 tools/call
// while none is answered. The bridge runs at most maxBridgeCalls of them, each in a goroutine; the others
// are answered at once with an error result. Before the fix each call parked a goroutine holding its
// request.
func TestBridgeBoundsCallsInFlight(t *testing.T) {
	var mu sync.Mutex
	var answers []string
	b := newMCPBridge([]wire.MCPServer{lookupServer}, func(line []byte) error {
		mu.Lock()
		answers = append(answers, string(line))
		mu.Unlock()
		return nil
	}, slog.New(slog.DiscardHandler))
	end := b.begin(context.Background(), silentTools{})
	g0 := runtime.NumGoroutine()
	const n = 20000
	for i := range n {
		b.handle(toolsCallLine(i))
	}
	g := runtime.NumGoroutine() - g0
	mu.Lock()
	refused := len(answers)
	for _, a := range answers {
		if !strings.Contains(a, "too many client tool calls are in flight") || !strings.Contains(a, `"isError":true`) {
			t.Fatalf("answer past the bound: %s", a)
		}
	}
	mu.Unlock()
	done := make(chan struct{})
	go func() { end(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("end did not return after cancelling the calls")
	}
	if g > maxBridgeCalls+8 || refused != n-maxBridgeCalls {
		t.Errorf("%d tools/call: %d goroutines waiting, %d refused at once; want at most %d in flight", n, g, refused, maxBridgeCalls)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(answers) != n {
		t.Errorf("%d answers after end, want %d (every call answered)", len(answers), n)
	}
}

// TestBridgeStopsWritingToAStalledCLI: the CLI stops reading its stdin (SIGSTOP from a process of the
// sandbox): each answer's write fails after its timeout. The first failure stops the bridge writing, so
// end waits for one timeout, not one per call in flight (up to maxBridgeCalls × bridgeWriteTimeout).
func TestBridgeStopsWritingToAStalledCLI(t *testing.T) {
	const timeout = 100 * time.Millisecond
	var mu sync.Mutex // one write at a time, as cliProc.write
	writes := 0
	b := newMCPBridge([]wire.MCPServer{lookupServer}, func([]byte) error {
		mu.Lock()
		defer mu.Unlock()
		writes++
		time.Sleep(timeout)
		return errors.New("write deadline exceeded")
	}, slog.New(slog.DiscardHandler))
	end := b.begin(context.Background(), silentTools{})
	for i := range maxBridgeCalls {
		b.handle(toolsCallLine(i))
	}
	start := time.Now()
	end()
	if took := time.Since(start); took > 10*timeout {
		t.Errorf("end took %s with %d calls in flight and a CLI that does not read (%d writes tried)", took, maxBridgeCalls, writes)
	}
}

// TestClientToolBlockedByDeclaredName: a client server declared as Chucky's SDK declares it (no type) with
// get_weather and get_time, and disallowedTools naming get_weather as declared. The real CLI leaves
// get_weather out of its tools (system/init) and a model turn calling it gets an error result without the
// client being asked; get_time is called, its tool_call names it as declared (get_time, server
// client-tools), and the answer completes the turn. Before, "get_weather" went to --disallowedTools as is,
// blocked nothing, and the client was asked.
func TestClientToolBlockedByDeclaredName(t *testing.T) {
	r := newRig(t)
	d := r.driver(t, "", nil)
	opts := wire.SessionOptions{DisallowedTools: []string{"get_weather"}, MCPServers: wire.MCPServerList{weatherServers[0]}}
	tools := &recordingTools{result: textResult("TIME-IS-NOON")}
	id := session.NewID()
	tr := runTurn(t, context.Background(), d, session.Turn{SessionID: id, Options: opts, Message: userMessage(`call mcp__client-tools__get_weather {"city":"Paris"}`), Tools: tools}, "call", nil)
	mustSucceed(t, tr)
	if init := tr.events[0]; containsAny(init["tools"].([]any), "mcp__client-tools__get_weather") || !containsAny(init["tools"].([]any), "mcp__client-tools__get_time") {
		t.Fatalf("init tools %v: want mcp__client-tools__get_time and not the blocked get_weather", init["tools"])
	}
	if msg := lastToolResult(t, r); !strings.Contains(msg, `"is_error":true`) {
		t.Fatalf("the blocked tool's call was not refused: %s", msg)
	}
	if len(tools.calls) != 0 {
		t.Fatalf("the blocked tool reached the client: %+v", tools.calls)
	}

	mustSucceed(t, runTurn(t, context.Background(), d, session.Turn{SessionID: id, Options: opts, Message: userMessage(`call mcp__client-tools__get_time {}`), Tools: tools}, "call", nil))
	if len(tools.calls) != 1 || tools.calls[0].CallName != "get_time" || tools.calls[0].Server != "client-tools" || tools.calls[0].Name != "mcp__client-tools__get_time" {
		t.Fatalf("calls %+v: want get_time of client-tools", tools.calls)
	}
	if msg := lastToolResult(t, r); !strings.Contains(msg, "TIME-IS-NOON") {
		t.Fatalf("tool_result sent to the model: %s", msg)
	}
}

// TestBuiltinToolsCoverTheCLI: every tool the pinned CLI lists in system/init, with the default tool set
// and with an MCP server, is a name builtinTools knows, so a permission naming it is never refused.
func TestBuiltinToolsCoverTheCLI(t *testing.T) {
	r := newRig(t)
	script := testenv.ShoutMCPServer(t, r.ws)
	d := r.driver(t, "plain", nil)
	opts := wire.SessionOptions{MCPServers: wire.MCPServerList{{Name: "loud", Command: "python3", Args: []string{"/workspace/" + script}}}}
	tr := run(t, context.Background(), d, session.NewID(), opts, "hello")
	mustSucceed(t, tr)
	listed, _ := tr.events[0]["tools"].([]any)
	if len(listed) == 0 {
		t.Fatalf("system/init lists no tools: %v", tr.events[0])
	}
	for _, v := range listed {
		if name, _ := v.(string); !isMCPName(name) && !slices.Contains(builtinTools, name) {
			t.Errorf("the CLI lists %q, which builtinTools lacks: a permission naming it would be refused", name)
		}
	}
}
