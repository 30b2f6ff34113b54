package modelproxy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/modelserver"
	"github.com/warren-mesh/warren/internal/testenv"
	"github.com/warren-mesh/warren/runner/modelproxy"
)

// runCLI runs `claude -p prompt` against the proxy with token as its API key and returns its result line.
func runCLI(t *testing.T, proxyURL, token, scenario, prompt string) map[string]any {
	t.Helper()
	return runCLIModel(t, proxyURL, token, scenario, prompt, "claude-sonnet-4-5")
}

// runCLIModel runs the CLI with model, or with its own default model when "".
func runCLIModel(t *testing.T, proxyURL, token, scenario, prompt, model string) map[string]any {
	t.Helper()
	run := cliRun{model: model, mode: "bypassPermissions", prompts: []string{prompt}}.run(t, proxyURL, token, scenario)
	return run.results[len(run.results)-1]
}

// cliRun is one run of the CLI: its model ("" for its default), permission mode and prompts. One prompt
// is passed with -p; several (a slash command among them) go in on stdin as stream-json user messages,
// one turn each.
type cliRun struct {
	model, mode string
	prompts     []string
}

// cliOutput is what a run printed: every stream-json line, its result lines, and its working directory.
type cliOutput struct {
	dir     string
	lines   []map[string]any
	results []map[string]any
}

func (c cliRun) run(t *testing.T, proxyURL, token, scenario string) cliOutput {
	t.Helper()
	cli := testenv.ClaudeCLI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	home := t.TempDir()
	args := []string{"-p", "--output-format", "stream-json", "--verbose", "--permission-mode", c.mode}
	if len(c.prompts) == 1 {
		args = slices.Insert(args, 1, c.prompts[0])
	} else {
		args = append(args, "--input-format", "stream-json")
	}
	if c.model != "" {
		args = append(args, "--model", c.model)
	}
	out := cliOutput{dir: t.TempDir()}
	cmd := exec.CommandContext(ctx, cli, args...)
	cmd.Dir = out.dir
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + home,
		"CLAUDE_CONFIG_DIR=" + filepath.Join(home, ".claude"),
		"ANTHROPIC_BASE_URL=" + proxyURL,
		"ANTHROPIC_API_KEY=" + token,
		"ANTHROPIC_CUSTOM_HEADERS=" + modelserver.HeaderScenario + ": " + scenario,
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"DISABLE_TELEMETRY=1",
		"DISABLE_AUTOUPDATER=1",
		"IS_SANDBOX=1",
	}
	var stdin, stdout, stderr bytes.Buffer
	if len(c.prompts) > 1 {
		for _, p := range c.prompts {
			line, _ := json.Marshal(map[string]any{"type": "user", "session_id": "", "parent_tool_use_id": nil,
				"message": map[string]any{"role": "user", "content": p}})
			stdin.Write(append(line, '\n'))
		}
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = &stdin, &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("the CLI did not finish; stderr:\n%s", stderr.String())
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	for line := range bytes.Lines(stdout.Bytes()) {
		var m map[string]any
		if json.Unmarshal(line, &m) == nil {
			out.lines = append(out.lines, m)
			if m["type"] == "result" {
				out.results = append(out.results, m)
			}
		}
	}
	if len(out.results) == 0 {
		t.Fatalf("no result line; stderr:\n%s\nstdout:\n%s", stderr.String(), stdout.String())
	}
	return out
}

// The Claude Code CLI runs a turn through the proxy; every call it makes is metered and settled.
func TestCLITurnIsMetered(t *testing.T) {
	e := startEnv(t, modelserver.Options{})
	token := e.proxy.OpenSession("s1", acct, 10_000_000)
	res := runCLI(t, e.url, token, "plain", "hi")
	if res["is_error"] == true {
		t.Fatalf("result %v", res)
	}
	u := e.proxy.Usage("s1")
	l := ledgerUsage(t, e.ledger)
	if u.Calls == 0 || u.AIMicros == 0 || l.AIMicros != u.AIMicros || l.HeldAIMicros != 0 {
		t.Errorf("session %+v, ledger %+v", u, l)
	}
	for _, r := range e.ms.Requests() {
		if r.Header.Get("X-Api-Key") != realKey {
			t.Errorf("upstream request with x-api-key %q", r.Header.Get("X-Api-Key"))
		}
	}
	t.Logf("%d calls, %d µ$, CLI reports total_cost_usd %v", u.Calls, u.AIMicros, res["total_cost_usd"])
}

// The proxy's budget refusal ends the CLI's turn at once: one request, no retries, and the message
// reaches the result.
func TestCLIDoesNotRetryBudgetRefusal(t *testing.T) {
	e := startEnv(t, modelserver.Options{})
	token := e.proxy.OpenSession("s1", acct, 0)
	start := time.Now()
	res := runCLI(t, e.url, token, "plain", "hi")
	elapsed := time.Since(start)
	refused := e.counter(t, "warren_modelproxy_rejected_total", "reason", "budget")
	if refused != 1 {
		t.Errorf("the proxy refused %v requests, want 1: the CLI retried", refused)
	}
	if text, _ := res["result"].(string); res["is_error"] != true || !strings.Contains(text, "budget for this window is exhausted") {
		t.Errorf("result %v", res)
	}
	if n := len(e.ms.Requests()); n != 0 {
		t.Errorf("%d upstream requests", n)
	}
	if !e.proxy.Usage("s1").BudgetExhausted {
		t.Errorf("turn not marked exhausted")
	}
	t.Logf("CLI gave up after %v: %v", elapsed.Round(time.Millisecond), res["result"])
}

// Every permission mode of the pinned CLI works through a proxy configured like the runner's (a running
// turn, default rates, only CLIBetas and KnownFields, no server tools), with its default model (an Opus,
// which sends the most) and with a named one, and so do a subagent (the Agent tool) and a compaction
// (/compact): every turn completes, nothing is refused, and every anthropic-beta CLIBetas lists was sent
// (this keeps CLIBetas exact). Before the betas of plan and auto modes were listed, their calls were refused
// (400) and their turns ended in an API error.
func TestCLIModesPassThePolicy(t *testing.T) {
	testenv.ClaudeCLI(t) // skips under -short, before the subtests would
	e := startEnv(t, modelserver.Options{}, func(c *modelproxy.Config) {
		c.RequireTurn = true
		c.MessagesPerMinute, c.CountTokensPerMinute = 0, 0 // the defaults
	})
	const subagent = `call Agent {"description":"sub","prompt":"create sub.txt containing hi","subagent_type":"general-purpose"}`
	runs := map[string]cliRun{
		"named model":       {model: "claude-sonnet-4-5", mode: "bypassPermissions", prompts: []string{"run ls"}},
		"named model, plan": {model: "claude-sonnet-4-5", mode: "plan", prompts: []string{"create f.txt containing hi"}},
		"subagent":          {mode: "bypassPermissions", prompts: []string{subagent}},
		"compaction":        {model: "claude-sonnet-4-5", mode: "bypassPermissions", prompts: []string{"hi", "/compact", "hi again"}},
	}
	for _, mode := range []string{"default", "plan", "acceptEdits", "bypassPermissions", "auto", "dontAsk"} {
		runs[mode] = cliRun{mode: mode, prompts: []string{"create f.txt containing hi"}}
	}
	for _, name := range slices.Sorted(maps.Keys(runs)) {
		c := runs[name]
		t.Run(name, func(t *testing.T) {
			grant := modelproxy.SessionGrant{Account: acct, AILimit: 10_000_000}
			if c.model != "" {
				grant.Models = []string{c.model} // a token allowing one model, as the runner opens it
			}
			token := e.proxy.Open(name, grant)
			e.proxy.TurnStart(name)
			before := len(e.modelCalls())
			out := c.run(t, e.url, token, "auto")
			e.proxy.TurnEnd(name)
			for _, res := range out.results {
				if res["is_error"] == true {
					t.Fatalf("result %v", res)
				}
			}
			if len(e.modelCalls()) == before || e.proxy.Usage(name).Calls == 0 {
				t.Fatal("no call went through the proxy")
			}
			switch name {
			case "subagent":
				if b, err := os.ReadFile(filepath.Join(out.dir, "sub.txt")); err != nil || string(b) != "hi" {
					t.Errorf("the subagent did not write sub.txt: %q, %v", b, err)
				}
			case "compaction":
				if !slices.ContainsFunc(out.lines, func(l map[string]any) bool { return l["subtype"] == "compact_boundary" }) {
					t.Errorf("no compact_boundary line: the conversation was not compacted")
				}
			}
		})
	}
	for _, reason := range []string{"policy", "rate", "no_turn", "invalid", "auth", "budget"} {
		if n := e.counter(t, "warren_modelproxy_rejected_total", "reason", reason); n != 0 {
			t.Errorf("%v CLI requests refused (%s)", n, reason)
		}
	}
	seen := map[string]bool{}
	safeguards := false
	for _, r := range e.modelCalls() {
		for _, v := range r.Header.Values("Anthropic-Beta") {
			for b := range strings.SplitSeq(v, ",") {
				seen[strings.TrimSpace(b)] = true
			}
		}
		var top map[string]json.RawMessage
		_ = json.Unmarshal(r.Body, &top)
		_, sg := top["safeguards"]
		safeguards = safeguards || sg
	}
	for _, b := range modelproxy.CLIBetas {
		if !seen[b] {
			t.Errorf("CLIBetas lists %q, which the CLI did not send", b)
		}
	}
	if !safeguards {
		t.Errorf("no call carried safeguards: KnownFields lists it for plan and auto modes")
	}
	t.Logf("%d model calls, betas %v", len(e.modelCalls()), slices.Sorted(maps.Keys(seen)))
}

// A budget of a few cents takes a turn that fits: the reservation is clamped to what is left, the input
// is counted upstream because its byte bound alone (~$0.33 for the CLI's ~87 KB first call) is over the
// budget, max_tokens is lowered to what remains, and the turn completes within the budget. Before the
// count, the call was refused and the turn ended "budget exhausted" with $0 spent.
func TestCLISmallBudgetTurnCompletes(t *testing.T) {
	e := startEnv(t, modelserver.Options{}, func(c *modelproxy.Config) { c.RequireTurn = true })
	const limit = 120_000 // $0.12; the turn costs about $0.066
	token := e.proxy.Open("s1", modelproxy.SessionGrant{Account: acct, AILimit: limit, Models: []string{"claude-sonnet-4-5"}})
	e.proxy.TurnStart("s1")
	res := runCLI(t, e.url, token, "plain", "hi")
	e.proxy.TurnEnd("s1")
	if res["is_error"] == true {
		t.Fatalf("result %v", res)
	}
	waitFor(t, func() bool { return ledgerUsage(t, e.ledger).HeldAIMicros == 0 }, func() string { return "holds left" })
	u, l := e.proxy.Usage("s1"), ledgerUsage(t, e.ledger)
	if u.AIMicros == 0 || l.AIMicros != u.AIMicros || l.AIMicros > limit || u.BudgetExhausted {
		t.Errorf("session %+v, ledger %+v, limit %d µ$", u, l, limit)
	}
	calls := e.modelCalls()
	if len(calls) == 0 || calls[0].MaxTokens >= modelproxy.DefaultMaxTokens {
		t.Errorf("%d model calls; the first was not clamped", len(calls))
	}
	t.Logf("%d calls, %d of %d µ$ spent, first call's max_tokens %d", len(calls), u.AIMicros, limit, calls[0].MaxTokens)
}
