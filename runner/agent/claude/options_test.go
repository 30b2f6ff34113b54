package claude

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner/session"
)

// TestAgentSDKOptions runs the real CLI with the Agent SDK options Warren maps beyond the basic ones and
// checks that each took effect: subagents, a beta that passed the model proxy's policy, setting sources,
// and the tools preset given by the token's sdkConfig.
func TestAgentSDKOptions(t *testing.T) {
	r := newRig(t)
	if err := os.MkdirAll(filepath.Join(r.ws, ".claude"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A project setting the CLI reports in system/init: loaded only with the project source.
	if err := os.WriteFile(filepath.Join(r.ws, ".claude", "settings.json"), []byte(`{"outputStyle":"Explanatory"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	const beta = "context-1m-2025-08-07"
	d := r.driver(t, "", func(c *Config) {
		c.SDKConfig = json.RawMessage(`{"tools":{"type":"preset","preset":"claude_code"}}`)
		c.AllowBeta = func(b string) bool { return b == beta }
	})
	ctx := context.Background()
	opts := wire.SessionOptions{
		Model:          "claude-sonnet-4-5",
		Agents:         map[string]wire.AgentDefinition{"warren-reviewer": {Description: "Reviews code", Prompt: "You review code."}},
		Betas:          []string{beta},
		SettingSources: []string{},
		Effort:         "low",
		Thinking:       &wire.ThinkingConfig{Type: "disabled"},
	}
	if _, err := d.Check(ctx, session.Check{Options: opts}); err != nil {
		t.Fatalf("Check: %v", err)
	}
	tr := run(t, ctx, d, session.NewID(), opts, "hello")
	mustSucceed(t, tr)
	init := tr.events[0]
	if agents, _ := init["agents"].([]any); !containsAny(agents, "warren-reviewer") {
		t.Errorf("init agents %v lack the session's subagent", init["agents"])
	}
	if tools, _ := init["tools"].([]any); !containsAny(tools, "Bash") || !containsAny(tools, "Write") {
		t.Errorf("the tools preset did not give the default set: %v", init["tools"])
	}
	if init["output_style"] != "default" {
		t.Errorf("settingSources [] still loaded the project settings: output_style %v", init["output_style"])
	}
	reqs := mainRequests(r.ms)
	if len(reqs) == 0 || !strings.Contains(strings.Join(reqs[0].Header.Values("Anthropic-Beta"), ","), beta) {
		t.Errorf("the session's beta was not sent: %v", reqs)
	}

	// The control: with the project source the same settings file is loaded. The remaining flags ride
	// along: the CLI must accept every one of them.
	opts.SettingSources = []string{"project"}
	opts.Agent, opts.AdditionalDirectories, opts.StrictMCPConfig = "warren-reviewer", []string{"/tmp"}, true
	opts.AllowDangerouslySkipPermissions, opts.IncludeHookEvents, opts.EnableFileCheckpointing = true, true, true
	opts.Thinking, opts.Effort = &wire.ThinkingConfig{Type: "adaptive"}, "max"
	opts.SystemPrompt = &wire.SystemPrompt{Type: "preset", Preset: wire.ToolsPreset, ExcludeDynamicSections: true}
	tr = run(t, ctx, d, session.NewID(), opts, "hello")
	mustSucceed(t, tr)
	if tr.events[0]["output_style"] != "Explanatory" {
		t.Errorf("settingSources [project]: output_style %v", tr.events[0]["output_style"])
	}

	// A beta the proxy would refuse is refused before any process starts.
	opts.Betas = []string{"files-api-2025-04-14"}
	if _, err := d.Check(ctx, session.Check{Options: opts}); wire.CodeOf(err) != wire.InvalidArgument || !strings.Contains(err.Error(), "betas") {
		t.Errorf("Check with a refused beta: %v", err)
	}
}

// TestCheck: what init learns before ready. An explicit sessionId must name a known session, a
// resumeSessionAt a message of its transcript; the model is the one the CLI's system/init names; and
// resumeSessionAt does resume the conversation up to that message.
func TestCheck(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	d := r.driver(t, "", nil)

	unknown := session.NewID()
	if _, err := d.Check(ctx, session.Check{Options: wire.SessionOptions{SessionID: unknown}}); wire.CodeOf(err) != wire.NotFound {
		t.Errorf("unknown session: %v, want not_found", err)
	}
	if _, err := d.Check(ctx, session.Check{Options: wire.SessionOptions{SessionID: unknown}, Open: true}); err != nil {
		t.Errorf("a session the hub holds: %v", err)
	}
	if _, err := d.Check(ctx, session.Check{Options: wire.SessionOptions{Env: map[string]string{"ANTHROPIC_API_KEY": "x"}}}); wire.CodeOf(err) != wire.InvalidArgument {
		t.Errorf("reserved env: %v", err)
	}

	// The model: "" and an alias are resolved the way the CLI resolves them.
	for _, model := range []string{"", "sonnet", "claude-sonnet-4-5"} {
		got, err := d.Check(ctx, session.Check{Options: wire.SessionOptions{Model: model}})
		if err != nil {
			t.Fatal(err)
		}
		tr := run(t, ctx, d, session.NewID(), wire.SessionOptions{Model: model}, "hello")
		mustSucceed(t, tr)
		if want := tr.events[0]["model"]; got.Model != want {
			t.Errorf("model %q: Check says %q, system/init %v", model, got.Model, want)
		}
	}

	id := session.NewID()
	first := mustSucceedEvents(t, run(t, ctx, d, id, wire.SessionOptions{}, "remember the word apple"))
	mustSucceed(t, run(t, ctx, d, id, wire.SessionOptions{}, "remember the word banana"))
	var at string
	for _, ev := range first {
		if ev["type"] == "assistant" {
			at, _ = ev["uuid"].(string)
		}
	}
	if at == "" {
		t.Fatal("no assistant uuid in the first turn")
	}
	if _, err := d.Check(ctx, session.Check{Options: wire.SessionOptions{SessionID: id}}); err != nil {
		t.Errorf("known session: %v", err)
	}
	if _, err := d.Check(ctx, session.Check{Options: wire.SessionOptions{SessionID: id, ResumeSessionAt: session.NewID()}}); wire.CodeOf(err) != wire.NotFound {
		t.Errorf("resumeSessionAt an unknown message: %v, want not_found", err)
	}
	resumeAt := wire.SessionOptions{SessionID: id, ResumeSessionAt: at}
	if _, err := d.Check(ctx, session.Check{Options: resumeAt}); err != nil {
		t.Fatalf("resumeSessionAt: %v", err)
	}

	// A new runner resumes the session at the first turn: the second is not in the conversation.
	d2 := r.driver(t, "", nil)
	r.ms.Reset()
	mustSucceed(t, run(t, ctx, d2, id, resumeAt, "what was the word?"))
	reqs := mainRequests(r.ms)
	if len(reqs) == 0 {
		t.Fatal("no request")
	}
	text := messagesText(reqs[0])
	if !strings.Contains(text, "apple") || strings.Contains(text, "banana") {
		t.Errorf("resumeSessionAt: the conversation should hold apple and not banana: %s", text)
	}

	// A later process of the session (here: another runner) resumes the conversation as it has become:
	// the turn after the cut, still without the cut-off one.
	d3 := r.driver(t, "", nil)
	r.ms.Reset()
	mustSucceed(t, run(t, ctx, d3, id, wire.SessionOptions{SessionID: id}, "and again?"))
	if reqs = mainRequests(r.ms); len(reqs) == 0 {
		t.Fatal("no request")
	}
	text = messagesText(reqs[0])
	if !strings.Contains(text, "what was the word?") || strings.Contains(text, "banana") {
		t.Errorf("the resumed conversation after resumeSessionAt: %s", text)
	}
}

func mustSucceedEvents(t *testing.T, tr turnResult) []map[string]any {
	t.Helper()
	mustSucceed(t, tr)
	return slices.Clone(tr.events)
}

// TestLargestOptionsStart: options at their bounds still fit the CLI's command line and environment, so
// that what init accepts never fails when the agent starts.
func TestLargestOptionsStart(t *testing.T) {
	r := newRig(t)
	d := r.driver(t, "", nil)
	fill := func(n int) string { return strings.Repeat("word ", n/5+1)[:n] }
	agents := map[string]wire.AgentDefinition{}
	for i := range 4 {
		agents[fmt.Sprintf("agent-%d", i)] = wire.AgentDefinition{Description: "A test agent", Prompt: fill(wire.MaxOptionArg/4 - 200)}
	}
	schema := `{"type":"object","description":"` + fill(wire.MaxOptionArg-100) + `"}`
	opts := wire.SessionOptions{
		Model:        "claude-sonnet-4-5",
		SystemPrompt: &wire.SystemPrompt{Text: fill(wire.MaxOptionArg)},
		Agents:       agents,
		OutputFormat: json.RawMessage(`{"type":"json_schema","schema":` + schema + `}`),
		Env:          map[string]string{"BIG_A": fill(wire.MaxOptionArg - 10), "BIG_B": fill(wire.MaxOptionArg - 10)},
	}
	if err := opts.Validate(); err != nil {
		t.Fatalf("the options are not at their bounds but over them: %v", err)
	}
	if _, err := d.Check(context.Background(), session.Check{Options: opts}); err != nil {
		t.Fatal(err)
	}
	tr := run(t, context.Background(), d, session.NewID(), opts, "hello")
	if tr.err != nil {
		t.Fatalf("the agent did not run with options at their bounds: %v", tr.err)
	}
	tr.result(t)
}
