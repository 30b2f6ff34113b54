package session

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/warren-mesh/warren/internal/wire"
)

// serversAgent emits, at every turn, the names of the MCP servers the turn's options carry.
type serversAgent struct{}

func (serversAgent) Run(_ context.Context, turn Turn, emit func([]byte)) error {
	var names []string
	for _, s := range turn.Options.MCPServers {
		names = append(names, s.Name+":"+s.Tools[0].Name)
	}
	b, _ := json.Marshal(map[string]any{"type": "servers", "names": strings.Join(names, ",")})
	emit(b)
	return nil
}

// turnServers prompts on p and returns the servers the turn ran with.
func turnServers(t *testing.T, p *pipeConn) string {
	t.Helper()
	p.send(`{"type":"user","message":{"role":"user","content":"hi"}}`)
	msgs := recvUntil(t, p, isType("servers"))
	s, _ := msgs[len(msgs)-1]["names"].(string)
	return s
}

// attach sends init on p and reads its handshake up to the session_info after ready.
func attach(t *testing.T, p *pipeConn, init string) {
	t.Helper()
	p.send(`{"type":"init","payload":` + init + `}`)
	ready := false
	recvUntil(t, p, func(m map[string]any) bool {
		if d, _ := payload(m)["action"].(string); d == "ready" {
			ready = true
			return false
		}
		return ready
	})
}

func hostInit(session, server, tool string) string {
	return `{"role":"host","root":"/home/u/proj","sessionId":"` + session + `","mcpServers":[{"name":"` + server +
		`","tools":[{"name":"` + tool + `"}]}]}`
}

// TestHostAttaches: a host attaching to a session another client opened adds its tools, from the next
// turn; a host coming back replaces them; a host may not take a server name the session's own options
// use (conflict), declare anything but client tools when attaching, or declare no tools; and a plain
// client's reconnect changes nothing.
func TestHostAttaches(t *testing.T) {
	h := newHub(t, Config{Agent: serversAgent{}})
	a, _ := serve(t, h)
	attach(t, a, `{"sessionId":"s1","mcpServers":[{"name":"app","tools":[{"name":"lookup"}]}]}`)
	if got := turnServers(t, a); got != "app:lookup" {
		t.Fatalf("before the host: %q", got)
	}

	host, _ := serve(t, h)
	attach(t, host, hostInit("s1", "host", "HostRead"))
	if got := turnServers(t, a); got != "app:lookup,host:HostRead" {
		t.Fatalf("with the host: %q", got)
	}
	host.Close(nil)

	again, _ := serve(t, h)
	attach(t, again, hostInit("s1", "host", "HostBash"))
	if got := turnServers(t, a); got != "app:lookup,host:HostBash" {
		t.Fatalf("with the host back: %q", got)
	}

	plain, _ := serve(t, h)
	attach(t, plain, `{"sessionId":"s1","mcpServers":[{"name":"other","tools":[{"name":"x"}]}]}`)
	if got := turnServers(t, plain); got != "app:lookup,host:HostBash" {
		t.Fatalf("after a plain reconnect: %q", got)
	}

	for init, code := range map[string]wire.Code{
		hostInit("s1", "app", "steal"): wire.Conflict,
		`{"role":"host","sessionId":"s1","mcpServers":[{"name":"h2","tools":[{"name":"t"}]},{"name":"fs","command":"mcp-fs"}]}`: wire.InvalidArgument,
		`{"role":"host","sessionId":"s1"}`:                                    wire.InvalidArgument,
		`{"role":"guest","mcpServers":[{"name":"h","tools":[{"name":"t"}]}]}`: wire.InvalidArgument,
		`{"root":"/x"}`: wire.InvalidArgument,
	} {
		p, wait := serve(t, h)
		p.send(`{"type":"init","payload":` + init + `}`)
		m := p.recv(t)
		if m["type"] != "error" || payload(m)["code"] != string(code) {
			t.Errorf("init %s: %v, want %s", init, m, code)
		}
		if err := wait(); err == nil {
			t.Errorf("init %s: the connection stays", init)
		}
	}
	if got := turnServers(t, a); got != "app:lookup,host:HostBash" {
		t.Fatalf("after refused hosts: %q", got)
	}

	// A host may open its own session; its role and root are the connection's, not the session's.
	own, _ := serve(t, h)
	attach(t, own, `{"role":"host","root":"/r","mcpServers":[{"name":"host","tools":[{"name":"HostGlob"}]}]}`)
	if got := turnServers(t, own); got != "host:HostGlob" {
		t.Fatalf("the host's own session: %q", got)
	}
}

// callAgent calls tool once per turn and emits what it got back.
type callAgent struct{ tool string }

func (a callAgent) Run(ctx context.Context, turn Turn, emit func([]byte)) error {
	r := turn.Tools.CallTool(ctx, ToolCall{Name: a.tool, Input: json.RawMessage(`{}`)})
	b, _ := json.Marshal(map[string]any{"type": "tool_outcome", "result": r})
	emit(b)
	return nil
}

// TestHostToolWithoutHost: a host tool called while a host is attached is a tool_call its host answers;
// called while no host is attached, the agent gets an error result at once (nobody could answer before the
// timeout) and no tool_call is sent.
func TestHostToolWithoutHost(t *testing.T) {
	h := newHub(t, Config{Agent: callAgent{tool: "mcp__host__HostRead"}})
	host, hostGone := serve(t, h)
	attach(t, host, `{"role":"host","sessionId":"s1","mcpServers":[{"name":"host","tools":[{"name":"HostRead"}]}]}`)
	host.send(`{"type":"user","message":{"role":"user","content":"read"}}`)
	msgs := recvUntil(t, host, isType("tool_call"))
	callID, _ := payload(msgs[len(msgs)-1])["callId"].(string)
	host.send(toolResultMsg(callID, "from the host"))
	msgs = recvUntil(t, host, isType("tool_outcome"))
	if b, _ := json.Marshal(msgs[len(msgs)-1]); !strings.Contains(string(b), "from the host") {
		t.Fatalf("with the host: %s", b)
	}
	host.Close(nil)
	_ = hostGone() // detached

	a, _ := serve(t, h)
	attach(t, a, `{"sessionId":"s1"}`)
	a.send(`{"type":"user","message":{"role":"user","content":"read"}}`)
	msgs = recvUntil(t, a, isType("tool_outcome"))
	for _, m := range msgs {
		if m["type"] == "tool_call" {
			t.Fatalf("a tool_call was sent with no host attached: %v", m)
		}
	}
	if b, _ := json.Marshal(msgs[len(msgs)-1]); !strings.Contains(string(b), "no host is connected") || !strings.Contains(string(b), `"isError":true`) {
		t.Fatalf("without the host: %s", b)
	}
}
