package claude

import (
	"strings"
	"testing"

	"github.com/warren-mesh/warren/internal/wire"
)

// weatherServers are a client tool server as Chucky's SDK declares it (no type) and a stdio server.
var weatherServers = wire.MCPServerList{
	{Name: "client-tools", Version: "1.0.0", Tools: []wire.MCPTool{{Name: "get_weather", ExecuteIn: "client"}, {Name: "get_time", ExecuteIn: "client"}}},
	{Name: "loud", Command: "python3"},
}

// TestToolNamesAsWritten: in allowedTools, disallowedTools, permissions.tools and permissions.blockedTools
// a client tool's declared name means mcp__<server>__<tool>; built-in names, rules and the CLI's mcp__
// forms stay; a name that is no tool of the session is invalid_argument naming it. Before, a bare
// disallowedTools or blockedTools entry went to the CLI as is and blocked nothing, and permissions.tools
// naming a client tool bare refused the session.
func TestToolNamesAsWritten(t *testing.T) {
	type want struct {
		allowed, disallowed, tools string // flags; "-": absent
		err                        string // invalid_argument containing it
	}
	for name, c := range map[string]struct {
		client wire.SessionOptions
		perm   Permissions
		want   want
	}{
		"disallowed by declared name": {
			client: wire.SessionOptions{DisallowedTools: []string{"get_weather", "Bash(rm:*)"}},
			want:   want{allowed: "mcp__client-tools", disallowed: "mcp__client-tools__get_weather,Bash(rm:*)", tools: "-"},
		},
		"allowed by declared name": {
			client: wire.SessionOptions{AllowedTools: []string{"get_time", "Read", "mcp__loud__shout", "mcp__loud", "mcp__loud__*"}},
			want:   want{allowed: "mcp__client-tools__get_time,Read,mcp__loud__shout,mcp__loud,mcp__loud__*,mcp__client-tools", disallowed: "-", tools: "-"},
		},
		"token blocks a declared tool": {
			perm: Permissions{BlockedTools: []string{"get_weather"}},
			want: want{err: "mcp__client-tools__get_weather is blocked by this token"},
		},
		"token blocks a built-in": {
			perm: Permissions{BlockedTools: []string{"WebFetch"}},
			want: want{allowed: "mcp__client-tools", disallowed: "WebFetch", tools: "-"},
		},
		"token lists declared tools": {
			perm: Permissions{Tools: []string{"Read", "get_weather", "get_time", "mcp__loud"}},
			want: want{allowed: "mcp__client-tools", disallowed: "-", tools: "Read"},
		},
		"token lists one of two": {
			perm: Permissions{Tools: []string{"Read", "get_weather", "mcp__loud"}},
			want: want{err: "mcp__client-tools__get_time is not among them"},
		},
		"unknown disallowed name": {
			client: wire.SessionOptions{DisallowedTools: []string{"bash"}},
			want:   want{err: `session option disallowedTools: "bash" names no tool`},
		},
		"unknown allowed name": {
			client: wire.SessionOptions{AllowedTools: []string{"get_wether"}},
			want:   want{err: `session option allowedTools: "get_wether" names no tool`},
		},
		"unknown blocked name": {
			perm: Permissions{BlockedTools: []string{"get_wether"}},
			want: want{err: `permissions.blockedTools: "get_wether" names no tool`},
		},
		"unknown tools name": {
			perm: Permissions{Tools: []string{"Read", "Reed"}},
			want: want{err: `permissions.tools: "Reed" names no tool`},
		},
		"stdio tool by bare name": {
			client: wire.SessionOptions{DisallowedTools: []string{"shout"}},
			want:   want{err: "mcp__<server>__<tool>"},
		},
		"rule on a client tool": {
			client: wire.SessionOptions{DisallowedTools: []string{"get_weather(paris)"}},
			want:   want{err: "takes no rule"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			client := c.client
			client.MCPServers = weatherServers
			o, err := effectiveOptions(client, nil, c.perm, "", nil)
			if c.want.err != "" {
				if wire.CodeOf(err) != wire.InvalidArgument || !strings.Contains(err.Error(), c.want.err) {
					t.Fatalf("err %v, want invalid_argument with %q", err, c.want.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			args := cliArgs(o, launch{SessionID: "s"})
			for flagName, w := range map[string]string{"allowedTools": c.want.allowed, "disallowedTools": c.want.disallowed, "tools": c.want.tools} {
				got, ok := flag(args, flagName)
				if !ok {
					got = "-"
				}
				if got != w {
					t.Errorf("--%s = %q, want %q", flagName, got, w)
				}
			}
		})
	}
}

// TestToolNamesOfTwoServers: a name two client servers declare means both tools, and a client tool named
// like a built-in names both.
func TestToolNamesOfTwoServers(t *testing.T) {
	servers := []wire.MCPServer{
		{Name: "a", Tools: []wire.MCPTool{{Name: "lookup"}, {Name: "Bash"}}},
		{Name: "b", Tools: []wire.MCPTool{{Name: "lookup"}}},
	}
	got, err := resolveToolRules("disallowedTools", []string{"lookup", "Bash", "lookup"}, servers)
	if want := "mcp__a__lookup,mcp__b__lookup,Bash,mcp__a__Bash"; err != nil || strings.Join(got, ",") != want {
		t.Fatalf("resolved %v (%v), want %s", got, err, want)
	}
	if got, err := resolveToolRules("tools", []string{}, servers); err != nil || got == nil || len(got) != 0 {
		t.Errorf("an empty list resolves to %#v, %v: want an empty list (no tool), not nil (no restriction)", got, err)
	}
}
