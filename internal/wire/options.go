package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/url"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/warren-mesh/warren/internal/strictjson"
)

// SystemPrompt is either a plain string or {"type":"preset","preset":"claude_code","append"?:...,
// "excludeDynamicSections"?:bool}.
type SystemPrompt struct {
	Text   string `json:"-"`
	Type   string `json:"type,omitempty"`
	Preset string `json:"preset,omitempty"`
	Append string `json:"append,omitempty"`
	// ExcludeDynamicSections moves the per-machine sections of the preset prompt into the first user
	// message (the CLI's --exclude-dynamic-system-prompt-sections), for prompt-cache reuse.
	ExcludeDynamicSections bool `json:"excludeDynamicSections,omitempty"`
}

func (s *SystemPrompt) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		return strictjson.Unmarshal(b, &s.Text)
	}
	type plain SystemPrompt
	var p plain
	if err := DecodeStrict(b, &p); err != nil {
		return err
	}
	*s = SystemPrompt(p)
	return nil
}

func (s SystemPrompt) MarshalJSON() ([]byte, error) {
	if s.Type == "" {
		return json.Marshal(s.Text)
	}
	type plain SystemPrompt
	return json.Marshal(plain(s))
}

// ToolsPreset is the one preset SessionOptions.tools accepts: the CLI's default tool set.
const ToolsPreset = "claude_code"

// ToolList is SessionOptions.tools: tool names, or the preset {"type":"preset","preset":"claude_code"},
// which decodes to ["default"] (the CLI's name for its default set). nil means not given; an empty list
// means no built-in tool.
type ToolList []string

func (t *ToolList) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '{' {
		var p struct {
			Type   string `json:"type"`
			Preset string `json:"preset"`
		}
		if err := DecodeStrict(b, &p); err != nil {
			return err
		}
		if p.Type != "preset" || p.Preset != ToolsPreset {
			return Errorf(InvalidArgument, `tools: the only preset is {"type":"preset","preset":%q}`, ToolsPreset)
		}
		*t = ToolList{"default"}
		return nil
	}
	var l []string
	if err := strictjson.Unmarshal(b, &l); err != nil {
		return err
	}
	*t = l
	return nil
}

// AgentDefinition is one subagent of SessionOptions.agents (the CLI's --agents). Name and SystemPrompt
// are the shape of Chucky Cloud's TypeScript SDK ({name, description?, systemPrompt?, model?, tools?,
// maxTurns?}): DecodeSessionOptions checks them and moves the prompt to Prompt, so what reaches the CLI
// has neither.
type AgentDefinition struct {
	// Name, when given, is the agent's key in agents.
	Name string `json:"name,omitempty"`
	// SystemPrompt is the subagent's prompt as a string; the preset form is the main agent's only.
	SystemPrompt    *SystemPrompt `json:"systemPrompt,omitempty"`
	Description     string        `json:"description"`
	Prompt          string        `json:"prompt"`
	Tools           []string      `json:"tools,omitempty"`
	DisallowedTools []string      `json:"disallowedTools,omitempty"`
	// Model is an alias (sonnet, opus, haiku), a model name, or "inherit".
	Model    string `json:"model,omitempty"`
	MaxTurns int    `json:"maxTurns,omitempty"`
}

// ThinkingConfig is SessionOptions.thinking: {"type":"adaptive"|"enabled"|"disabled","budgetTokens"?:n}.
type ThinkingConfig struct {
	Type         string `json:"type"`
	BudgetTokens int    `json:"budgetTokens,omitempty"`
}

// SessionOptions is the init payload (docs/PROTOCOL.md#session-options); every field is optional.
type SessionOptions struct {
	Model             string          `json:"model,omitempty"`
	FallbackModel     string          `json:"fallbackModel,omitempty"`
	SystemPrompt      *SystemPrompt   `json:"systemPrompt,omitempty"`
	MaxTurns          int             `json:"maxTurns,omitempty"`
	MaxBudgetUSD      float64         `json:"maxBudgetUsd,omitempty"`
	MaxThinkingTokens int             `json:"maxThinkingTokens,omitempty"`
	Thinking          *ThinkingConfig `json:"thinking,omitempty"`
	Effort            string          `json:"effort,omitempty"`
	// Tools is encoded even when nil (as null), so that an empty list (no built-in tool) survives.
	Tools                           ToolList                   `json:"tools"`
	AllowedTools                    []string                   `json:"allowedTools,omitempty"`
	DisallowedTools                 []string                   `json:"disallowedTools,omitempty"`
	PermissionMode                  string                     `json:"permissionMode,omitempty"`
	AllowDangerouslySkipPermissions bool                       `json:"allowDangerouslySkipPermissions,omitempty"`
	Env                             map[string]string          `json:"env,omitempty"`
	IncludePartialMessages          bool                       `json:"includePartialMessages,omitempty"`
	IncludeHookEvents               bool                       `json:"includeHookEvents,omitempty"`
	OutputFormat                    json.RawMessage            `json:"outputFormat,omitempty"`
	Agents                          map[string]AgentDefinition `json:"agents,omitempty"`
	Agent                           string                     `json:"agent,omitempty"`
	Betas                           []string                   `json:"betas,omitempty"`
	// SettingSources are the settings files the CLI loads (user, project, local); nil is the CLI's
	// default (all of them), an empty list none. Encoded even when nil, like Tools.
	SettingSources          []string `json:"settingSources"`
	AdditionalDirectories   []string `json:"additionalDirectories,omitempty"`
	StrictMCPConfig         bool     `json:"strictMcpConfig,omitempty"`
	EnableFileCheckpointing bool     `json:"enableFileCheckpointing,omitempty"`
	// PersistSession false is refused: Warren keeps every transcript to resume it.
	PersistSession *bool `json:"persistSession,omitempty"`
	// SessionID attaches to (or resumes) an existing session; the Agent SDK's "resume" is accepted as
	// its alias.
	SessionID string `json:"sessionId,omitempty"`
	// ResumeSessionAt resumes SessionID's transcript only up to this message uuid (the CLI's
	// --resume-session-at).
	ResumeSessionAt string `json:"resumeSessionAt,omitempty"`
	ForkSession     bool   `json:"forkSession,omitempty"`
	Continue        bool   `json:"continue,omitempty"`
	// MCPServers are client tools and MCP servers given to the agent (docs/PROTOCOL.md#host-tools).
	MCPServers MCPServerList `json:"mcpServers,omitempty"`
	// Warren extensions.
	LastSeq *int64 `json:"lastSeq,omitempty"`
	// Role is RoleHost for a host connection (possession mode, docs/PROTOCOL.md#host-tools): its client
	// tool servers are host tools, added to the session it attaches to.
	Role string `json:"role,omitempty"`
	// Root is the host's directory, as the host reports it: informational, nothing acts on it.
	Root string `json:"root,omitempty"`
}

// RoleHost is SessionOptions.Role of a host connection.
const RoleHost = "host"

// unsupportedOptions are Agent SDK options Warren refuses, with the reason given to the client.
var unsupportedOptions = map[string]string{
	"hooks":                      "hook callbacks run in a local SDK host; the agent runs in Warren's sandbox",
	"canUseTool":                 "permission callbacks run in a local SDK host; use permissionMode, allowedTools and disallowedTools",
	"permissionPromptToolName":   "permission prompts are not supported; use permissionMode, allowedTools and disallowedTools",
	"settings":                   "inline settings could change the agent's environment, credentials and hooks, which Warren sets",
	"sandbox":                    "the agent always runs in Warren's own sandbox",
	"plugins":                    "plugins are not supported",
	"extraArgs":                  "arbitrary CLI flags are not accepted; every supported option has its own field",
	"executable":                 "Warren runs its own Claude Code CLI",
	"executableArgs":             "Warren runs its own Claude Code CLI",
	"pathToClaudeCodeExecutable": "Warren runs its own Claude Code CLI",
	"spawnClaudeCodeProcess":     "Warren runs its own Claude Code CLI",
	"stderr":                     "the CLI's stderr stays in the sandbox",
	"abortController":            "use the control message interrupt",
	"debug":                      "the CLI's debug output stays in the sandbox",
	"debugFile":                  "the CLI's debug output stays in the sandbox",
	"jobId":                      oneSandbox,
	"vessel":                     oneSandbox,
}

// oneSandbox is why Chucky Cloud's vessel (a named sandbox) and jobId are refused: Warren keeps one sandbox
// per user, and would otherwise run what the app meant to keep apart in one workspace.
const oneSandbox = "Warren keeps one sandbox (one workspace) per user, kept across connections; " +
	"a separate workspace needs another user id (the token's sub)"

// CheckChannelQuery refuses the agent channel query parameters Warren does not honour: vessel (Chucky
// Cloud's TypeScript SDK sends ?vessel= to ask for a named sandbox of its own) and jobId, invalid_argument
// naming the parameter. Other parameters (token) are the edge's.
func CheckChannelQuery(q url.Values) error {
	for _, name := range []string{"vessel", "jobId"} {
		if q.Has(name) {
			return Errorf(InvalidArgument, "query parameter %s is not supported: %s", name, oneSandbox)
		}
	}
	return nil
}

// sessionOptionNames are the JSON names of SessionOptions' fields.
var sessionOptionNames = func() []string {
	var names []string
	t := reflect.TypeFor[SessionOptions]()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		names = append(names, name)
	}
	return names
}()

// Workspace is the agent's working directory inside the sandbox.
const Workspace = "/workspace"

// DecodeSessionOptions decodes and validates session options (an init payload, or the sdkConfig claim
// merged over one). Every option is either understood or refused: unknown options, options Warren
// does not support, values of the wrong type or shape and unknown fields inside an option are
// invalid_argument errors naming the option. Empty or null is no options.
func DecodeSessionOptions(raw json.RawMessage) (SessionOptions, error) {
	var o SessionOptions
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return o, nil
	}
	var fields map[string]json.RawMessage
	if err := strictjson.Unmarshal(raw, &fields); err != nil {
		return o, Errorf(InvalidArgument, "session options must be a JSON object")
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	rewrite := false
	for _, k := range keys {
		v := fields[k]
		switch {
		case k == "outputFormat" && len(bytes.TrimSpace(v)) > 0 && bytes.TrimSpace(v)[0] == '"':
			f, err := outputFormatString(v)
			if err != nil {
				return o, err
			}
			if f == nil {
				delete(fields, k)
			} else {
				fields[k] = f
			}
			rewrite = true
		case k == "tools" && hasToolDefinitions(v):
			tools, servers, err := toolDefinitions(v, fields["mcpServers"])
			if err != nil {
				return o, err
			}
			if tools == nil {
				delete(fields, k)
			} else {
				fields[k] = tools
			}
			fields["mcpServers"] = servers
			rewrite = true
		case slices.Contains(sessionOptionNames, k):
		case k == "resume":
			// The Agent SDK's name for the session to resume.
			var id string
			if err := strictjson.Unmarshal(v, &id); err != nil {
				return o, Errorf(InvalidArgument, "session option resume must be a string")
			}
			if cur, ok := fields["sessionId"]; ok && string(cur) != "null" {
				var s string
				if strictjson.Unmarshal(cur, &s) != nil || (id != "" && s != id) {
					return o, Errorf(InvalidArgument, "session options resume and sessionId name different sessions")
				}
			}
			delete(fields, "resume")
			if id != "" {
				fields["sessionId"] = v
			}
			rewrite = true
		case k == "cwd":
			var cwd string
			if strictjson.Unmarshal(v, &cwd) != nil || (cwd != Workspace && cwd != Workspace+"/") {
				return o, Errorf(InvalidArgument, "session option cwd is not supported: the agent's working directory is always %s", Workspace)
			}
			delete(fields, "cwd")
			rewrite = true
		default:
			if reason, ok := unsupportedOptions[k]; ok {
				return o, Errorf(InvalidArgument, "session option %s is not supported: %s", k, reason)
			}
			return o, Errorf(InvalidArgument, "unknown session option %q", clip(k))
		}
	}
	if rewrite {
		raw, _ = json.Marshal(fields)
	}
	if err := DecodeStrict(raw, &o); err != nil {
		return SessionOptions{}, optionError(err)
	}
	if err := o.normalizeAgents(); err != nil {
		return SessionOptions{}, err
	}
	if err := o.Validate(); err != nil {
		return SessionOptions{}, err
	}
	return o, nil
}

// DecodeStrict decodes exactly one JSON value into v, refusing unknown fields, duplicate names, case
// variants of a field's name and trailing data (strictjson with RejectUnknown). Errors are *strictjson.Error.
func DecodeStrict(b []byte, v any) error {
	return strictjson.Unmarshal(b, v, strictjson.RejectUnknown)
}

// normalizeAgents maps subagents given in the shape of Chucky Cloud's SDK to the CLI's: name must be the
// agent's key, and systemPrompt (a string) is its prompt.
func (o *SessionOptions) normalizeAgents() error {
	for _, key := range sortedKeys(o.Agents) {
		a := o.Agents[key]
		if a.Name != "" && a.Name != key {
			return Errorf(InvalidArgument, "session option agents.%s.name: %q is not the agent's key %q", clip(key), clip(a.Name), clip(key))
		}
		if sp := a.SystemPrompt; sp != nil {
			if sp.Type != "" {
				return Errorf(InvalidArgument, "session option agents.%s.systemPrompt: a subagent's prompt is a string (the preset is the main agent's only)", clip(key))
			}
			if a.Prompt != "" && a.Prompt != sp.Text {
				return Errorf(InvalidArgument, "session option agents.%s: prompt and systemPrompt differ (give one)", clip(key))
			}
			a.Prompt = sp.Text
		}
		a.Name, a.SystemPrompt = "", nil
		o.Agents[key] = a
	}
	return nil
}

// optionError names the option a decoding error is about: its path (agents.reviewer.tools[2]), then
// strictjson's message with the JSON Pointer (details.field).
func optionError(err error) error {
	var we *Error
	if errors.As(err, &we) {
		return we
	}
	e := JSONError(err, "session options")
	var je *strictjson.Error
	if errors.As(err, &je) && je.Pointer != "" {
		e.Message = "session option " + clip(optionPath(je.Pointer)) + ": " + je.Error()
	}
	return e
}

// optionPath is a JSON Pointer as a dotted path with list indexes in brackets: /agents/a/tools/2 is
// agents.a.tools[2]. A member named by digits reads as an index.
func optionPath(pointer string) string {
	var b strings.Builder
	for i, seg := range strings.Split(strings.TrimPrefix(pointer, "/"), "/") {
		seg = strings.NewReplacer("~1", "/", "~0", "~").Replace(seg)
		switch {
		case seg != "" && strings.Trim(seg, "0123456789") == "" && i > 0:
			b.WriteString("[" + seg + "]")
		case i > 0:
			b.WriteString("." + seg)
		default:
			b.WriteString(seg)
		}
	}
	return b.String()
}

// Bounds of session options: they are tenant input and end up on the CLI's command line and in its
// environment, where Linux refuses a single string over 128 KiB and all of them together over about
// 2 MiB (the agent would then fail to start after ready instead of being refused at init).
const (
	maxOptionString = 256
	maxListEntries  = 256
	maxAgents       = 32
	maxBetas        = 16
	maxDirs         = 16
	// MaxOptionArg bounds an option that becomes one CLI argument: the system prompt, the encoded
	// agents, the output schema.
	MaxOptionArg = 100 << 10
	maxEnvVars   = 128
	// MaxEnvBytes bounds the client's environment (names, values and their separators).
	MaxEnvBytes = 256 << 10
)

var (
	betaPattern      = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,127}$`)
	agentNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)
	uuidPattern      = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)
)

// Effort levels, SettingSources values and thinking types the CLI accepts.
var (
	EffortLevels   = []string{"low", "medium", "high", "xhigh", "max"}
	SettingSources = []string{"user", "project", "local"}
	ThinkingTypes  = []string{"adaptive", "enabled", "disabled"}
)

// Validate checks the options' shapes and bounds (what is allowed for a given token is the agent's
// decision). Failures are invalid_argument errors naming the option.
func (o SessionOptions) Validate() error {
	for name, s := range map[string]string{"model": o.Model, "fallbackModel": o.FallbackModel, "agent": o.Agent} {
		if len(s) > maxOptionString || strings.ContainsFunc(s, isControl) {
			return Errorf(InvalidArgument, "session option %s must be at most %d bytes without control characters", name, maxOptionString)
		}
	}
	if o.MaxTurns < 0 || o.MaxThinkingTokens < 0 || o.MaxBudgetUSD < 0 {
		return Errorf(InvalidArgument, "maxTurns, maxThinkingTokens and maxBudgetUsd must not be negative")
	}
	if sp := o.SystemPrompt; sp != nil {
		if sp.Type != "" && (sp.Type != "preset" || sp.Preset != ToolsPreset) {
			return Errorf(InvalidArgument, `session option systemPrompt: the only preset is {"type":"preset","preset":%q}`, ToolsPreset)
		}
		if strings.IndexByte(sp.Text, 0) >= 0 || strings.IndexByte(sp.Append, 0) >= 0 {
			return Errorf(InvalidArgument, "systemPrompt must not contain NUL")
		}
		if len(sp.Text) > MaxOptionArg || len(sp.Append) > MaxOptionArg {
			return Errorf(InvalidArgument, "session option systemPrompt exceeds %d bytes", MaxOptionArg)
		}
	}
	if t := o.Thinking; t != nil {
		if !slices.Contains(ThinkingTypes, t.Type) {
			return Errorf(InvalidArgument, "session option thinking.type must be one of %s", strings.Join(ThinkingTypes, ", "))
		}
		if t.BudgetTokens < 0 || (t.BudgetTokens > 0 && t.Type != "enabled") {
			return Errorf(InvalidArgument, "session option thinking.budgetTokens must be positive and only with type enabled")
		}
	}
	if o.Effort != "" && !slices.Contains(EffortLevels, o.Effort) {
		return Errorf(InvalidArgument, "session option effort must be one of %s", strings.Join(EffortLevels, ", "))
	}
	for name, list := range map[string][]string{"tools": o.Tools, "allowedTools": o.AllowedTools, "disallowedTools": o.DisallowedTools} {
		if err := checkNames(name, list); err != nil {
			return err
		}
	}
	if err := checkOutputFormat(o.OutputFormat); err != nil {
		return err
	}
	if len(o.Agents) > maxAgents {
		return Errorf(InvalidArgument, "session option agents: at most %d agents", maxAgents)
	}
	for name, a := range o.Agents {
		if err := a.validate(name); err != nil {
			return err
		}
	}
	if b, _ := json.Marshal(o.Agents); len(o.Agents) > 0 && len(b) > MaxOptionArg {
		return Errorf(InvalidArgument, "session option agents exceeds %d bytes encoded", MaxOptionArg)
	}
	envBytes, envLargest := 0, 0
	for k, v := range o.Env {
		envBytes += len(k) + len(v) + 2
		envLargest = max(envLargest, len(k)+len(v)+1)
	}
	if len(o.Env) > maxEnvVars || envBytes > MaxEnvBytes || envLargest > MaxOptionArg {
		return Errorf(InvalidArgument, "session option env: at most %d variables, %d bytes each and %d in all", maxEnvVars, MaxOptionArg, MaxEnvBytes)
	}
	if o.Agent != "" && !agentNamePattern.MatchString(o.Agent) {
		return Errorf(InvalidArgument, "session option agent: invalid agent name %q", o.Agent)
	}
	if len(o.Betas) > maxBetas {
		return Errorf(InvalidArgument, "session option betas: at most %d betas", maxBetas)
	}
	for _, b := range o.Betas {
		if !betaPattern.MatchString(b) {
			return Errorf(InvalidArgument, "session option betas: invalid beta %q", b)
		}
	}
	for i, s := range o.SettingSources {
		if !slices.Contains(SettingSources, s) || slices.Contains(o.SettingSources[:i], s) {
			return Errorf(InvalidArgument, "session option settingSources: %q is not one of %s (each at most once)", s, strings.Join(SettingSources, ", "))
		}
	}
	if len(o.AdditionalDirectories) > maxDirs {
		return Errorf(InvalidArgument, "session option additionalDirectories: at most %d directories", maxDirs)
	}
	for _, d := range o.AdditionalDirectories {
		if d == "" || len(d) > 4096 || strings.HasPrefix(d, "-") || strings.ContainsFunc(d, isControl) {
			return Errorf(InvalidArgument, "session option additionalDirectories: invalid directory %q", d)
		}
	}
	if err := validateMCPServers(o.MCPServers); err != nil {
		return err
	}
	if err := o.validateRole(); err != nil {
		return err
	}
	if o.PersistSession != nil && !*o.PersistSession {
		return Errorf(InvalidArgument, "session option persistSession false is not supported: Warren keeps every session's transcript to resume it")
	}
	if o.ResumeSessionAt != "" {
		if !uuidPattern.MatchString(o.ResumeSessionAt) {
			return Errorf(InvalidArgument, "session option resumeSessionAt must be a message uuid")
		}
		if o.SessionID == "" {
			return Errorf(InvalidArgument, "session option resumeSessionAt needs sessionId (the session to resume)")
		}
	}
	return nil
}

// validateRole checks role and root: a host declares its tools (at least one client tool server) and
// reports its root (at most 4096 bytes without control characters); root goes only with role host.
func (o SessionOptions) validateRole() error {
	switch o.Role {
	case "":
		if o.Root != "" {
			return Errorf(InvalidArgument, "session option root goes with role %q", RoleHost)
		}
		return nil
	case RoleHost:
	default:
		return Errorf(InvalidArgument, "session option role: %q is not %q", clip(o.Role), RoleHost)
	}
	if len(o.Root) > 4096 || strings.ContainsFunc(o.Root, isControl) {
		return Errorf(InvalidArgument, "session option root must be at most 4096 bytes without control characters")
	}
	if !slices.ContainsFunc(o.MCPServers, func(s MCPServer) bool { return s.Kind() == MCPClient }) {
		return Errorf(InvalidArgument, "session option role %q: a host declares its tools in mcpServers (a client tool server)", RoleHost)
	}
	return nil
}

func (a AgentDefinition) validate(name string) error {
	if !agentNamePattern.MatchString(name) {
		return Errorf(InvalidArgument, "session option agents: invalid agent name %q", name)
	}
	if strings.TrimSpace(a.Description) == "" || strings.TrimSpace(a.Prompt) == "" {
		return Errorf(InvalidArgument, "session option agents.%s needs a description and a prompt (or systemPrompt): the CLI chooses a subagent by its description", name)
	}
	if strings.IndexByte(a.Description+a.Prompt, 0) >= 0 {
		return Errorf(InvalidArgument, "session option agents.%s: description and prompt must not contain NUL", name)
	}
	if len(a.Model) > maxOptionString || strings.ContainsFunc(a.Model, isControl) || a.MaxTurns < 0 {
		return Errorf(InvalidArgument, "session option agents.%s: invalid model or maxTurns", name)
	}
	if err := checkNames("agents."+name+".tools", a.Tools); err != nil {
		return err
	}
	return checkNames("agents."+name+".disallowedTools", a.DisallowedTools)
}

func checkNames(option string, list []string) error {
	if len(list) > maxListEntries {
		return Errorf(InvalidArgument, "session option %s: at most %d entries", option, maxListEntries)
	}
	for i, t := range list {
		if strings.TrimSpace(t) == "" || strings.HasPrefix(t, "-") || len(t) > maxOptionString || strings.ContainsFunc(t, isControl) {
			return Errorf(InvalidArgument, "session option %s[%d]: invalid tool name %q", option, i, clip(t))
		}
	}
	return nil
}

// OutputSchema returns the schema of outputFormat {"type":"json_schema","schema":{...}}, compacted; ""
// when raw is empty. It assumes raw passed Validate.
func OutputSchema(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var f struct {
		Schema json.RawMessage `json:"schema"`
	}
	if strictjson.Unmarshal(raw, &f) != nil {
		return ""
	}
	var buf bytes.Buffer
	if json.Compact(&buf, f.Schema) != nil {
		return ""
	}
	return buf.String()
}

// outputFormatString is outputFormat given as a string, as Chucky Cloud's token types its
// sdkConfig.outputFormat: "text" is plain text, the default (nil: no structured output), and a string
// holding the JSON of {"type":"json_schema","schema":{...}} is that object; any other string means nothing
// Warren can do and is refused.
func outputFormatString(v json.RawMessage) (json.RawMessage, error) {
	var s string
	if err := strictjson.Unmarshal(v, &s); err != nil {
		return nil, JSONError(err, "session option outputFormat")
	}
	if s == "text" {
		return nil, nil
	}
	if t := strings.TrimSpace(s); strings.HasPrefix(t, "{") && json.Valid([]byte(t)) {
		return json.RawMessage(t), nil
	}
	return nil, Errorf(InvalidArgument, `session option outputFormat: the string %q means no format; give "text" (the default: plain text), `+
		`{"type":"json_schema","schema":{...}} or that object's JSON as a string`, clip(s))
}

func checkOutputFormat(raw json.RawMessage) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var f struct {
		Type   string          `json:"type"`
		Schema json.RawMessage `json:"schema"`
	}
	if err := DecodeStrict(raw, &f); err != nil || f.Type != "json_schema" {
		return Errorf(InvalidArgument, `session option outputFormat must be {"type":"json_schema","schema":{...}}`)
	}
	s := bytes.TrimSpace(f.Schema)
	if len(s) < 2 || s[0] != '{' {
		return Errorf(InvalidArgument, "session option outputFormat.schema must be a JSON Schema object")
	}
	if len(s) > MaxOptionArg {
		return Errorf(InvalidArgument, "session option outputFormat.schema exceeds %d bytes", MaxOptionArg)
	}
	return nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }
