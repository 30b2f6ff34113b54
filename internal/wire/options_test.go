package wire

import (
	"encoding/json"
	"errors"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// TestDecodeSessionOptionsAccepts decodes every supported Agent SDK option and checks where it lands.
func TestDecodeSessionOptionsAccepts(t *testing.T) {
	o, err := DecodeSessionOptions(json.RawMessage(`{
		"model":"sonnet","fallbackModel":"haiku","systemPrompt":{"type":"preset","preset":"claude_code","append":"x","excludeDynamicSections":true},
		"maxTurns":3,"maxBudgetUsd":1.5,"maxThinkingTokens":1000,"thinking":{"type":"enabled","budgetTokens":2000},
		"effort":"low","tools":{"type":"preset","preset":"claude_code"},"allowedTools":["Read"],"disallowedTools":["Bash"],
		"permissionMode":"acceptEdits","allowDangerouslySkipPermissions":true,"env":{"A":"b"},
		"includePartialMessages":true,"includeHookEvents":true,
		"outputFormat":{"type":"json_schema","schema":{"type":"object"}},
		"agents":{"reviewer":{"description":"Reviews code","prompt":"You review.","tools":["Read"],"model":"inherit","maxTurns":2}},
		"agent":"reviewer","betas":["context-1m-2025-08-07"],"settingSources":[],"additionalDirectories":["/tmp/x"],
		"strictMcpConfig":true,"enableFileCheckpointing":true,"persistSession":true,
		"resume":"0b7e5cbe-6c2f-4a5e-9d5e-3f1f1b2a7c01","resumeSessionAt":"1b7e5cbe-6c2f-4a5e-9d5e-3f1f1b2a7c01",
		"forkSession":true,"cwd":"/workspace","mcpServers":{},"lastSeq":4}`))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.Tools, ToolList{"default"}) {
		t.Errorf("tools preset decoded to %q, want [default]", o.Tools)
	}
	if o.SessionID != "0b7e5cbe-6c2f-4a5e-9d5e-3f1f1b2a7c01" {
		t.Errorf("resume did not become sessionId: %q", o.SessionID)
	}
	if o.SettingSources == nil || len(o.SettingSources) != 0 {
		t.Errorf("settingSources [] decoded to %#v, want an empty list", o.SettingSources)
	}
	if a := o.Agents["reviewer"]; a.Prompt != "You review." || a.MaxTurns != 2 || o.Thinking.BudgetTokens != 2000 || o.Effort != "low" {
		t.Errorf("decoded %+v", o)
	}
	if !o.SystemPrompt.ExcludeDynamicSections || o.SystemPrompt.Append != "x" {
		t.Errorf("systemPrompt %+v", o.SystemPrompt)
	}
	if OutputSchema(o.OutputFormat) != `{"type":"object"}` {
		t.Errorf("OutputSchema = %q", OutputSchema(o.OutputFormat))
	}
	// Round trip (the sdkConfig overlay goes through JSON): an empty tools list stays empty, nil stays nil.
	for _, tools := range []ToolList{nil, {}} {
		b, _ := json.Marshal(SessionOptions{Tools: tools})
		back, err := DecodeSessionOptions(b)
		if err != nil || (back.Tools == nil) != (tools == nil) {
			t.Errorf("tools %#v round-tripped to %#v (%v) via %s", tools, back.Tools, err, b)
		}
	}
}

// TestDecodeSessionOptionsRefuses: nothing is dropped silently; every refusal is invalid_argument and names
// the option.
func TestDecodeSessionOptionsRefuses(t *testing.T) {
	cases := map[string]string{
		`{"frobnicate":1}`:                             "frobnicate",
		`{"hooks":{}}`:                                 "hooks",
		`{"settings":"{}"}`:                            "settings",
		`{"sandbox":{"enabled":true}}`:                 "sandbox",
		`{"plugins":[]}`:                               "plugins",
		`{"extraArgs":{"x":null}}`:                     "extraArgs",
		`{"cwd":"/etc"}`:                               "cwd",
		`{"tools":{"type":"preset","preset":"other"}}`: "tools",
		`{"tools":{"type":"preset","preset":"claude_code","x":1}}`: "x",
		`{"maxTurns":"x"}`:                                                     "maxTurns",
		`{"maxTurns":-1}`:                                                      "maxTurns",
		`{"effort":"extreme"}`:                                                 "effort",
		`{"thinking":{"type":"sometimes"}}`:                                    "thinking",
		`{"thinking":{"type":"disabled","budgetTokens":5}}`:                    "thinking.budgetTokens",
		`{"settingSources":["user","user"]}`:                                   "settingSources",
		`{"settingSources":["everywhere"]}`:                                    "settingSources",
		`{"betas":["Not A Beta"]}`:                                             "betas",
		`{"agents":{"a b":{"description":"d","prompt":"p"}}}`:                  "agents",
		`{"agents":{"a":{"description":"d"}}}`:                                 "agents.a",
		`{"agents":{"a":{"description":"d","prompt":"p","mcpServers":["x"]}}}`: "mcpServers",
		`{"agents":{"a":{"description":"d","prompt":"p","tools":["-x"]}}}`:     "agents.a.tools",
		`{"outputFormat":{"type":"text"}}`:                                     "outputFormat",
		`{"outputFormat":{"type":"json_schema","schema":"x"}}`:                 "outputFormat.schema",
		`{"additionalDirectories":["--help"]}`:                                 "additionalDirectories",
		`{"persistSession":false}`:                                             "persistSession",
		`{"resumeSessionAt":"0b7e5cbe-6c2f-4a5e-9d5e-3f1f1b2a7c01"}`:           "resumeSessionAt",
		`{"sessionId":"s","resumeSessionAt":"not-a-uuid"}`:                     "resumeSessionAt",
		`{"resume":"a","sessionId":"b"}`:                                       "resume",
		`{"systemPrompt":{"type":"preset","preset":"other"}}`:                  "systemPrompt",
		`{"model":"a\nb"}`:                                                     "model",
		`[1]`:                                                                  "session options",
	}
	for in, name := range cases {
		_, err := DecodeSessionOptions(json.RawMessage(in))
		if CodeOf(err) != InvalidArgument || !strings.Contains(err.Error(), name) {
			t.Errorf("DecodeSessionOptions(%s) = %v, want invalid_argument naming %q", in, err, name)
		}
	}
	many := `{"agents":{`
	for i := range maxAgents + 1 {
		if i > 0 {
			many += ","
		}
		many += `"a` + strings.Repeat("x", i) + `":{"description":"d","prompt":"p"}`
	}
	many += `}}`
	if _, err := DecodeSessionOptions(json.RawMessage(many)); CodeOf(err) != InvalidArgument {
		t.Errorf("%d agents: %v, want invalid_argument", maxAgents+1, err)
	}
	// What would not fit the CLI's command line or environment is refused here, not when it starts.
	big := strings.Repeat("x", MaxOptionArg)
	tooBig := map[string]SessionOptions{
		"systemPrompt": {SystemPrompt: &SystemPrompt{Text: big + "x"}},
		"agents":       {Agents: map[string]AgentDefinition{"a": {Description: "d", Prompt: big}}},
		"outputFormat": {OutputFormat: json.RawMessage(`{"type":"json_schema","schema":{"d":"` + big + `"}}`)},
		"env":          {Env: map[string]string{"A": big, "B": big, "C": big}},
	}
	for name, o := range tooBig {
		if err := o.Validate(); CodeOf(err) != InvalidArgument || !strings.Contains(err.Error(), name) {
			t.Errorf("oversize %s: %v", name, err)
		}
	}
}

// TestInitRefusesThroughParse: the edge validates init with ParseClientMessage, so refusals happen before
// anything reaches a runner.
func TestInitRefusesThroughParse(t *testing.T) {
	_, err := ParseClientMessage([]byte(`{"type":"init","payload":{"settingSources":["nowhere"]}}`))
	if CodeOf(err) != InvalidArgument {
		t.Fatalf("got %v", err)
	}
	m, err := ParseClientMessage([]byte(`{"type":"init","payload":{"tools":{"type":"preset","preset":"claude_code"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := m.Init(); !slices.Equal(o.Tools, ToolList{"default"}) {
		t.Fatalf("tools %q", o.Tools)
	}
}

// TestVesselAndJobIDAreRefusedByName: Chucky Cloud's vessel (a named sandbox, sent as ?vessel= or an
// option) and jobId ask for a workspace apart from the user's other sessions; Warren has one sandbox per
// user, so each is refused by name, saying what to do instead, never ignored. Before: ?vessel= was
// ignored (the session ran in the user's one workspace) and jobId was an unknown option with no reason.
func TestVesselAndJobIDAreRefusedByName(t *testing.T) {
	const instead = "a separate workspace needs another user id"
	for _, in := range []string{`{"jobId":"job-1"}`, `{"vessel":"build-box"}`} {
		_, err := DecodeSessionOptions(json.RawMessage(in))
		name := strings.Split(in, `"`)[1]
		if CodeOf(err) != InvalidArgument || !strings.Contains(err.Error(), "session option "+name+" is not supported") || !strings.Contains(err.Error(), instead) {
			t.Errorf("DecodeSessionOptions(%s) = %v, want invalid_argument naming %s and saying %q", in, err, name, instead)
		}
	}
	for _, q := range []string{"token=t&vessel=build-box", "vessel=", "token=t&jobId=j"} {
		v, _ := url.ParseQuery(q)
		err := CheckChannelQuery(v)
		name, _, _ := strings.Cut(strings.TrimPrefix(q, "token=t&"), "=")
		if CodeOf(err) != InvalidArgument || !strings.Contains(err.Error(), "query parameter "+name) || !strings.Contains(err.Error(), instead) {
			t.Errorf("CheckChannelQuery(%s) = %v, want invalid_argument naming %s", q, err, name)
		}
	}
	if err := CheckChannelQuery(url.Values{"token": {"t"}}); err != nil {
		t.Errorf("?token= alone: %v", err)
	}
}

// TestAgentsInChuckyShape: subagents as Chucky Cloud's TypeScript SDK declares them ({name, description,
// systemPrompt, model, tools, maxTurns}) are accepted and mapped to the CLI's shape (the prompt in prompt,
// no name or systemPrompt left for --agents); what does not fit is refused naming the field's full path.
// Before: "unknown member /agents/reviewer/name", and a bad entry's path without its index.
func TestAgentsInChuckyShape(t *testing.T) {
	o, err := DecodeSessionOptions(json.RawMessage(`{"agents":{"reviewer":{"name":"reviewer","description":"Reviews code",
		"systemPrompt":"You review.","model":"inherit","tools":["Read","Grep"],"maxTurns":3}}}`))
	if err != nil {
		t.Fatal(err)
	}
	a := o.Agents["reviewer"]
	if a.Prompt != "You review." || a.Description != "Reviews code" || a.MaxTurns != 3 || !slices.Equal(a.Tools, []string{"Read", "Grep"}) {
		t.Fatalf("agent %+v", a)
	}
	b, _ := json.Marshal(o.Agents)
	if strings.Contains(string(b), "name") || strings.Contains(string(b), "systemPrompt") {
		t.Fatalf("--agents would carry the SDK's fields: %s", b)
	}
	for in, want := range map[string]string{
		`{"agents":{"reviewer":{"description":"d","prompt":"p","tools":["Read","Grep",3]}}}`:           "session option agents.reviewer.tools[2]: ",
		`{"agents":{"reviewer":{"description":"d","prompt":"p","tools":["Read","","Grep"]}}}`:          "session option agents.reviewer.tools[1]: ",
		`{"agents":{"reviewer":{"description":"d","prompt":"p","disallowedTools":["-x"]}}}`:            "agents.reviewer.disallowedTools[0]",
		`{"agents":{"reviewer":{"description":"d","prompt":"p","color":"red"}}}`:                       "session option agents.reviewer.color: unknown member /agents/reviewer/color",
		`{"agents":{"reviewer":{"name":"other","description":"d","systemPrompt":"p"}}}`:                "agents.reviewer.name",
		`{"agents":{"reviewer":{"description":"d","prompt":"p","systemPrompt":"q"}}}`:                  "prompt and systemPrompt differ",
		`{"agents":{"reviewer":{"name":"reviewer","systemPrompt":"p"}}}`:                               "agents.reviewer needs a description",
		`{"agents":{"r":{"description":"d","systemPrompt":{"type":"preset","preset":"claude_code"}}}}`: "agents.r.systemPrompt",
	} {
		_, err := DecodeSessionOptions(json.RawMessage(in))
		if CodeOf(err) != InvalidArgument || !strings.Contains(err.Error(), want) {
			t.Errorf("DecodeSessionOptions(%s) = %v, want invalid_argument with %q", in, err, want)
		}
	}
	_, err = DecodeSessionOptions(json.RawMessage(`{"agents":{"reviewer":{"description":"d","prompt":"p","tools":[1]}}}`))
	var we *Error
	if !errors.As(err, &we) || we.Details["field"] != "/agents/reviewer/tools/0" {
		t.Errorf("details of %v: want field /agents/reviewer/tools/0", err)
	}
}

// TestOutputFormatString: outputFormat as a string, as Chucky Cloud's token types sdkConfig.outputFormat:
// "text" is the default (no structured output), a string holding the object's JSON is that object, and
// any other string is refused saying what the forms are. Before: every string was refused as not the
// object, so such a token opened no session.
func TestOutputFormatString(t *testing.T) {
	o, err := DecodeSessionOptions(json.RawMessage(`{"outputFormat":"text","model":"m"}`))
	if err != nil || len(o.OutputFormat) != 0 || o.Model != "m" {
		t.Fatalf(`"text": %+v, %v; want no output format`, o, err)
	}
	o, err = DecodeSessionOptions(json.RawMessage(`{"outputFormat":"{\"type\":\"json_schema\",\"schema\":{\"type\":\"object\"}}"}`))
	if err != nil || OutputSchema(o.OutputFormat) != `{"type":"object"}` {
		t.Fatalf("the object's JSON as a string: schema %q, %v", OutputSchema(o.OutputFormat), err)
	}
	for in, want := range map[string]string{
		`{"outputFormat":"json"}`:                                    `the string "json" means no format`,
		`{"outputFormat":"{\"type\":\"text\"}"}`:                     "outputFormat must be",
		`{"outputFormat":"{\"type\":\"json_schema\",\"schema\":1}"}`: "outputFormat.schema",
		`{"outputFormat":"{\"type\":"}`:                              "means no format",
	} {
		_, err := DecodeSessionOptions(json.RawMessage(in))
		if CodeOf(err) != InvalidArgument || !strings.Contains(err.Error(), want) {
			t.Errorf("DecodeSessionOptions(%s) = %v, want invalid_argument with %q", in, err, want)
		}
	}
}
