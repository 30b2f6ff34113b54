package wire

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// TestMCPServersAccepted: both forms (a list with names, the Agent SDK's object keyed by name) and every
// kind decode to the same entries.
func TestMCPServersAccepted(t *testing.T) {
	o, err := DecodeSessionOptions(json.RawMessage(`{"mcpServers":{
		"app":{"type":"sdk","tools":[{"name":"lookup","description":"d","inputSchema":{"type":"object"}}]},
		"files":{"command":"python3","args":["srv.py"],"env":{"A_B":"1"}},
		"web":{"type":"http","url":"https://mcp.example.com/x","headers":{"Authorization":"Bearer t"}},
		"ev":{"type":"sse","url":"http://mcp.example.com/sse"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]string{}
	for _, s := range o.MCPServers {
		kinds[s.Name] = s.Kind()
	}
	want := map[string]string{"app": MCPClient, "files": MCPStdio, "web": MCPHTTP, "ev": MCPSSE}
	for n, k := range want {
		if kinds[n] != k {
			t.Errorf("server %s: kind %q, want %q (all: %v)", n, kinds[n], k, kinds)
		}
	}
	l, err := DecodeSessionOptions(json.RawMessage(`{"mcpServers":[{"name":"app","tools":[{"name":"lookup","executeIn":"client"}]}]}`))
	if err != nil || len(l.MCPServers) != 1 || l.MCPServers[0].Kind() != MCPClient || l.MCPServers[0].ToolName("lookup") != "mcp__app__lookup" {
		t.Fatalf("list form: %+v, %v", l.MCPServers, err)
	}
	// The list survives the JSON round trip the sdkConfig overlay makes.
	b, _ := json.Marshal(o)
	back, err := DecodeSessionOptions(b)
	if err != nil || len(back.MCPServers) != 4 {
		t.Fatalf("round trip: %v %+v", err, back.MCPServers)
	}
}

// TestMCPServerNamesReadBack: a server name is refused when the agent's tool names mcp__<server>__<tool>
// would not read back as that server (the CLI takes the server up to the first "__"); single underscores
// and a leading one are fine, and a tool name may contain "__" (it is everything after the server's).
func TestMCPServerNamesReadBack(t *testing.T) {
	for _, name := range []string{"app", "a_b", "_app", "a-b", "A1_b-2"} {
		if _, err := DecodeSessionOptions(json.RawMessage(`{"mcpServers":[{"name":"` + name + `","tools":[{"name":"x__y_"}]}]}`)); err != nil {
			t.Errorf("server %q refused: %v", name, err)
		}
	}
	for _, name := range []string{"a__b", "__a", "a__", "a_", "_"} {
		if ValidMCPServerName(name) {
			t.Errorf("ValidMCPServerName(%q) = true", name)
		}
	}
}

// TestMCPServersRefused: hostile configs are invalid_argument naming the field.
func TestMCPServersRefused(t *testing.T) {
	many := `{"mcpServers":[`
	for i := range MaxMCPServers + 1 {
		if i > 0 {
			many += ","
		}
		many += `{"name":"s` + strings.Repeat("x", i) + `","command":"c"}`
	}
	many += `]}`
	tools := `{"mcpServers":[{"name":"s","tools":[`
	for i := range MaxMCPTools + 1 {
		if i > 0 {
			tools += ","
		}
		tools += `{"name":"t` + strings.Repeat("x", i%60) + string(rune('a'+i/60)) + `"}`
	}
	tools += `]}]}`
	big := strings.Repeat("x", maxMCPArg+1)
	cases := map[string]string{
		many:  "mcpServers: at most",
		tools: "mcpServers[0].tools",
		`{"mcpServers":[{"name":"a b","command":"x"}]}`:                                            "mcpServers[0].name",
		`{"mcpServers":[{"name":"a/../b","command":"x"}]}`:                                         "mcpServers[0].name",
		`{"mcpServers":[{"name":"","command":"x"}]}`:                                               "mcpServers[0].name",
		`{"mcpServers":[{"name":"a","command":"x"},{"name":"a","command":"y"}]}`:                   "mcpServers[1].name",
		`{"mcpServers":{"a":{"name":"b","command":"x"}}}`:                                          "mcpServers.a.name",
		`{"mcpServers":[{"name":"a","type":"ws","url":"ws://x"}]}`:                                 "mcpServers[0].type",
		`{"mcpServers":[{"name":"a","url":"http://x"}]}`:                                           "mcpServers[0].type",
		`{"mcpServers":[{"name":"a","type":"http","url":"file:///etc/passwd"}]}`:                   "mcpServers[0].url",
		`{"mcpServers":[{"name":"a","type":"sse","url":"javascript:alert(1)"}]}`:                   "mcpServers[0].url",
		`{"mcpServers":[{"name":"a","type":"http","url":"http://x","command":"sh"}]}`:              "mcpServers[0].command",
		`{"mcpServers":[{"name":"a","type":"http","url":"http://x","headers":{"A\nB":"v"}}]}`:      "mcpServers[0].headers",
		`{"mcpServers":[{"name":"a","type":"http","url":"http://x","headers":{"A":"v\r\nX: y"}}]}`: "mcpServers[0].headers.A",
		`{"mcpServers":[{"name":"a","type":"stdio"}]}`:                                             "mcpServers[0].command",
		`{"mcpServers":[{"name":"a","command":"x\u0000y"}]}`:                                       "mcpServers[0].command",
		`{"mcpServers":[{"name":"a","command":"x","args":["` + big + `"]}]}`:                       "mcpServers[0].args[0]",
		`{"mcpServers":[{"name":"a","command":"x","env":{"A=B":"v"}}]}`:                            "mcpServers[0].env.A=B",
		`{"mcpServers":[{"name":"a","command":"x","tools":[{"name":"t"}]}]}`:                       "mcpServers[0].tools",
		`{"mcpServers":[{"name":"a"}]}`:                                                            "mcpServers[0].tools",
		`{"mcpServers":[{"name":"a","tools":[{"name":"t"}],"url":"http://x"}]}`:                    "mcpServers[0]",
		`{"mcpServers":[{"name":"a","tools":[{"name":"t t"}]}]}`:                                   "mcpServers[0].tools[0].name",
		`{"mcpServers":[{"name":"a","tools":[{"name":"t"},{"name":"t"}]}]}`:                        "mcpServers[0].tools[1].name",
		`{"mcpServers":[{"name":"a","tools":[{"name":"t","inputSchema":"x"}]}]}`:                   "mcpServers[0].tools[0].inputSchema",
		`{"mcpServers":[{"name":"a","tools":[{"name":"t","executeIn":"host"}]}]}`:                  "mcpServers[0].tools[0].executeIn",
		`{"mcpServers":[{"name":"a","tools":[{"name":"t","frobnicate":1}]}]}`:                      "frobnicate",
		`{"mcpServers":[{"name":"a","tools":[{"name":"t","timeoutMs":10}]}]}`:                      "mcpServers[0].tools[0].timeoutMs",
		`{"mcpServers":[{"name":"a","tools":[{"name":"t","timeoutMs":1900000}]}]}`:                 "mcpServers[0].tools[0].timeoutMs",
		`{"mcpServers":{"a":{"command":"x","cwd":"/"}}}`:                                           "mcpServers.a",
		`{"mcpServers":"x"}`: "mcpServers",
		// mcp__<server>__<tool> is read up to the first "__": these would name another server's tools.
		`{"mcpServers":[{"name":"app__lookup","command":"x"}]}`:                         "mcpServers[0].name",
		`{"mcpServers":[{"name":"app__lookup","type":"http","url":"https://x"}]}`:       "mcpServers[0].name",
		`{"mcpServers":[{"name":"db__drop_table","tools":[{"name":"x"}]}]}`:             "mcpServers[0].name",
		`{"mcpServers":[{"name":"app_","tools":[{"name":"x"}]}]}`:                       "mcpServers[0].name",
		`{"mcpServers":{"ok":{"command":"x"},"a___b":{"type":"sse","url":"http://x"}}}`: "mcpServers[0].name",
	}
	for in, name := range cases {
		_, err := DecodeSessionOptions(json.RawMessage(in))
		if CodeOf(err) != InvalidArgument || !strings.Contains(err.Error(), name) {
			t.Errorf("DecodeSessionOptions(%.120s) = %v, want invalid_argument naming %q", in, err, name)
		}
	}
}

func TestParseToolResult(t *testing.T) {
	good := `{"callId":"call_1","result":{"content":[{"type":"text","text":"hi"},{"type":"image","data":"aGk=","mimeType":"image/png"},
		{"type":"resource","resource":{"uri":"file:///a","text":"x"}},{"type":"resource_link","uri":"file:///b","name":"b","annotations":{}}],"isError":true}}`
	p, err := ParseToolResult(json.RawMessage(good))
	if err != nil || p.CallID != "call_1" || len(p.Result.Content) != 4 || !p.Result.IsError {
		t.Fatalf("ParseToolResult = %+v, %v", p, err)
	}
	if _, err := ParseToolResult(json.RawMessage(`{"callId":"c","result":{"content":[]}}`)); err != nil {
		t.Errorf("empty content: %v", err)
	}
	huge := `{"callId":"c","result":{"content":[{"type":"text","text":"` + strings.Repeat("x", MaxToolResultBytes) + `"}]}}`
	if _, err := ParseToolResult(json.RawMessage(huge)); CodeOf(err) != PayloadTooLarge {
		t.Errorf("oversize result: %v, want payload_too_large", err)
	}
	for in, name := range map[string]string{
		`{"callId":"c"}`:                                                          "content",
		`{"callId":"c","result":{}}`:                                              "content",
		`{"callId":"c","result":{"content":"x"}}`:                                 "result",
		`{"callId":"c","result":{"content":[1]}}`:                                 "content[0]",
		`{"callId":"c","result":{"content":[{"type":"text"}]}}`:                   "content[0]",
		`{"callId":"c","result":{"content":[{"type":"text","text":1}]}}`:          "content[0]",
		`{"callId":"c","result":{"content":[{"type":"video","url":"x"}]}}`:        "content[0]",
		`{"callId":"c","result":{"content":[{"type":"resource","resource":{}}]}}`: "content[0]",
		`{"callId":"c","result":{"content":[],"frob":1}}`:                         "frob",
		`{"callId":"c","result":{"content":[],"structuredContent":[1]}}`:          "structuredContent",
		`{"callId":"../x","result":{"content":[]}}`:                               "callId",
		`{"callId":"c","result":{"content":[]},"x":1}`:                            "payload",
		`[]`: "payload",
	} {
		_, err := ParseToolResult(json.RawMessage(in))
		if CodeOf(err) != InvalidArgument || !strings.Contains(err.Error(), name) {
			t.Errorf("ParseToolResult(%s) = %v, want invalid_argument naming %q", in, err, name)
		}
	}
}

// TestParseToolResultFlatResource: a resource block in the flat shape of Chucky Cloud's TypeScript SDK
// ({"type":"resource","uri","mimeType"?,"text"|"blob"}) is accepted and given to the agent as MCP's
// {"type":"resource","resource":{...}}, its other members kept; a flat block without text or blob, or with
// a field that is no string, is refused. Before: every flat block was refused ("needs resource").
func TestParseToolResultFlatResource(t *testing.T) {
	p, err := ParseToolResult(json.RawMessage(`{"callId":"c","result":{"content":[
		{"type":"resource","uri":"file:///notes.md","mimeType":"text/markdown","text":"# Notes","annotations":{"priority":1}},
		{"type":"resource","uri":"mem://logo","blob":"aGk="}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{
		`{"annotations":{"priority":1},"resource":{"mimeType":"text/markdown","text":"# Notes","uri":"file:///notes.md"},"type":"resource"}`,
		`{"resource":{"blob":"aGk=","uri":"mem://logo"},"type":"resource"}`,
	} {
		if got := string(p.Result.Content[i]); got != want {
			t.Errorf("content[%d] = %s, want %s", i, got, want)
		}
	}
	for in, want := range map[string]string{
		`{"type":"resource","uri":"u"}`:                         "content[0]: a resource block needs",
		`{"type":"resource","uri":"u","text":"a","blob":"b"}`:   "content[0]: a resource block needs",
		`{"type":"resource","uri":7,"text":"a"}`:                "content[0]: a resource block's uri must be a string",
		`{"type":"resource","uri":"u","mimeType":1,"text":"a"}`: "mimeType must be a string",
	} {
		_, err := ParseToolResult(json.RawMessage(`{"callId":"c","result":{"content":[` + in + `]}}`))
		if CodeOf(err) != InvalidArgument || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseToolResult(%s) = %v, want invalid_argument with %q", in, err, want)
		}
	}
}

func FuzzParseToolResult(f *testing.F) {
	for _, s := range []string{
		`{"callId":"c","result":{"content":[{"type":"resource","uri":"u","mimeType":"text/plain","text":"t"}]}}`,
		`{"callId":"c","result":{"content":[{"type":"text","text":"hi"}],"isError":false}}`,
		`{"callId":"c","result":{"content":[{"type":"resource","resource":{"uri":"u","blob":"eA=="}}]}}`,
		`{"callId":"c","result":{"content":[],"structuredContent":{"a":1}}}`,
		`{"callId":"","result":null}`, `null`, `{`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParseToolResult(b)
		if err != nil {
			if c := CodeOf(err); c != InvalidArgument && c != PayloadTooLarge {
				t.Fatalf("error with code %s: %v", c, err)
			}
			return
		}
		// What parses re-encodes and parses again to the same result.
		out, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseToolResult(out); err != nil && CodeOf(err) != PayloadTooLarge {
			t.Fatalf("re-parse of %s: %v", out, err)
		}
	})
}

func FuzzDecodeMCPServers(f *testing.F) {
	for _, s := range []string{
		`{"mcpServers":{"a":{"command":"x","args":["y"],"env":{"K":"v"}}}}`,
		`{"mcpServers":[{"name":"b","tools":[{"name":"t","inputSchema":{"type":"object"}}]}]}`,
		`{"mcpServers":[{"name":"c","type":"http","url":"https://x/y","headers":{"H":"v"}}]}`,
		`{"mcpServers":null}`, `{"mcpServers":[{}]}`,
		`{"tools":["Read",{"name":"w","executeIn":"server"}],"mcpServers":{"a":{"tools":[{"name":"t"}]}}}`,
		`{"agents":{"r":{"name":"r","description":"d","systemPrompt":"p","tools":["Read"]}},"outputFormat":"text"}`,
		`{"outputFormat":"{\"type\":\"json_schema\",\"schema\":{}}"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		o, err := DecodeSessionOptions(b)
		if err != nil {
			if CodeOf(err) != InvalidArgument {
				t.Fatalf("error with code %s: %v", CodeOf(err), err)
			}
			return
		}
		for _, s := range o.MCPServers {
			if s.Kind() == "" || !mcpNamePattern.MatchString(s.Name) {
				t.Fatalf("accepted server %+v", s)
			}
		}
		out, _ := json.Marshal(o)
		if _, err := DecodeSessionOptions(out); err != nil {
			t.Fatalf("re-decode of %s: %v", out, err)
		}
	})
}

// TestMCPErrorsAreBounded: a hostile name is not echoed whole in the error.
func TestMCPErrorsAreBounded(t *testing.T) {
	long := strings.Repeat("n", 1<<20)
	for _, in := range []string{
		`{"mcpServers":[{"name":"` + long + `","command":"x"}]}`,
		`{"mcpServers":{"` + long + `":{"frob":1}}}`,
		`{"mcpServers":[{"name":"a","command":"x","env":{"` + long + `-":"v"}}]}`,
		`{"mcpServers":[{"name":"a","tools":[{"name":"` + long + `"}]}]}`,
		`{"mcpServers":[{"name":"a","type":"` + long + `"}]}`,
		`{"mcpServers":[{"name":"a","` + long + `":1}]}`,
		`{"` + long + `":1}`,
	} {
		_, err := DecodeSessionOptions(json.RawMessage(in))
		if CodeOf(err) != InvalidArgument || len(err.Error()) > 1000 {
			t.Errorf("error of %d bytes: %.200v", len(err.Error()), err)
		}
	}
}

// TestToolDefinitionsInTools: tool definitions in tools, as Chucky Cloud's TypeScript SDK's README writes
// tools: [tool(...)] (its tool() marks them executeIn "server", handler or not), are the client's tools:
// declared in the client tool server "tools" (calls named as declared), the names beside them still the
// built-in tools. In mcpServers, executeIn "server" or "browser" is what that SDK sends for a tool it has
// no handler for (serverTool()): refused by name, since Warren runs no tool code. Before: tools with an
// object was refused as not a string, and executeIn "server" as merely "not client".
func TestToolDefinitionsInTools(t *testing.T) {
	o, err := DecodeSessionOptions(json.RawMessage(`{"tools":["Read",{"name":"get_weather","description":"Weather",
		"inputSchema":{"type":"object"},"executeIn":"server"}],"mcpServers":{"app":{"tools":[{"name":"lookup"}]}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.Tools, ToolList{"Read"}) || len(o.MCPServers) != 2 {
		t.Fatalf("tools %q, servers %+v", o.Tools, o.MCPServers)
	}
	s := o.MCPServers[1]
	if s.Name != ToolDefinitionsServer || s.Kind() != MCPClient || len(s.Tools) != 1 || s.Tools[0].Name != "get_weather" ||
		s.Tools[0].ExecuteIn != "" || s.CallName("get_weather") != "get_weather" {
		t.Fatalf("the definitions' server %+v", s)
	}
	o, err = DecodeSessionOptions(json.RawMessage(`{"tools":[{"name":"greet","executeIn":"browser"}]}`))
	if err != nil || o.Tools != nil || len(o.MCPServers) != 1 {
		t.Fatalf("definitions only: tools %q (want the default set), servers %+v, %v", o.Tools, o.MCPServers, err)
	}
	for in, want := range map[string]string{
		`{"mcpServers":[{"name":"app","tools":[{"name":"t","executeIn":"server"}]}]}`:  `mcpServers[0].tools[0].executeIn: "server" (a tool without a handler in the client, Chucky's serverTool()) is not supported`,
		`{"mcpServers":[{"name":"app","tools":[{"name":"t","executeIn":"browser"}]}]}`: "Warren is the server and runs no tool code",
		`{"tools":[{"name":"t","handler":{}}]}`:                                        "tools[0]",
		`{"tools":[{"name":"t"},7]}`:                                                   "tools[1]",
		`{"tools":["Read",{"name":"bad name"}]}`:                                       "session option tools[1].name",
		`{"tools":[{"name":"t"}],"mcpServers":[{"name":"tools","command":"x"}]}`:       `client tool server "tools", which mcpServers names too`,
	} {
		_, err := DecodeSessionOptions(json.RawMessage(in))
		if CodeOf(err) != InvalidArgument || !strings.Contains(err.Error(), want) {
			t.Errorf("DecodeSessionOptions(%s) = %v, want invalid_argument with %q", in, err, want)
		}
	}
}
