package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/warren-mesh/warren/internal/strictjson"
)

// MCP server kinds (docs/PROTOCOL.md#host-tools). A client entry declares tools the client executes; the
// others are MCP servers the agent's CLI starts (stdio, inside the sandbox) or reaches (http, sse, under the
// sandbox's egress policy).
const (
	MCPClient = "client"
	MCPStdio  = "stdio"
	MCPHTTP   = "http"
	MCPSSE    = "sse"
)

// MCPTool is a tool executed by the client: the agent sees it as mcp__<server>__<name>.
type MCPTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"inputSchema,omitempty"`
	// ExecuteIn is "client" (the default); "host" (possession mode) is not supported.
	ExecuteIn string `json:"executeIn,omitempty"`
	// TimeoutMs is how long a call waits for the client's answer (Warren extension; MinToolTimeoutMs to
	// MaxToolTimeoutMs; 0: the runner's default, 5 minutes).
	TimeoutMs int64 `json:"timeoutMs,omitempty"`
}

// Bounds of MCPTool.TimeoutMs.
const (
	MinToolTimeoutMs = 1000
	MaxToolTimeoutMs = 30 * 60 * 1000
)

// MCPServer is one entry of SessionOptions.mcpServers. Type is "client" (or "sdk", or absent with tools),
// "stdio" (or absent with a command), "http" or "sse"; Kind says which.
type MCPServer struct {
	Name    string            `json:"name"`
	Version string            `json:"version,omitempty"`
	Tools   []MCPTool         `json:"tools,omitempty"`
	Type    string            `json:"type,omitempty"`
	URL     string            `json:"url,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	Command string            `json:"command,omitempty"`
	Args    []string          `json:"args,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
}

// Kind is the server's kind (MCPClient, MCPStdio, MCPHTTP, MCPSSE), or "" when its type is unknown.
func (s MCPServer) Kind() string {
	switch s.Type {
	case "", MCPClient, "sdk":
		switch {
		case s.Type == "" && s.Command != "":
			return MCPStdio
		case s.Type == "" && s.URL != "":
			return ""
		}
		return MCPClient
	case MCPStdio, MCPHTTP, MCPSSE:
		return s.Type
	}
	return ""
}

// ValidMCPServerName says whether name, used as <server> in the agent's tool names mcp__<server>__<tool>,
// reads back as itself: the CLI takes the server name up to the first "__" after "mcp__", so a name
// containing "__" (app__lookup) or ending with "_" (app_, whose tool x reads as server app, tool _x) would
// name another server's tool and could pass a permission that names that tool.
func ValidMCPServerName(name string) bool {
	return name != "" && !strings.Contains(name, "__") && !strings.HasSuffix(name, "_")
}

// ToolName is the name the agent calls a client tool by.
func (s MCPServer) ToolName(tool string) string { return "mcp__" + s.Name + "__" + tool }

// CallName is the toolName a tool_call of one of the server's tools carries (docs/PROTOCOL.md#host-tools):
// the tool's name as declared, so that a client keying its handlers by that name (Chucky's SDK, Warren's
// SDKs) finds them. A server declared with a type ("client" or "sdk": Warren's SDKs before declared names
// wrote "client", and clients that read mcp__<server>__<tool> wrote it as documented) keeps the agent's
// name mcp__<server>__<tool>, which those clients look up.
func (s MCPServer) CallName(tool string) string {
	if s.Type != "" {
		return s.ToolName(tool)
	}
	return tool
}

// MCPServerList is SessionOptions.mcpServers: a list of entries with names, or, as the Agent SDK writes
// it, an object keyed by server name (an entry's name, when given, must be its key). It encodes as a list.
type MCPServerList []MCPServer

func (l *MCPServerList) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '{' {
		var m map[string]json.RawMessage
		if err := strictjson.Unmarshal(b, &m); err != nil {
			return err
		}
		out := make(MCPServerList, 0, len(m))
		for _, name := range sortedKeys(m) {
			var s MCPServer
			if err := DecodeStrict(m[name], &s); err != nil {
				return Errorf(InvalidArgument, "session option mcpServers.%s: %s", clip(name), trimJSONErr(err))
			}
			if s.Name != "" && s.Name != name {
				return Errorf(InvalidArgument, "session option mcpServers.%s.name: %q is not its key", clip(name), clip(s.Name))
			}
			s.Name = name
			out = append(out, s)
		}
		*l = out
		return nil
	}
	var list []MCPServer
	if err := DecodeStrict(b, &list); err != nil {
		return err
	}
	*l = list
	return nil
}

// ToolDefinitionsServer is the client tool server that tool definitions given in tools (Chucky Cloud's
// TypeScript SDK's tools: [tool(...)]) are declared in.
const ToolDefinitionsServer = "tools"

// hasToolDefinitions says whether v, the option tools, is a list holding an object.
func hasToolDefinitions(v json.RawMessage) bool {
	var l []json.RawMessage
	if strictjson.Unmarshal(v, &l) != nil {
		return false
	}
	return slices.ContainsFunc(l, func(e json.RawMessage) bool {
		e = bytes.TrimSpace(e)
		return len(e) > 0 && e[0] == '{'
	})
}

// toolDefinitions splits the option tools holding tool definitions ({name, description?, inputSchema?,
// executeIn?}): its names stay the built-in tools (nil when none is left: the default set, which
// definitions do not restrict), and the definitions become the client tool server ToolDefinitionsServer,
// added to mcpServers (returned as a list). Their calls go to the client, named as declared: Warren is the
// server and runs no tool code, so executeIn "server" (what Chucky's tool() sets by default, handler or
// not) and "browser" mean the client's handler, like "client".
func toolDefinitions(v, mcp json.RawMessage) (tools, servers json.RawMessage, err error) {
	var entries []json.RawMessage
	if err := strictjson.Unmarshal(v, &entries); err != nil {
		return nil, nil, JSONError(err, "session option tools")
	}
	var names []string
	var at []int // index in tools of each definition
	def := MCPServer{Name: ToolDefinitionsServer}
	for i, e := range entries {
		if e = bytes.TrimSpace(e); len(e) == 0 || e[0] != '{' {
			var n string
			if err := strictjson.Unmarshal(e, &n); err != nil {
				return nil, nil, Errorf(InvalidArgument, "session option tools[%d]: a tool name or a tool definition {name, description?, inputSchema?}", i)
			}
			names = append(names, n)
			continue
		}
		var t MCPTool
		if err := DecodeStrict(e, &t); err != nil {
			return nil, nil, Errorf(InvalidArgument, "session option tools[%d]: %s", i, trimJSONErr(err))
		}
		switch t.ExecuteIn {
		case "server", "browser":
			t.ExecuteIn = ""
		}
		def.Tools = append(def.Tools, t)
		at = append(at, i)
	}
	if len(def.Tools) > MaxMCPTools {
		return nil, nil, Errorf(InvalidArgument, "session option tools: at most %d tool definitions", MaxMCPTools)
	}
	if err := def.checkTools(func(j int) string { return fmt.Sprintf("tools[%d]", at[j]) }); err != nil {
		return nil, nil, err
	}
	var list MCPServerList
	if m := bytes.TrimSpace(mcp); len(m) > 0 && string(m) != "null" {
		if err := DecodeStrict(m, &list); err != nil {
			return nil, nil, JSONError(err, "session option mcpServers")
		}
	}
	if slices.ContainsFunc(list, func(s MCPServer) bool { return s.Name == ToolDefinitionsServer }) {
		return nil, nil, Errorf(InvalidArgument, "session option tools: its tool definitions are declared as the client tool server %q, which mcpServers names too", ToolDefinitionsServer)
	}
	servers, _ = json.Marshal(append(list, def))
	if names != nil {
		tools, _ = json.Marshal(names)
	}
	return tools, servers, nil
}

// Bounds of mcpServers: they become one CLI argument (--mcp-config) and, for client tools, the tool list
// the runner serves to the agent.
const (
	MaxMCPServers     = 16
	MaxMCPTools       = 64 // per client server
	maxMCPName        = 64
	maxMCPDescription = 4 << 10
	maxMCPSchema      = 64 << 10
	maxMCPArgs        = 64
	maxMCPArg         = 4 << 10
	maxMCPEnv         = 64
	maxMCPHeaders     = 32
	maxMCPHeader      = 8 << 10
	maxMCPURL         = 2 << 10
)

var (
	mcpNamePattern   = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)
	envNamePattern   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,255}$`)
	headerNameRegexp = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}$")
)

// validateMCPServers checks every entry: names, kinds, the fields each kind takes and their bounds. Errors
// are invalid_argument naming the field (mcpServers[i].field).
func validateMCPServers(list []MCPServer) error {
	if len(list) > MaxMCPServers {
		return Errorf(InvalidArgument, "session option mcpServers: at most %d servers", MaxMCPServers)
	}
	for i, s := range list {
		if err := s.validate(fmt.Sprintf("mcpServers[%d]", i)); err != nil {
			return err
		}
		for _, o := range list[:i] {
			if o.Name == s.Name {
				return Errorf(InvalidArgument, "session option mcpServers[%d].name: %q is declared twice", i, clip(s.Name))
			}
		}
	}
	if b, _ := json.Marshal(list); len(list) > 0 && len(b) > MaxOptionArg {
		return Errorf(InvalidArgument, "session option mcpServers exceeds %d bytes encoded", MaxOptionArg)
	}
	return nil
}

func (s MCPServer) validate(f string) error {
	bad := func(field, format string, args ...any) error {
		return Errorf(InvalidArgument, "session option %s.%s: %s", f, field, fmt.Sprintf(format, args...))
	}
	if !mcpNamePattern.MatchString(s.Name) {
		return bad("name", "%q must be 1 to %d characters of [a-zA-Z0-9_-]", clip(s.Name), maxMCPName)
	}
	if !ValidMCPServerName(s.Name) {
		return bad("name", "%q may not contain \"__\" or end with \"_\": the agent reads mcp__<server>__<tool> up to the first \"__\"", clip(s.Name))
	}
	if len(s.Version) > maxOptionString || strings.ContainsFunc(s.Version, isControl) {
		return bad("version", "at most %d bytes without control characters", maxOptionString)
	}
	kind := s.Kind()
	if kind == "" {
		return bad("type", "%q is not one of client, sdk, stdio, http, sse (an entry with a url needs type http or sse)", clip(s.Type))
	}
	// Each kind takes its own fields only: a field another kind reads is refused, never ignored.
	present := map[string]bool{"tools": len(s.Tools) > 0, "command": s.Command != "", "args": len(s.Args) > 0,
		"env": len(s.Env) > 0, "url": s.URL != "", "headers": len(s.Headers) > 0}
	takes := map[string][]string{MCPClient: {"tools"}, MCPStdio: {"command", "args", "env"}, MCPHTTP: {"url", "headers"}, MCPSSE: {"url", "headers"}}[kind]
	for _, field := range []string{"tools", "command", "args", "env", "url", "headers"} {
		if present[field] && !slices.Contains(takes, field) {
			return bad(field, "not a field of a %s server", kind)
		}
	}
	switch kind {
	case MCPClient:
		return s.validateTools(f)
	case MCPStdio:
		if s.Command == "" || len(s.Command) > maxMCPArg || strings.ContainsFunc(s.Command, isControl) {
			return bad("command", "must be 1 to %d bytes without control characters", maxMCPArg)
		}
		if len(s.Args) > maxMCPArgs {
			return bad("args", "at most %d arguments", maxMCPArgs)
		}
		for j, a := range s.Args {
			if len(a) > maxMCPArg || strings.IndexByte(a, 0) >= 0 {
				return bad(fmt.Sprintf("args[%d]", j), "at most %d bytes without NUL", maxMCPArg)
			}
		}
		if len(s.Env) > maxMCPEnv {
			return bad("env", "at most %d variables", maxMCPEnv)
		}
		for _, k := range sortedKeys(s.Env) {
			if !envNamePattern.MatchString(k) || len(s.Env[k]) > maxMCPArg || strings.IndexByte(s.Env[k], 0) >= 0 {
				return bad("env."+clip(k), "names are [A-Za-z_][A-Za-z0-9_]*, values at most %d bytes without NUL", maxMCPArg)
			}
		}
	default: // http, sse
		u, err := url.Parse(s.URL)
		if s.URL == "" || len(s.URL) > maxMCPURL || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
			strings.ContainsFunc(s.URL, isControl) {
			return bad("url", "must be an http or https URL of at most %d bytes", maxMCPURL)
		}
		if len(s.Headers) > maxMCPHeaders {
			return bad("headers", "at most %d headers", maxMCPHeaders)
		}
		for _, k := range sortedKeys(s.Headers) {
			if v := s.Headers[k]; !headerNameRegexp.MatchString(k) || len(v) > maxMCPHeader || strings.ContainsFunc(v, isControl) {
				return bad("headers."+clip(k), "names are HTTP tokens, values at most %d bytes without control characters", maxMCPHeader)
			}
		}
	}
	return nil
}

func (s MCPServer) validateTools(f string) error {
	if len(s.Tools) == 0 || len(s.Tools) > MaxMCPTools {
		return Errorf(InvalidArgument, "session option %s.tools: a client server declares 1 to %d tools", f, MaxMCPTools)
	}
	return s.checkTools(func(j int) string { return fmt.Sprintf("%s.tools[%d]", f, j) })
}

// checkTools checks each of the server's tools; at names the option path of the tool at index j.
func (s MCPServer) checkTools(at func(j int) string) error {
	for j, t := range s.Tools {
		tf := at(j)
		if !mcpNamePattern.MatchString(t.Name) {
			return Errorf(InvalidArgument, "session option %s.name: %q must be 1 to %d characters of [a-zA-Z0-9_-]", tf, clip(t.Name), maxMCPName)
		}
		for _, o := range s.Tools[:j] {
			if o.Name == t.Name {
				return Errorf(InvalidArgument, "session option %s.name: %q is declared twice", tf, clip(t.Name))
			}
		}
		if len(t.Description) > maxMCPDescription || strings.IndexByte(t.Description, 0) >= 0 {
			return Errorf(InvalidArgument, "session option %s.description: at most %d bytes without NUL", tf, maxMCPDescription)
		}
		if sch := bytes.TrimSpace(t.InputSchema); len(sch) > 0 && string(sch) != "null" {
			if sch[0] != '{' || len(sch) > maxMCPSchema {
				return Errorf(InvalidArgument, "session option %s.inputSchema: a JSON Schema object of at most %d bytes", tf, maxMCPSchema)
			}
		}
		if t.TimeoutMs != 0 && (t.TimeoutMs < MinToolTimeoutMs || t.TimeoutMs > MaxToolTimeoutMs) {
			return Errorf(InvalidArgument, "session option %s.timeoutMs: from %d to %d", tf, MinToolTimeoutMs, MaxToolTimeoutMs)
		}
		switch t.ExecuteIn {
		case "", MCPClient:
		case "host":
			return Errorf(InvalidArgument, "session option %s.executeIn: host tools (possession mode) are not supported", tf)
		case "server", "browser":
			// What Chucky's SDK sends for a tool it has no handler for (its serverTool()): nobody would run it.
			return Errorf(InvalidArgument, "session option %s.executeIn: %q (a tool without a handler in the client, Chucky's serverTool()) is not supported: "+
				"Warren is the server and runs no tool code of its own; give the tool a handler in the client (executeIn \"client\") or serve it from an MCP server (stdio, http, sse)", tf, t.ExecuteIn)
		default:
			return Errorf(InvalidArgument, "session option %s.executeIn: %q is not client", tf, clip(t.ExecuteIn))
		}
	}
	return nil
}

// ToolSchema is the tool's input schema as the agent is given it: {"type":"object"} when none was declared.
func (t MCPTool) ToolSchema() json.RawMessage {
	if sch := bytes.TrimSpace(t.InputSchema); len(sch) > 0 && string(sch) != "null" {
		return sch
	}
	return json.RawMessage(`{"type":"object"}`)
}

// clip shortens a tenant's string quoted in an error message.
func clip(s string) string {
	if len(s) > 64 {
		return strings.ToValidUTF8(s[:64], "") + "…"
	}
	return s
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
