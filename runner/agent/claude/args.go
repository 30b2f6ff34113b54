package claude

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/warren-mesh/warren/internal/strictjson"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner/isolate"
)

// DefaultPermissionMode is used when neither the client nor sdkConfig picks one: the agent already runs
// inside the sandbox, so it does not ask before using a tool.
const DefaultPermissionMode = "bypassPermissions"

// permissionModes are the CLI's --permission-mode choices ("default" is accepted as an alias of manual).
var permissionModes = []string{"acceptEdits", "auto", "bypassPermissions", "default", "dontAsk", "manual", "plan"}

// sdkIgnored are sdkConfig keys that do not override the client's: they name the conversation, not how the
// agent behaves.
var sdkIgnored = []string{"sessionId", "resume", "resumeSessionAt", "forkSession", "continue", "lastSeq", "role", "root"}

// effectiveOptions applies the token to the client's session options. Precedence, strongest first:
//   - permissions: model forces the model (a different fallback model is dropped) and subagents may name
//     no other; blockedTools are always disallowed and removed from tools and allowedTools; tools, when
//     non-nil, bounds tools and allowedTools (an empty list means no built-in tool) and subagents may name
//     no other tool; maxTurns caps maxTurns;
//   - sdkConfig: each field present replaces the client's field as a whole;
//   - the client's options, then defaultModel and DefaultPermissionMode.
//
// allowBeta says whether the model proxy lets a beta through (nil: none is). The result is validated:
// failures are invalid_argument *wire.Error values naming the option.
func effectiveOptions(client wire.SessionOptions, sdk map[string]json.RawMessage, perm Permissions, defaultModel string, allowBeta func(string) bool) (wire.SessionOptions, error) {
	o, err := overlay(client, sdk)
	if err != nil {
		return o, err
	}
	if err := o.Validate(); err != nil {
		return o, err
	}
	// Tool names as users write them: a client tool's declared name is its mcp__<server>__<tool>, and a
	// name that is no tool is refused rather than ignored.
	for _, l := range []struct {
		field string
		list  *[]string
	}{
		{"session option allowedTools", &o.AllowedTools}, {"session option disallowedTools", &o.DisallowedTools},
		{"the token's permissions.tools", &perm.Tools}, {"the token's permissions.blockedTools", &perm.BlockedTools},
	} {
		if *l.list, err = resolveToolRules(l.field, *l.list, o.MCPServers); err != nil {
			return o, err
		}
	}
	if perm.Model != "" {
		o.Model = perm.Model
		if o.FallbackModel != perm.Model {
			o.FallbackModel = ""
		}
	}
	if o.Model == "" {
		o.Model = defaultModel
	}
	if perm.MaxTurns > 0 && (o.MaxTurns == 0 || o.MaxTurns > perm.MaxTurns) {
		o.MaxTurns = perm.MaxTurns
	}

	if slices.Contains(o.Tools, "default") {
		o.Tools = nil // the default set: no restriction from the client
	}
	if perm.Tools != nil {
		allowed := func(rule string) bool { return slices.Contains(perm.Tools, toolName(rule)) }
		if o.Tools == nil {
			// --tools names built-in tools; MCP tools the token lists are bounded by checkMCP instead.
			o.Tools = slices.DeleteFunc(uniqueNames(perm.Tools), isMCPName)
		} else {
			o.Tools = slices.DeleteFunc(slices.Clone(o.Tools), func(t string) bool { return !allowed(t) })
		}
		o.AllowedTools = slices.DeleteFunc(slices.Clone(o.AllowedTools), func(t string) bool { return !allowed(t) })
	}
	if len(perm.BlockedTools) > 0 {
		blocked := func(rule string) bool { return slices.Contains(perm.BlockedTools, toolName(rule)) }
		if o.Tools != nil {
			o.Tools = slices.DeleteFunc(slices.Clone(o.Tools), blocked)
		}
		o.AllowedTools = slices.DeleteFunc(slices.Clone(o.AllowedTools), blocked)
		dis := slices.Clone(o.DisallowedTools)
		for _, b := range perm.BlockedTools {
			if !slices.Contains(dis, b) {
				dis = append(dis, b)
			}
		}
		o.DisallowedTools = dis
	}
	if o.Tools != nil {
		o.Tools = uniqueNames(o.Tools)
	}
	if err := checkAgents(o.Agents, perm); err != nil {
		return o, err
	}
	if err := checkMCP(o.MCPServers, perm); err != nil {
		return o, err
	}
	for _, s := range o.MCPServers {
		// Client tools are allowed by default (the token's permissions were checked above): the client
		// runs them and decides itself.
		if rule := "mcp__" + s.Name; s.Kind() == wire.MCPClient && !slices.Contains(o.AllowedTools, rule) {
			o.AllowedTools = append(slices.Clone(o.AllowedTools), rule)
		}
	}
	for _, b := range o.Betas {
		if allowBeta == nil || !allowBeta(b) {
			return o, wire.Errorf(wire.InvalidArgument, "session option betas: %q is not enabled on this platform", b)
		}
	}

	if o.PermissionMode == "" {
		o.PermissionMode = DefaultPermissionMode
	}
	if !slices.Contains(permissionModes, o.PermissionMode) {
		return o, wire.Errorf(wire.InvalidArgument, "permissionMode %q is not one of %s", o.PermissionMode, strings.Join(permissionModes, ", "))
	}
	if err := checkClientEnv(o.Env); err != nil {
		return o, err
	}
	return o, nil
}

// checkAgents refuses subagents that would reach past the token's permissions: a tool it does not allow
// or blocks, or (when it pins the model) another model.
func checkAgents(agents map[string]wire.AgentDefinition, perm Permissions) error {
	for _, name := range slices.Sorted(maps.Keys(agents)) {
		a := agents[name]
		if perm.Model != "" && a.Model != "" && a.Model != "inherit" && PinnedModel(a.Model) != perm.Model {
			return wire.Errorf(wire.InvalidArgument, "session option agents.%s.model: this token allows only model %s", name, perm.Model)
		}
		for _, t := range a.Tools {
			n := toolName(t)
			if (perm.Tools != nil && !slices.Contains(perm.Tools, n)) || slices.Contains(perm.BlockedTools, n) {
				return wire.Errorf(wire.InvalidArgument, "session option agents.%s.tools: %s is not allowed by this token", name, n)
			}
		}
	}
	return nil
}

func isMCPName(name string) bool { return strings.HasPrefix(name, "mcp__") }

// checkMCP refuses MCP servers the token's permissions do not allow: a server blockedTools names as a
// whole (mcp__<server> or mcp__<server>__*), a client tool it blocks, and, when the token lists the tools
// the agent may use, a client tool it does not list (itself or its server) or a stdio/http/sse server it
// does not list as a whole (its tools are not known in advance). Tools of an allowed server that
// blockedTools names one by one stay disallowed (--disallowedTools), which no client option can undo.
func checkMCP(servers []wire.MCPServer, perm Permissions) error {
	for i, s := range servers {
		if !wire.ValidMCPServerName(s.Name) {
			// Validated already; kept here as the permission check depends on it: mcp__app__lookup must
			// not read as "the whole server app__lookup".
			return wire.Errorf(wire.InvalidArgument, "session option mcpServers[%d].name: %q may not contain \"__\" or end with \"_\"", i, s.Name)
		}
		whole := []string{"mcp__" + s.Name, "mcp__" + s.Name + "__*"}
		names := func(list []string, extra ...string) bool {
			for _, n := range append(whole, extra...) {
				if slices.Contains(list, n) {
					return true
				}
			}
			return false
		}
		if names(perm.BlockedTools) {
			return wire.Errorf(wire.InvalidArgument, "session option mcpServers[%d]: server %s is blocked by this token", i, s.Name)
		}
		if s.Kind() != wire.MCPClient {
			if perm.Tools != nil && !names(perm.Tools) {
				return wire.Errorf(wire.InvalidArgument, "session option mcpServers[%d]: this token lists the tools the agent may use, and mcp__%s is not among them", i, s.Name)
			}
			continue
		}
		for j, t := range s.Tools {
			full := s.ToolName(t.Name)
			if slices.Contains(perm.BlockedTools, full) {
				return wire.Errorf(wire.InvalidArgument, "session option mcpServers[%d].tools[%d]: %s is blocked by this token", i, j, full)
			}
			if perm.Tools != nil && !names(perm.Tools, full) {
				return wire.Errorf(wire.InvalidArgument, "session option mcpServers[%d].tools[%d]: this token lists the tools the agent may use, and %s is not among them", i, j, full)
			}
		}
	}
	return nil
}

// mergeMCPServers is the mcpServers of the token's sdkConfig followed by the client's: the token's servers
// are always there, and a client server may not take one's name.
func mergeMCPServers(client []wire.MCPServer, sdk json.RawMessage) (json.RawMessage, error) {
	var token wire.MCPServerList
	if err := strictjson.Unmarshal(sdk, &token); err != nil {
		return sdk, nil // refused with the sdkConfig's own error when decoded
	}
	merged := slices.Clone([]wire.MCPServer(token))
	for _, c := range client {
		if slices.ContainsFunc(token, func(t wire.MCPServer) bool { return t.Name == c.Name }) {
			return nil, wire.Errorf(wire.InvalidArgument, "session option mcpServers: server %s is the token's; choose another name", c.Name)
		}
		merged = append(merged, c)
	}
	return json.Marshal(merged)
}

// overlay returns client with every field present in sdk replaced (keys of sdkIgnored excepted). Going
// through JSON gives a deep copy, so nothing the hub holds is modified; the result is decoded and
// validated like an init payload, so sdkConfig can neither smuggle in an option nor have one dropped.
func overlay(client wire.SessionOptions, sdk map[string]json.RawMessage) (wire.SessionOptions, error) {
	if len(sdk) == 0 {
		return client, nil
	}
	b, err := json.Marshal(client)
	if err != nil {
		return client, fmt.Errorf("encode session options: %w", err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return client, fmt.Errorf("decode session options: %w", err)
	}
	for k, v := range sdk {
		switch {
		case k == "mcpServers":
			// Added to the client's rather than replacing them.
			if m[k], err = mergeMCPServers(client.MCPServers, v); err != nil {
				return client, err
			}
		case !slices.Contains(sdkIgnored, k):
			m[k] = v
		}
	}
	if b, err = json.Marshal(m); err != nil {
		return client, fmt.Errorf("encode session options: %w", err)
	}
	o, err := wire.DecodeSessionOptions(b)
	if err != nil {
		// Only sdkConfig can be at fault here (the client's options were decoded and validated already).
		pub, _ := wire.Public(err)
		return client, wire.Errorf(wire.InvalidArgument, "the token's sdkConfig: %s", pub.Message)
	}
	return o, nil
}

// parseSDKConfig decodes the token's sdkConfig object; empty or null means none.
func parseSDKConfig(raw json.RawMessage) (map[string]json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var m map[string]json.RawMessage
	if err := strictjson.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("%w: sdkConfig is not a JSON object: %w", ErrConfig, err)
	}
	if _, err := overlay(wire.SessionOptions{}, m); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return m, nil
}

// toolName is the tool a permission rule names: "Bash(git *)" → "Bash".
func toolName(rule string) string {
	if i := strings.IndexByte(rule, '('); i >= 0 {
		return strings.TrimSpace(rule[:i])
	}
	return strings.TrimSpace(rule)
}

func uniqueNames(rules []string) []string {
	out := make([]string, 0, len(rules))
	for _, r := range rules {
		if n := toolName(r); n != "" && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// launch says which conversation a CLI process opens.
type launch struct {
	// SessionID is the CLI session id of the conversation (a UUID).
	SessionID string
	// Resume continues SessionID's existing transcript.
	Resume bool
	// ForkFrom, when set, resumes that session into a copy named SessionID (--fork-session).
	ForkFrom string
	// ResumeAt, with Resume or ForkFrom, keeps the transcript only up to this message (--resume-session-at).
	ResumeAt string
}

// cliArgs is the CLI's command line after the program name, for the effective options o (from
// effectiveOptions). Values go in --flag=value form so a value starting with "-" is never taken for a flag.
func cliArgs(o wire.SessionOptions, l launch) []string {
	a := []string{"-p", "--input-format=stream-json", "--output-format=stream-json", "--verbose"}
	switch {
	case l.ForkFrom != "":
		a = append(a, "--resume="+l.ForkFrom, "--fork-session", "--session-id="+l.SessionID)
	case l.Resume:
		a = append(a, "--resume="+l.SessionID)
	default:
		a = append(a, "--session-id="+l.SessionID)
	}
	if l.ResumeAt != "" && (l.Resume || l.ForkFrom != "") {
		a = append(a, "--resume-session-at="+l.ResumeAt)
	}
	if o.Model != "" {
		a = append(a, "--model="+o.Model)
	}
	if o.FallbackModel != "" {
		a = append(a, "--fallback-model="+o.FallbackModel)
	}
	a = append(a, "--permission-mode="+o.PermissionMode)
	if o.MaxTurns > 0 {
		a = append(a, "--max-turns="+strconv.Itoa(o.MaxTurns))
	}
	if o.MaxThinkingTokens > 0 {
		a = append(a, "--max-thinking-tokens="+strconv.Itoa(o.MaxThinkingTokens))
	}
	if o.MaxBudgetUSD > 0 {
		a = append(a, "--max-budget-usd="+strconv.FormatFloat(o.MaxBudgetUSD, 'f', -1, 64))
	}
	if o.Tools != nil {
		a = append(a, "--tools="+strings.Join(o.Tools, ","))
	}
	if len(o.AllowedTools) > 0 {
		a = append(a, "--allowedTools="+strings.Join(o.AllowedTools, ","))
	}
	if len(o.DisallowedTools) > 0 {
		a = append(a, "--disallowedTools="+strings.Join(o.DisallowedTools, ","))
	}
	if sp := o.SystemPrompt; sp != nil {
		switch {
		case sp.Type == "" && sp.Text != "":
			a = append(a, "--system-prompt="+sp.Text)
		case sp.Type == "preset" && sp.Append != "":
			a = append(a, "--append-system-prompt="+sp.Append)
		}
		if sp.Type == "preset" && sp.ExcludeDynamicSections {
			a = append(a, "--exclude-dynamic-system-prompt-sections")
		}
	}
	if o.IncludePartialMessages {
		a = append(a, "--include-partial-messages")
	}
	if schema := wire.OutputSchema(o.OutputFormat); schema != "" {
		a = append(a, "--json-schema="+schema)
	}
	if t := o.Thinking; t != nil {
		switch {
		case t.Type == "disabled":
			a = append(a, "--thinking=disabled")
		case t.BudgetTokens > 0:
			a = append(a, "--max-thinking-tokens="+strconv.Itoa(t.BudgetTokens))
		default: // adaptive, or enabled without a budget
			a = append(a, "--thinking=enabled")
		}
	}
	if o.Effort != "" {
		a = append(a, "--effort="+o.Effort)
	}
	if o.AllowDangerouslySkipPermissions {
		a = append(a, "--allow-dangerously-skip-permissions")
	}
	if o.IncludeHookEvents {
		a = append(a, "--include-hook-events")
	}
	if len(o.Agents) > 0 {
		b, _ := json.Marshal(o.Agents) // validated, compact: one argument
		a = append(a, "--agents="+string(b))
	}
	if o.Agent != "" {
		a = append(a, "--agent="+o.Agent)
	}
	if len(o.Betas) > 0 {
		a = append(a, "--betas="+strings.Join(o.Betas, ","))
	}
	if o.SettingSources != nil {
		a = append(a, "--setting-sources="+strings.Join(o.SettingSources, ","))
	}
	for _, d := range o.AdditionalDirectories {
		a = append(a, "--add-dir="+d)
	}
	if cfg := mcpConfig(o.MCPServers); cfg != "" {
		a = append(a, "--mcp-config="+cfg)
	}
	// Always: the servers above are the only ones the agent gets. Without it the CLI also loads the
	// workspace's .mcp.json (approved by enableAllProjectMcpServers in a settings file the tenant can
	// write) and the user's own, which checkMCP never sees.
	a = append(a, "--strict-mcp-config")
	return a
}

// Environment inside the boundary.
const (
	// CLIMount is where the CLI binary is mounted, read-only, inside the sandbox.
	CLIMount = "/opt/warren/claude"
	// HomeMount is the agent's HOME inside the sandbox (Config.Home, read-write).
	HomeMount = "/home/sandbox"
)

// reservedEnv are the variables the driver sets itself; neither the client nor Config.Env may set them.
var reservedEnv = []string{
	"PATH", "HOME", "CLAUDE_CONFIG_DIR", "TMPDIR", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY",
	"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "DISABLE_TELEMETRY", "DISABLE_AUTOUPDATER", "IS_SANDBOX",
}

// clientRefusedPrefixes and clientRefused are further variables a client may not set: they would route
// model traffic around the runner's proxy (other providers, other credentials, other headers) or pick
// models the token does not allow. Config.Env may set them.
var (
	clientRefusedPrefixes = []string{"ANTHROPIC_", "CLAUDE_CODE_USE_"}
	clientRefused         = []string{"CLAUDE_CODE_SUBAGENT_MODEL", "AWS_BEARER_TOKEN_BEDROCK"}
)

func checkClientEnv(env map[string]string) error {
	if err := isolate.ValidateEnv(env); err != nil {
		return err
	}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		refused := slices.Contains(reservedEnv, k) || slices.Contains(clientRefused, k)
		for _, p := range clientRefusedPrefixes {
			refused = refused || strings.HasPrefix(k, p)
		}
		if refused {
			return wire.Errorf(wire.InvalidArgument, "environment variable %s is set by Warren and cannot be overridden", k)
		}
	}
	return nil
}

// pinnedModelEnv are the CLI's variables naming the models of its background calls and subagents; when
// the token allows one model only, they all name it.
var pinnedModelEnv = []string{"ANTHROPIC_SMALL_FAST_MODEL", "ANTHROPIC_DEFAULT_HAIKU_MODEL", "ANTHROPIC_DEFAULT_SONNET_MODEL",
	"ANTHROPIC_DEFAULT_OPUS_MODEL", "CLAUDE_CODE_SUBAGENT_MODEL"}

// agentEnv is the CLI's environment: the client's variables, then Config.Env, then the driver's own, which
// always win. home and configDir are paths as the CLI sees them.
func agentEnv(client, extra map[string]string, home, baseURL, apiKey string) map[string]string {
	env := make(map[string]string, len(client)+len(extra)+len(reservedEnv))
	maps.Copy(env, client)
	maps.Copy(env, extra)
	maps.Copy(env, map[string]string{
		"PATH":               isolate.DefaultPATH,
		"HOME":               home,
		"CLAUDE_CONFIG_DIR":  home + "/.claude",
		"TMPDIR":             "/tmp",
		"ANTHROPIC_BASE_URL": baseURL,
		"ANTHROPIC_API_KEY":  apiKey,
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
		"DISABLE_TELEMETRY":                        "1",
		"DISABLE_AUTOUPDATER":                      "1",
		// The sandbox shares the runner's uid, root in containers; the CLI refuses to skip permission
		// prompts as root unless told it is sandboxed.
		"IS_SANDBOX": "1",
	})
	return env
}
