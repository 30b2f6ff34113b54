package claude

import (
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/warren-mesh/warren/internal/wire"
)

func mustSDK(t *testing.T, s string) map[string]json.RawMessage {
	t.Helper()
	m, err := parseSDKConfig(json.RawMessage(s))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// flag returns the value of --name=value in args, and whether it is there.
func flag(args []string, name string) (string, bool) {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
		if a == "--"+name {
			return "", true
		}
	}
	return "", false
}

func TestEffectiveOptions(t *testing.T) {
	type want struct {
		flags   map[string]string // flag → value; "" for a bare flag
		absent  []string
		errCode wire.Code
	}
	tests := []struct {
		name   string
		client wire.SessionOptions
		sdk    string
		perm   Permissions
		model  string
		betas  []string // what the model proxy allows
		want   want
	}{
		{
			name: "defaults",
			want: want{
				flags:  map[string]string{"permission-mode": "bypassPermissions", "session-id": "11111111-2222-4333-8444-555555555555"},
				absent: []string{"model", "tools", "allowedTools", "disallowedTools", "max-turns", "system-prompt", "append-system-prompt", "include-partial-messages"},
			},
		},
		{
			name:  "default model",
			model: "claude-default",
			want:  want{flags: map[string]string{"model": "claude-default"}},
		},
		{
			name: "client options",
			client: wire.SessionOptions{
				Model: "m1", FallbackModel: "m2", MaxTurns: 7, MaxThinkingTokens: 1024, MaxBudgetUSD: 0.5,
				AllowedTools: []string{"Bash(git *)", "Edit"}, DisallowedTools: []string{"WebFetch"},
				PermissionMode: "acceptEdits", IncludePartialMessages: true,
				SystemPrompt: &wire.SystemPrompt{Text: "--be terse"},
				OutputFormat: json.RawMessage(`{"type":"json_schema","schema":{ "type": "object" }}`),
			},
			want: want{flags: map[string]string{
				"model": "m1", "fallback-model": "m2", "max-turns": "7", "max-thinking-tokens": "1024", "max-budget-usd": "0.5",
				"allowedTools": "Bash(git *),Edit", "disallowedTools": "WebFetch", "permission-mode": "acceptEdits",
				"include-partial-messages": "", "system-prompt": "--be terse", "json-schema": `{"type":"object"}`,
			}},
		},
		{
			name:   "preset with append",
			client: wire.SessionOptions{SystemPrompt: &wire.SystemPrompt{Type: "preset", Preset: "claude_code", Append: "Be brief."}},
			want:   want{flags: map[string]string{"append-system-prompt": "Be brief."}, absent: []string{"system-prompt"}},
		},
		{
			name:   "preset without dynamic sections",
			client: wire.SessionOptions{SystemPrompt: &wire.SystemPrompt{Type: "preset", Preset: "claude_code", ExcludeDynamicSections: true}},
			want:   want{flags: map[string]string{"exclude-dynamic-system-prompt-sections": ""}, absent: []string{"system-prompt", "append-system-prompt"}},
		},
		{
			name:   "preset without append",
			client: wire.SessionOptions{SystemPrompt: &wire.SystemPrompt{Type: "preset", Preset: "claude_code"}},
			want:   want{absent: []string{"system-prompt", "append-system-prompt"}},
		},
		{
			name:   "permissions model forces the model and drops another fallback",
			client: wire.SessionOptions{Model: "opus", FallbackModel: "sonnet"},
			sdk:    `{"model":"sdk-model"}`,
			perm:   Permissions{Model: "haiku"},
			model:  "default",
			want:   want{flags: map[string]string{"model": "haiku"}, absent: []string{"fallback-model"}},
		},
		{
			name:   "sdkConfig overrides the client",
			client: wire.SessionOptions{Model: "opus", PermissionMode: "plan", MaxTurns: 3, Env: map[string]string{"A": "1"}},
			sdk:    `{"model":"sonnet","permissionMode":"dontAsk","systemPrompt":"Only Go.","sessionId":"ignored"}`,
			want:   want{flags: map[string]string{"model": "sonnet", "permission-mode": "dontAsk", "max-turns": "3", "system-prompt": "Only Go."}},
		},
		{
			name:   "maxTurns is a cap",
			client: wire.SessionOptions{MaxTurns: 50},
			perm:   Permissions{MaxTurns: 10},
			want:   want{flags: map[string]string{"max-turns": "10"}},
		},
		{
			name:   "maxTurns below the cap stays",
			client: wire.SessionOptions{MaxTurns: 4},
			sdk:    `{"maxTurns":8}`,
			perm:   Permissions{MaxTurns: 10},
			want:   want{flags: map[string]string{"max-turns": "8"}},
		},
		{
			name: "maxTurns cap without a client value",
			perm: Permissions{MaxTurns: 10},
			want: want{flags: map[string]string{"max-turns": "10"}},
		},
		{
			name:   "blocked tools are always disallowed and removed elsewhere",
			client: wire.SessionOptions{Tools: []string{"Bash", "Read", "Write"}, AllowedTools: []string{"Bash(ls)", "Read"}, DisallowedTools: []string{"WebFetch"}},
			sdk:    `{"disallowedTools":["WebSearch"]}`,
			perm:   Permissions{BlockedTools: []string{"Bash", "WebFetch"}},
			want: want{flags: map[string]string{
				"tools": "Read,Write", "allowedTools": "Read", "disallowedTools": "WebSearch,Bash,WebFetch",
			}},
		},
		{
			name:   "token tools bound the client's",
			client: wire.SessionOptions{Tools: []string{"Bash", "Read", "WebFetch"}, AllowedTools: []string{"Bash(git *)", "WebFetch"}},
			perm:   Permissions{Tools: []string{"Read", "Bash", "Edit"}},
			want:   want{flags: map[string]string{"tools": "Bash,Read", "allowedTools": "Bash(git *)"}},
		},
		{
			name: "token tools without client tools",
			perm: Permissions{Tools: []string{"Read", "Grep", "Read"}, BlockedTools: []string{"Grep"}},
			want: want{flags: map[string]string{"tools": "Read", "disallowedTools": "Grep"}},
		},
		{
			name: "empty token tools means none",
			perm: Permissions{Tools: []string{}},
			want: want{flags: map[string]string{"tools": ""}},
		},
		{
			name:   "client default tool set under token tools",
			client: wire.SessionOptions{Tools: []string{"default"}},
			perm:   Permissions{Tools: []string{"Read"}},
			want:   want{flags: map[string]string{"tools": "Read"}},
		},
		{
			name: "agent SDK options map to the CLI",
			client: wire.SessionOptions{
				Thinking: &wire.ThinkingConfig{Type: "enabled", BudgetTokens: 4096}, Effort: "high",
				AllowDangerouslySkipPermissions: true, IncludeHookEvents: true,
				Agents: map[string]wire.AgentDefinition{"rev": {Description: "Reviews", Prompt: "You review.", Tools: []string{"Read"}}},
				Agent:  "rev", Betas: []string{"context-1m-2025-08-07"}, SettingSources: []string{"project", "user"},
				AdditionalDirectories: []string{"/tmp/extra"}, StrictMCPConfig: true,
			},
			betas: []string{"context-1m-2025-08-07"},
			want: want{flags: map[string]string{
				"max-thinking-tokens": "4096", "effort": "high", "allow-dangerously-skip-permissions": "",
				"include-hook-events": "", "agents": `{"rev":{"description":"Reviews","prompt":"You review.","tools":["Read"]}}`,
				"agent": "rev", "betas": "context-1m-2025-08-07", "setting-sources": "project,user",
				"add-dir": "/tmp/extra", "strict-mcp-config": "",
			}},
		},
		{
			// Chucky Cloud's TypeScript SDK: {name, description, systemPrompt, tools}, here in sdkConfig.
			name: "sdkConfig agents in Chucky's shape reach --agents in the CLI's",
			sdk:  `{"agents":{"rev":{"name":"rev","description":"Reviews","systemPrompt":"You review.","tools":["Read"],"maxTurns":2}}}`,
			want: want{flags: map[string]string{"agents": `{"rev":{"description":"Reviews","prompt":"You review.","tools":["Read"],"maxTurns":2}}`}},
		},
		{
			// Chucky Cloud's token types sdkConfig.outputFormat as a string.
			name: "sdkConfig outputFormat as the object's JSON in a string",
			sdk:  `{"outputFormat":"{\"type\":\"json_schema\",\"schema\":{\"type\":\"object\"}}"}`,
			want: want{flags: map[string]string{"json-schema": `{"type":"object"}`}},
		},
		{
			name:   "sdkConfig outputFormat text is plain text: no schema",
			client: wire.SessionOptions{OutputFormat: json.RawMessage(`{"type":"json_schema","schema":{"type":"object"}}`)},
			sdk:    `{"outputFormat":"text"}`,
			want:   want{absent: []string{"json-schema"}},
		},
		{
			name: "sdkConfig agents naming another key are refused",
			sdk:  `{"agents":{"rev":{"name":"other","description":"Reviews","systemPrompt":"You review."}}}`,
			want: want{errCode: wire.InvalidArgument},
		},
		{
			name:   "thinking disabled and no setting source",
			client: wire.SessionOptions{Thinking: &wire.ThinkingConfig{Type: "disabled"}, SettingSources: []string{}},
			want:   want{flags: map[string]string{"thinking": "disabled", "setting-sources": ""}, absent: []string{"max-thinking-tokens"}},
		},
		{
			name:   "adaptive thinking",
			client: wire.SessionOptions{Thinking: &wire.ThinkingConfig{Type: "adaptive"}},
			want:   want{flags: map[string]string{"thinking": "enabled"}, absent: []string{"setting-sources"}},
		},
		{
			name:   "a beta the model proxy refuses",
			client: wire.SessionOptions{Betas: []string{"files-api-2025-04-14"}},
			betas:  []string{"context-1m-2025-08-07"},
			want:   want{errCode: wire.InvalidArgument},
		},
		{
			name: "sdkConfig betas pass the model proxy's policy too",
			sdk:  `{"betas":["files-api-2025-04-14"]}`,
			want: want{errCode: wire.InvalidArgument},
		},
		{
			name:   "a subagent may not use a tool the token does not allow",
			client: wire.SessionOptions{Agents: map[string]wire.AgentDefinition{"a": {Description: "d", Prompt: "p", Tools: []string{"Bash"}}}},
			perm:   Permissions{Tools: []string{"Read"}},
			want:   want{errCode: wire.InvalidArgument},
		},
		{
			name:   "a subagent may not use a blocked tool",
			client: wire.SessionOptions{Agents: map[string]wire.AgentDefinition{"a": {Description: "d", Prompt: "p", Tools: []string{"Bash(ls)"}}}},
			perm:   Permissions{BlockedTools: []string{"Bash"}},
			want:   want{errCode: wire.InvalidArgument},
		},
		{
			name:   "a subagent may not name another model than the token's",
			client: wire.SessionOptions{Agents: map[string]wire.AgentDefinition{"a": {Description: "d", Prompt: "p", Model: "opus"}}},
			perm:   Permissions{Model: "claude-haiku-4-5"},
			want:   want{errCode: wire.InvalidArgument},
		},
		{
			name:   "a subagent naming the alias of the token's model",
			client: wire.SessionOptions{Agents: map[string]wire.AgentDefinition{"a": {Description: "d", Prompt: "p", Model: "sonnet"}}},
			perm:   Permissions{Model: PinnedModel("sonnet")},
			want:   want{flags: map[string]string{"model": "claude-sonnet-5-5"}},
		},
		{
			name:   "a subagent naming the alias of another model",
			client: wire.SessionOptions{Agents: map[string]wire.AgentDefinition{"a": {Description: "d", Prompt: "p", Model: "opus"}}},
			perm:   Permissions{Model: PinnedModel("sonnet")},
			want:   want{errCode: wire.InvalidArgument},
		},
		{
			name:   "a subagent inheriting the token's model",
			client: wire.SessionOptions{Agents: map[string]wire.AgentDefinition{"a": {Description: "d", Prompt: "p", Model: "inherit", Tools: []string{"Read"}}}},
			perm:   Permissions{Model: "claude-haiku-4-5", Tools: []string{"Read"}},
			want:   want{flags: map[string]string{"agents": `{"a":{"description":"d","prompt":"p","tools":["Read"],"model":"inherit"}}`}},
		},
		{
			name: "sdkConfig tools preset",
			sdk:  `{"tools":{"type":"preset","preset":"claude_code"}}`,
			perm: Permissions{BlockedTools: []string{"Bash"}},
			want: want{flags: map[string]string{"disallowedTools": "Bash"}, absent: []string{"tools"}},
		},
		{
			name:   "sdkConfig keeps an empty tools list: no built-in tool",
			client: wire.SessionOptions{Tools: []string{}},
			sdk:    `{"model":"m"}`,
			want:   want{flags: map[string]string{"tools": ""}},
		},
		{
			name: "sdkConfig with an unknown option is refused, not dropped",
			sdk:  `{"model":"m","frobnicate":1}`,
			want: want{errCode: wire.InvalidArgument},
		},
		{
			name:   "bad permission mode",
			client: wire.SessionOptions{PermissionMode: "yolo"},
			want:   want{errCode: wire.InvalidArgument},
		},
		{
			name:   "sdkConfig permission mode is validated too",
			client: wire.SessionOptions{},
			sdk:    `{"permissionMode":"yolo"}`,
			want:   want{errCode: wire.InvalidArgument},
		},
		{
			name:   "negative max turns",
			client: wire.SessionOptions{MaxTurns: -1},
			want:   want{errCode: wire.InvalidArgument},
		},
		{
			name:   "tool name that looks like a flag",
			client: wire.SessionOptions{AllowedTools: []string{"--dangerously-skip-permissions"}},
			want:   want{errCode: wire.InvalidArgument},
		},
		{
			name:   "reserved env",
			client: wire.SessionOptions{Env: map[string]string{"ANTHROPIC_BASE_URL": "http://evil"}},
			want:   want{errCode: wire.InvalidArgument},
		},
		{
			name:   "provider switch env",
			client: wire.SessionOptions{Env: map[string]string{"CLAUDE_CODE_USE_BEDROCK": "1"}},
			want:   want{errCode: wire.InvalidArgument},
		},
		{
			name:   "home env",
			client: wire.SessionOptions{Env: map[string]string{"HOME": "/tmp"}},
			want:   want{errCode: wire.InvalidArgument},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var sdk map[string]json.RawMessage
			if tt.sdk != "" {
				if err := json.Unmarshal([]byte(tt.sdk), &sdk); err != nil {
					t.Fatal(err)
				}
			}
			o, err := effectiveOptions(tt.client, sdk, tt.perm, tt.model, func(b string) bool { return slices.Contains(tt.betas, b) })
			if tt.want.errCode != "" {
				if wire.CodeOf(err) != tt.want.errCode {
					t.Fatalf("err = %v, want %s", err, tt.want.errCode)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			args := cliArgs(o, launch{SessionID: "11111111-2222-4333-8444-555555555555"})
			if !slices.Equal(args[:4], []string{"-p", "--input-format=stream-json", "--output-format=stream-json", "--verbose"}) {
				t.Errorf("args start %q", args[:4])
			}
			for f, v := range tt.want.flags {
				got, ok := flag(args, f)
				if !ok || got != v {
					t.Errorf("--%s = %q (present %v), want %q; args %q", f, got, ok, v, args)
				}
			}
			for _, f := range tt.want.absent {
				if _, ok := flag(args, f); ok {
					t.Errorf("--%s present in %q", f, args)
				}
			}
		})
	}
}

func TestEffectiveOptionsDoesNotModifyTheClient(t *testing.T) {
	client := wire.SessionOptions{
		Tools: []string{"Bash", "Read"}, Env: map[string]string{"A": "1"},
		SystemPrompt: &wire.SystemPrompt{Type: "preset", Preset: "claude_code", Append: "x"},
	}
	_, err := effectiveOptions(client, mustSDK(t, `{"env":{"B":"2"},"systemPrompt":"replaced"}`), Permissions{BlockedTools: []string{"Bash"}}, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(client.Tools, []string{"Bash", "Read"}) || len(client.Env) != 1 || client.SystemPrompt.Append != "x" || client.SystemPrompt.Text != "" {
		t.Fatalf("client options modified: %+v %+v", client, client.SystemPrompt)
	}
}

func TestParseSDKConfig(t *testing.T) {
	for _, s := range []string{"", "null", " {} ", `{"model":"x"}`} {
		if _, err := parseSDKConfig(json.RawMessage(s)); err != nil {
			t.Errorf("parseSDKConfig(%q) = %v", s, err)
		}
	}
	for _, s := range []string{"[]", `{"maxTurns":"many"}`, "{", `{"frobnicate":true}`, `{"settings":"{}"}`, `{"mcpServers":{"s":{"type":"ws"}}}`} {
		if _, err := parseSDKConfig(json.RawMessage(s)); err == nil {
			t.Errorf("parseSDKConfig(%q) accepted", s)
		}
	}
}

func TestLaunchArgs(t *testing.T) {
	o, err := effectiveOptions(wire.SessionOptions{}, nil, Permissions{}, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	const id, src = "11111111-2222-4333-8444-555555555555", "99999999-2222-4333-8444-555555555555"
	join := func(l launch) string { return strings.Join(cliArgs(o, l), " ") }
	if got := join(launch{SessionID: id}); !strings.Contains(got, "--session-id="+id) || strings.Contains(got, "--resume") {
		t.Errorf("new: %s", got)
	}
	if got := join(launch{SessionID: id, Resume: true}); !strings.Contains(got, "--resume="+id) || strings.Contains(got, "--session-id") {
		t.Errorf("resume: %s", got)
	}
	if got := join(launch{SessionID: id, ForkFrom: src}); !strings.Contains(got, "--resume="+src+" --fork-session --session-id="+id) {
		t.Errorf("fork: %s", got)
	}
	if got := join(launch{SessionID: id, Resume: true, ResumeAt: src}); !strings.Contains(got, "--resume="+id+" --resume-session-at="+src) {
		t.Errorf("resume at: %s", got)
	}
	if got := join(launch{SessionID: id, ResumeAt: src}); strings.Contains(got, "--resume-session-at") {
		t.Errorf("resume-session-at without a resume: %s", got)
	}
}

// TestLaunchArgsStrictMCPConfig: the CLI always runs with --strict-mcp-config, whether or not the client
// asked, so the workspace's .mcp.json and the settings files the tenant can write add no MCP server past
// checkMCP (TestWorkspaceMCPServersNotLoaded runs the attack).
func TestLaunchArgsStrictMCPConfig(t *testing.T) {
	for _, client := range []wire.SessionOptions{{}, {MCPServers: wire.MCPServerList{lookupServer}}, {StrictMCPConfig: true}} {
		o, err := effectiveOptions(client, nil, Permissions{}, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		args := cliArgs(o, launch{SessionID: "11111111-2222-4333-8444-555555555555"})
		if v, ok := flag(args, "strict-mcp-config"); !ok || v != "" || slices.Index(args, "--strict-mcp-config") != slices.IndexFunc(args, func(a string) bool { return strings.Contains(a, "strict-mcp") }) {
			t.Errorf("args %q: want --strict-mcp-config once", args)
		}
	}
}

// TestEffectiveOptionsRefusesAmbiguousServerNames: the CLI reads mcp__<server>__<tool> up to the first
// "__". A server name with "__" would pass a permission naming one tool as "the whole server" (stdio or
// http server app__lookup under permissions.tools [mcp__app__lookup]) or put a tool of the token's server
// into --allowedTools (client server db__drop_table next to the token's db): both are refused, as a name
// ending with "_" is, for the client's servers and the token's sdkConfig ones.
func TestEffectiveOptionsRefusesAmbiguousServerNames(t *testing.T) {
	perm := Permissions{Tools: []string{"Read", "mcp__app__lookup"}}
	for _, s := range []wire.MCPServer{
		{Name: "app__lookup", Command: "sh", Args: []string{"-c", "echo pwned"}},
		{Name: "app__lookup", Type: "http", URL: "https://attacker.example/mcp"},
		{Name: "app_", Tools: []wire.MCPTool{{Name: "_lookup"}}},
	} {
		o, err := effectiveOptions(wire.SessionOptions{MCPServers: wire.MCPServerList{s}}, nil, perm, "", nil)
		if wire.CodeOf(err) != wire.InvalidArgument || !strings.Contains(err.Error(), "mcpServers[0].name") {
			t.Errorf("%s server %q under permissions.tools %v: err %v, --mcp-config %s", s.Kind(), s.Name, perm.Tools, err, mcpConfig(o.MCPServers))
		}
	}

	sdk, err := parseSDKConfig(json.RawMessage(`{"permissionMode":"dontAsk","allowedTools":["mcp__db__select"],
		"mcpServers":{"db":{"type":"http","url":"https://db.example/mcp"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	client := wire.SessionOptions{MCPServers: wire.MCPServerList{{Name: "db__drop_table", Tools: []wire.MCPTool{{Name: "x"}}}}}
	o, err := effectiveOptions(client, sdk, Permissions{}, "", nil)
	if wire.CodeOf(err) != wire.InvalidArgument || slices.Contains(o.AllowedTools, "mcp__db__drop_table") {
		t.Errorf("client server db__drop_table: err %v, --allowedTools %s", err, strings.Join(o.AllowedTools, ","))
	}

	if _, err := parseSDKConfig(json.RawMessage(`{"mcpServers":{"db__x":{"type":"http","url":"https://db.example/mcp"}}}`)); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "name") {
		t.Errorf("sdkConfig server db__x: err %v, want ErrConfig naming the name", err)
	}

	// checkMCP guards on its own (its verdict depends on the names reading back).
	if err := checkMCP([]wire.MCPServer{{Name: "app__lookup", Command: "sh"}}, perm); wire.CodeOf(err) != wire.InvalidArgument {
		t.Errorf("checkMCP(app__lookup) = %v", err)
	}
}

func TestAgentEnv(t *testing.T) {
	env := agentEnv(map[string]string{"FOO": "client", "BAR": "client"}, map[string]string{"BAR": "config", "ANTHROPIC_CUSTOM_HEADERS": "X-A: b"}, HomeMount, "http://proxy", "sess-token")
	want := map[string]string{
		"FOO": "client", "BAR": "config", "ANTHROPIC_CUSTOM_HEADERS": "X-A: b",
		"HOME": "/home/sandbox", "CLAUDE_CONFIG_DIR": "/home/sandbox/.claude", "TMPDIR": "/tmp",
		"ANTHROPIC_BASE_URL": "http://proxy", "ANTHROPIC_API_KEY": "sess-token", "IS_SANDBOX": "1",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1",
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s = %q, want %q", k, env[k], v)
		}
	}
}

func TestCLISessionID(t *testing.T) {
	const u = "0b8f7c1e-9d2a-4c3b-8e4f-5a6b7c8d9e0f"
	if got := cliSessionID(u); got != u {
		t.Errorf("a UUID maps to %q", got)
	}
	a, b := cliSessionID("my-chat"), cliSessionID("my-chat")
	if a != b || !isUUID(a) || a == cliSessionID("my-chat2") || a[14] != '5' {
		t.Errorf("name-based ids: %q %q", a, b)
	}
	if got := cliSessionID(strings.ToUpper(u)); got == strings.ToUpper(u) || !isUUID(got) {
		t.Errorf("uppercase UUID maps to %q", got)
	}
}

func TestUserLine(t *testing.T) {
	parent := "toolu_1"
	m := wire.ClientMessage{
		Type: "user", SessionID: "client-view", UUID: "0b8f7c1e-9d2a-4c3b-8e4f-5a6b7c8d9e0f", ParentToolUseID: &parent,
		Message: json.RawMessage("{\n  \"role\": \"user\",\n  \"content\": \"hi\"\n}"),
	}
	b, err := userLine(m, "11111111-2222-4333-8444-555555555555")
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type":"user","message":{"role":"user","content":"hi"},"parent_tool_use_id":"toolu_1","session_id":"11111111-2222-4333-8444-555555555555","uuid":"0b8f7c1e-9d2a-4c3b-8e4f-5a6b7c8d9e0f"}`
	if string(b) != want {
		t.Errorf("line\n%s\nwant\n%s", b, want)
	}
	m.ParentToolUseID, m.UUID = nil, "not-a-uuid"
	b, _ = userLine(m, "s")
	if !strings.Contains(string(b), `"parent_tool_use_id":null`) || strings.Contains(string(b), "uuid") {
		t.Errorf("line %s", b)
	}
	if _, err := userLine(wire.ClientMessage{Type: "control"}, "s"); wire.CodeOf(err) != wire.InvalidArgument {
		t.Errorf("non-user message: %v", err)
	}
}

func TestTranscriptHas(t *testing.T) {
	const id = "0b8f7c1e-9d2a-4c3b-8e4f-5a6b7c8d9e0f"
	path := t.TempDir() + "/t.jsonl"
	// The entry straddles the 1 MiB read boundary.
	pad := strings.Repeat("x", 1<<20-5)
	if err := os.WriteFile(path, []byte(pad+`{"uuid":"`+id+`"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if !transcriptHas(path, id) {
		t.Error("an entry across the chunk boundary was not found")
	}
	if transcriptHas(path, "1b8f7c1e-9d2a-4c3b-8e4f-5a6b7c8d9e0f") || transcriptHas("", id) || transcriptHas(path+".missing", id) {
		t.Error("found what is not there")
	}
}
