package claude

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

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
var sdkIgnored = []string{"sessionId", "forkSession", "continue", "lastSeq", "role", "root"}

// effectiveOptions applies the token to the client's session options. Precedence, strongest first:
//   - permissions: model forces the model (a different fallback model is dropped); blockedTools are always
//     disallowed and removed from tools and allowedTools; tools, when non-nil, bounds tools and allowedTools
//     (an empty list means no built-in tool); maxTurns caps maxTurns;
//   - sdkConfig: each field present replaces the client's field as a whole;
//   - the client's options, then defaultModel and DefaultPermissionMode.
//
// The result is validated: failures are invalid_argument *wire.Error values.
func effectiveOptions(client wire.SessionOptions, sdk map[string]json.RawMessage, perm Permissions, defaultModel string) (wire.SessionOptions, error) {
	o, err := overlay(client, sdk)
	if err != nil {
		return o, err
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
	if o.MaxTurns < 0 || o.MaxThinkingTokens < 0 || o.MaxBudgetUSD < 0 {
		return o, wire.Errorf(wire.InvalidArgument, "maxTurns, maxThinkingTokens and maxBudgetUsd must not be negative")
	}
	if perm.MaxTurns > 0 && (o.MaxTurns == 0 || o.MaxTurns > perm.MaxTurns) {
		o.MaxTurns = perm.MaxTurns
	}

	for _, list := range [][]string{o.Tools, o.AllowedTools, o.DisallowedTools} {
		if err := checkToolNames(list); err != nil {
			return o, err
		}
	}
	if slices.Contains(o.Tools, "default") {
		o.Tools = nil // the default set: no restriction from the client
	}
	if perm.Tools != nil {
		allowed := func(rule string) bool { return slices.Contains(perm.Tools, toolName(rule)) }
		if o.Tools == nil {
			o.Tools = uniqueNames(perm.Tools)
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

	if o.PermissionMode == "" {
		o.PermissionMode = DefaultPermissionMode
	}
	if !slices.Contains(permissionModes, o.PermissionMode) {
		return o, wire.Errorf(wire.InvalidArgument, "permissionMode %q is not one of %s", o.PermissionMode, strings.Join(permissionModes, ", "))
	}
	if err := checkClientEnv(o.Env); err != nil {
		return o, err
	}
	for _, s := range []string{o.Model, o.FallbackModel} {
		if strings.IndexByte(s, 0) >= 0 {
			return o, wire.Errorf(wire.InvalidArgument, "model names must not contain NUL")
		}
	}
	if sp := o.SystemPrompt; sp != nil && (strings.IndexByte(sp.Text, 0) >= 0 || strings.IndexByte(sp.Append, 0) >= 0) {
		return o, wire.Errorf(wire.InvalidArgument, "systemPrompt must not contain NUL")
	}
	return o, nil
}

// overlay returns client with every field present in sdk replaced (keys of sdkIgnored excepted). Going
// through JSON gives a deep copy, so nothing the hub holds is modified.
func overlay(client wire.SessionOptions, sdk map[string]json.RawMessage) (wire.SessionOptions, error) {
	b, err := json.Marshal(client)
	if err != nil {
		return client, fmt.Errorf("encode session options: %w", err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return client, fmt.Errorf("decode session options: %w", err)
	}
	for k, v := range sdk {
		if !slices.Contains(sdkIgnored, k) {
			m[k] = v
		}
	}
	if b, err = json.Marshal(m); err != nil {
		return client, fmt.Errorf("encode session options: %w", err)
	}
	var o wire.SessionOptions
	if err := json.Unmarshal(b, &o); err != nil {
		// Only sdkConfig can be malformed here (the client's options were decoded from JSON already).
		return client, wire.Errorf(wire.InvalidArgument, "sdkConfig does not fit the session options: %v", err)
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
	if err := json.Unmarshal(raw, &m); err != nil {
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

func checkToolNames(list []string) error {
	for _, t := range list {
		if strings.TrimSpace(t) == "" || strings.HasPrefix(t, "-") || strings.ContainsAny(t, "\x00\n") {
			return wire.Errorf(wire.InvalidArgument, "invalid tool name %q", t)
		}
	}
	return nil
}

// launch says which conversation a CLI process opens.
type launch struct {
	// SessionID is the CLI session id of the conversation (a UUID).
	SessionID string
	// Resume continues SessionID's existing transcript.
	Resume bool
	// ForkFrom, when set, resumes that session into a copy named SessionID (--fork-session).
	ForkFrom string
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
	}
	if o.IncludePartialMessages {
		a = append(a, "--include-partial-messages")
	}
	if schema := jsonSchema(o.OutputFormat); schema != "" {
		a = append(a, "--json-schema="+schema)
	}
	return a
}

// jsonSchema extracts the schema of outputFormat {"type":"json_schema","schema":{...}}, compacted.
func jsonSchema(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var f struct {
		Type   string          `json:"type"`
		Schema json.RawMessage `json:"schema"`
	}
	if json.Unmarshal(raw, &f) != nil || f.Type != "json_schema" || len(f.Schema) == 0 {
		return ""
	}
	var buf bytes.Buffer
	if json.Compact(&buf, f.Schema) != nil {
		return ""
	}
	return buf.String()
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
