package modelproxy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
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
	cli := testenv.ClaudeCLI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	home := t.TempDir()
	args := []string{"-p", prompt, "--output-format", "stream-json", "--verbose", "--permission-mode", "bypassPermissions"}
	if model != "" {
		args = append(args, "--model", model)
	}
	cmd := exec.CommandContext(ctx, cli, args...)
	cmd.Dir = t.TempDir()
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
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("the CLI did not finish; stderr:\n%s", stderr.String())
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	var result map[string]any
	for line := range bytes.Lines(stdout.Bytes()) {
		var m map[string]any
		if json.Unmarshal(line, &m) == nil && m["type"] == "result" {
			result = m
		}
	}
	if result == nil {
		t.Fatalf("no result line; stderr:\n%s\nstdout:\n%s", stderr.String(), stdout.String())
	}
	return result
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

// The pinned CLI's ordinary calls pass the policy as the runner configures it (a running turn, one allowed
// model, only CLIBetas, no server tools): nothing is refused, and every anthropic-beta it sends is in
// CLIBetas (this keeps CLIBetas exact).
func TestCLISendsOnlyAllowedBetas(t *testing.T) {
	e := startEnv(t, modelserver.Options{}, func(c *modelproxy.Config) {
		c.RequireTurn = true
		c.MessagesPerMinute, c.CountTokensPerMinute = 0, 0 // the defaults
	})
	token := e.proxy.Open("s1", modelproxy.SessionGrant{Account: acct, AILimit: 10_000_000, Models: []string{"claude-sonnet-4-5"}})
	e.proxy.TurnStart("s1")
	for _, prompt := range []string{"hi", "run ls", "create f.txt containing hi"} {
		if res := runCLI(t, e.url, token, "auto", prompt); res["is_error"] == true {
			t.Fatalf("%q: result %v", prompt, res)
		}
	}
	e.proxy.TurnEnd("s1")
	// The CLI's default model (what `warren dev` users get) sends betas of its own.
	token2 := e.proxy.Open("s2", modelproxy.SessionGrant{Account: acct, AILimit: 10_000_000})
	e.proxy.TurnStart("s2")
	if res := runCLIModel(t, e.url, token2, "auto", "create g.txt containing hi", ""); res["is_error"] == true {
		t.Fatalf("default model: result %v", res)
	}
	e.proxy.TurnEnd("s2")
	for _, reason := range []string{"policy", "rate", "no_turn", "invalid", "auth"} {
		if n := e.counter(t, "warren_modelproxy_rejected_total", "reason", reason); n != 0 {
			t.Errorf("%v CLI requests refused (%s)", n, reason)
		}
	}
	seen := map[string]bool{}
	for _, r := range e.ms.Requests() {
		for _, v := range r.Header.Values("Anthropic-Beta") {
			for b := range strings.SplitSeq(v, ",") {
				seen[strings.TrimSpace(b)] = true
			}
		}
	}
	for _, b := range modelproxy.CLIBetas {
		if !seen[b] {
			t.Errorf("CLIBetas lists %q, which the CLI did not send", b)
		}
	}
	if len(e.ms.Requests()) < 3 {
		t.Errorf("%d upstream requests", len(e.ms.Requests()))
	}
}
