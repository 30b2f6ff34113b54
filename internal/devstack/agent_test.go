package devstack_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/warren-mesh/warren/billing"
	blobfs "github.com/warren-mesh/warren/internal/blob/fs"
	"github.com/warren-mesh/warren/internal/devstack"
	"github.com/warren-mesh/warren/internal/modelserver"
	"github.com/warren-mesh/warren/internal/registry"
	"github.com/warren-mesh/warren/internal/testenv"
	"github.com/warren-mesh/warren/internal/token"
	"github.com/warren-mesh/warren/runner/snapshot"
	warren "github.com/warren-mesh/warren/sdk"
)

type agentOpts struct {
	apiKey     string // real key: the test brings its own scripted upstream
	upstream   string
	idle       time.Duration
	args       []string // more runner flags
	noWebhooks bool     // devstack.Config.NoWebhooks
}

// agentStack is the dev platform with the real Claude Code CLI in every sandbox.
func agentStack(t *testing.T, o agentOpts) *devstack.Stack {
	t.Helper()
	cli := testenv.ClaudeCLI(t)
	st, err := devstack.Start(context.Background(), devstack.Config{
		DataDir: t.TempDir(), Listen: "127.0.0.1:0", Binary: binary, MeterInterval: time.Second,
		ClaudeCLI: cli, ModelAPIKey: o.apiKey, ModelUpstream: o.upstream, IdleTimeout: o.idle,
		RunnerArgs:   append([]string{"-log-level", "debug"}, o.args...),
		DefaultModel: "claude-sonnet-4-5", NoWebhooks: o.noWebhooks,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatalf("start dev stack: %v", err)
	}
	t.Cleanup(func() {
		_ = st.Close()
		if t.Failed() {
			logs, _ := filepath.Glob(filepath.Join(st.Config().DataDir, "sandboxes", "*", "state", "runner.log"))
			for _, l := range logs {
				b, _ := os.ReadFile(l)
				t.Logf("%s:\n%s", l, tail(string(b), 6000))
			}
		}
	})
	return st
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func agentCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// turn sends prompt and returns the turn's events and its result.
func turn(t *testing.T, ctx context.Context, s *warren.Session, prompt string) ([]warren.Event, *warren.ResultEvent) {
	t.Helper()
	var evs []warren.Event
	for ev, err := range s.Prompt(ctx, prompt) {
		if err != nil {
			t.Fatalf("prompt %q: %v", prompt, err)
		}
		evs = append(evs, ev)
		if r, ok := ev.Result(); ok {
			return evs, r
		}
	}
	for _, ev := range evs {
		t.Logf("event: %s", ev.Raw)
	}
	t.Fatalf("prompt %q: no result among %d events", prompt, len(evs))
	return nil, nil
}

func withBudget(aiMicros int64) func(*token.Claims) {
	return func(c *token.Claims) {
		c.HasBudget = true
		c.Budget = token.Budget{AIMicros: aiMicros, ComputeSeconds: 3600, Window: "lifetime"}
	}
}

func mainRequests(m *modelserver.Server) []modelserver.Request {
	var out []modelserver.Request
	for _, r := range m.Requests() {
		if r.Main {
			out = append(out, r)
		}
	}
	return out
}

func TestAgentWritesAndRunsThroughTheEdge(t *testing.T) {
	st := agentStack(t, agentOpts{})
	ctx := agentCtx(t)
	c := client(t, st, "zoe", withBudget(5_000_000))
	s, err := c.Dial(ctx, &warren.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	noticed := false
	for ev, err := range s.Events() { // the handshake is queued first
		if err != nil {
			t.Fatal(err)
		}
		if r, ok := ev.Ready(); ok {
			noticed = strings.Contains(r.Notice, "scripted")
			break
		}
	}
	if !noticed {
		t.Fatal("control ready does not say that a scripted model answers")
	}
	evs, res := turn(t, ctx, s, "create hello.txt containing hi")
	if res.IsError {
		t.Fatalf("turn 1 failed: %+v", res)
	}
	sawWrite := false
	for _, ev := range evs {
		if a, ok := ev.Assistant(); ok {
			for _, u := range a.ToolUses() {
				sawWrite = sawWrite || u.Name == "Write"
			}
		}
	}
	if !sawWrite {
		t.Fatal("no Write tool use among the streamed events")
	}
	_, res2 := turn(t, ctx, s, "run cat hello.txt > copy.txt")
	if res2.IsError {
		t.Fatalf("turn 2 failed: %+v", res2)
	}
	for _, f := range []string{"hello.txt", "copy.txt"} {
		b, err := c.Sandbox().ReadFile(ctx, f)
		if err != nil || strings.TrimSpace(string(b)) != "hi" {
			t.Fatalf("%s = %q, %v", f, b, err)
		}
	}
	// Multi-turn on one conversation: the second turn's model requests carry the first turn.
	reqs := mainRequests(st.Model)
	last := reqs[len(reqs)-1]
	if !strings.Contains(string(last.Body), "create hello.txt containing hi") {
		t.Fatal("the last model request does not contain the first turn")
	}
	// The result's cost is Warren's and matches the ledger exactly.
	var sum int64
	for _, r := range []*warren.ResultEvent{res, res2} {
		if r.Cost == nil || r.Cost.AIMicrodollars <= 0 || len(r.Cost.Models) == 0 {
			t.Fatalf("result without a cost extension: %+v", r)
		}
		sum += r.Cost.AIMicrodollars
	}
	u, err := st.Ledger.Usage(ctx, billing.Account{Issuer: devstack.DevIssuer, User: "zoe", Window: billing.Lifetime})
	if err != nil {
		t.Fatal(err)
	}
	if u.AIMicros != sum || u.HeldAIMicros != 0 {
		t.Fatalf("ledger used %d (held %d), results say %d", u.AIMicros, u.HeldAIMicros, sum)
	}
}

func TestAgentBudgetRunsOutMidSession(t *testing.T) {
	st := agentStack(t, agentOpts{})
	ctx := agentCtx(t)
	const limit = 400_000 // a plain turn costs ~66,000 µ$ but reserves its worst case: two or three fit
	c := client(t, st, "yara", withBudget(limit))
	s, err := c.Dial(ctx, &warren.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	acct := billing.Account{Issuer: devstack.DevIssuer, User: "yara", Window: billing.Lifetime}
	var ended *warren.ResultEvent
	paid := 0
	for i := 0; i < 8 && ended == nil; i++ {
		_, r := turn(t, ctx, s, "say something "+strconv.Itoa(i))
		if r.Subtype == warren.ResultErrorMaxBudget {
			ended = r
		} else if !r.IsError {
			paid++
		}
		u, err := st.Ledger.Usage(ctx, acct)
		if err != nil {
			t.Fatal(err)
		}
		if u.AIMicros > limit {
			t.Fatalf("ledger used %d over the limit %d", u.AIMicros, limit)
		}
	}
	if ended == nil || !ended.IsError || paid == 0 {
		t.Fatalf("want paid turns then one ended by the budget; paid %d, ended %+v", paid, ended)
	}
	if u, _ := st.Ledger.Usage(ctx, acct); u.AIMicros == 0 || u.HeldAIMicros != 0 {
		t.Fatalf("ledger after the budget ran out: %+v", u)
	}
}

func TestModelKeyNeverEntersTheSandbox(t *testing.T) {
	const realKey = "sk-warren-test-REAL-key-7f3a9c"
	ms := modelserver.New(modelserver.Options{})
	url, err := ms.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	st := agentStack(t, agentOpts{apiKey: realKey, upstream: url})
	ctx := agentCtx(t)
	c := client(t, st, "kim", withBudget(5_000_000))
	s, err := c.Dial(ctx, &warren.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, res := turn(t, ctx, s, "run env > env.txt; cat /proc/*/environ > environ.txt 2>/dev/null; grep -rl "+realKey[:12]+" /workspace /tmp /home /opt /etc > grep.txt 2>/dev/null; true")
	if res.IsError {
		t.Fatalf("turn failed: %+v", res)
	}
	for _, f := range []string{"env.txt", "environ.txt", "grep.txt"} {
		b, err := c.Sandbox().ReadFile(ctx, f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if strings.Contains(string(b), realKey) || strings.Contains(string(b), realKey[:12]) {
			t.Fatalf("the model key is visible inside the sandbox (%s):\n%s", f, b)
		}
		if f == "env.txt" && !strings.Contains(string(b), "ANTHROPIC_BASE_URL=http://127.0.0.1") {
			t.Fatalf("the agent does not talk to the runner's proxy:\n%s", b)
		}
	}
	// The key did reach the model, from the proxy.
	got := false
	for _, r := range mainRequests(ms) {
		got = got || r.Header.Get("X-Api-Key") == realKey
	}
	if !got {
		t.Fatal("the proxy never sent the real key upstream")
	}
}

func TestAgentResumesAfterRunnerKill(t *testing.T) {
	st := agentStack(t, agentOpts{})
	ctx := agentCtx(t)
	c := client(t, st, "liam", withBudget(5_000_000))
	s, err := c.Dial(ctx, &warren.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sid := s.ID()
	if _, r := turn(t, ctx, s, "create notes.txt containing remember me"); r.IsError {
		t.Fatalf("turn 1: %+v", r)
	}
	e, err := st.Registry.Lookup(ctx, devstack.DevIssuer, "liam")
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(e.Alloc)
	_ = syscall.Kill(-pid, syscall.SIGKILL) // the runner and everything it started
	_ = s.Close()

	s2, err := c.Dial(ctx, &warren.SessionOptions{SessionID: sid})
	if err != nil {
		t.Fatalf("reconnect: %v", err)
	}
	defer s2.Close()
	if e2, _ := st.Registry.Lookup(ctx, devstack.DevIssuer, "liam"); e2.Epoch <= e.Epoch {
		t.Fatalf("epoch %d after kill, was %d", e2.Epoch, e.Epoch)
	}
	before := len(mainRequests(st.Model))
	if _, r := turn(t, ctx, s2, "what did I ask before?"); r.IsError {
		t.Fatalf("turn after resume: %+v", r)
	}
	reqs := mainRequests(st.Model)[before:]
	if len(reqs) == 0 || !strings.Contains(string(reqs[0].Body), "create notes.txt containing remember me") {
		t.Fatal("the resumed conversation lost the earlier turn")
	}
	if b, err := c.Sandbox().ReadFile(ctx, "notes.txt"); err != nil || string(b) != "remember me" {
		t.Fatalf("notes.txt = %q, %v", b, err)
	}
	// A stale runner of the old epoch cannot commit a snapshot over the new owner's.
	store, err := blobfs.New(filepath.Join(st.Config().DataDir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	id := registry.SandboxID(devstack.DevIssuer, "liam")
	stale, err := snapshot.New(snapshot.Config{Store: store, Prefix: "sandboxes/" + id,
		Dirs: map[string]string{"workspace": filepath.Join(st.Config().DataDir, "sandboxes", id, "workspace")}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the new epoch's snapshot", func() bool {
		m, ok, err := stale.Latest(ctx)
		return err == nil && ok && m.Epoch > e.Epoch
	})
	if _, _, err := stale.Snapshot(ctx, e.Epoch); !errors.Is(err, snapshot.ErrFenced) {
		t.Fatalf("snapshot at stale epoch %d = %v, want ErrFenced", e.Epoch, err)
	}
}

func TestSleepsWhenIdleAndWakesFromSnapshot(t *testing.T) {
	st := agentStack(t, agentOpts{idle: 2 * time.Second})
	ctx := agentCtx(t)
	c := client(t, st, "mia", withBudget(5_000_000))
	s, err := c.Dial(ctx, &warren.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sid := s.ID()
	if _, r := turn(t, ctx, s, "create plan.txt containing step one"); r.IsError {
		t.Fatalf("turn 1: %+v", r)
	}
	_ = s.Close()
	// Idle: the runner snapshots and exits; the placement goes to sleep.
	waitFor(t, 30*time.Second, "the sandbox to sleep", func() bool {
		_, err := st.Registry.Lookup(ctx, devstack.DevIssuer, "mia")
		return errors.Is(err, registry.ErrNotFound)
	})
	// Prove the wake-up restores from object storage, not from the local directory.
	sbDir := filepath.Join(st.Config().DataDir, "sandboxes", registry.SandboxID(devstack.DevIssuer, "mia"))
	for _, d := range []string{"workspace", "home"} {
		if err := os.RemoveAll(filepath.Join(sbDir, d)); err != nil {
			t.Fatal(err)
		}
	}
	s2, err := c.Dial(ctx, &warren.SessionOptions{SessionID: sid})
	if err != nil {
		t.Fatalf("wake: %v", err)
	}
	defer s2.Close()
	if b, err := c.Sandbox().ReadFile(ctx, "plan.txt"); err != nil || string(b) != "step one" {
		t.Fatalf("plan.txt after wake = %q, %v", b, err)
	}
	before := len(mainRequests(st.Model))
	if _, r := turn(t, ctx, s2, "and then?"); r.IsError {
		t.Fatalf("turn after wake: %+v", r)
	}
	reqs := mainRequests(st.Model)[before:]
	if len(reqs) == 0 || !strings.Contains(string(reqs[0].Body), "create plan.txt containing step one") {
		t.Fatal("the woken conversation lost the earlier turn")
	}
}

// TestChatCLI is the README's agent tour: warren chat -p, then warren files get.
func TestChatCLI(t *testing.T) {
	st := agentStack(t, agentOpts{})
	tok := mint(t, st, "nina", withBudget(5_000_000))
	env := append(os.Environ(), "WARREN_URL="+st.URL(), "WARREN_TOKEN="+tok)
	cmd := exec.Command(binary, "chat", "-p", "create hello.txt containing hi")
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("warren chat: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "Write") || !strings.Contains(string(out), "cost:") {
		t.Fatalf("chat output lacks the tool call or the cost:\n%s", out)
	}
	cmd = exec.Command(binary, "files", "get", "hello.txt")
	cmd.Env = env
	out, err = cmd.Output()
	if err != nil || string(out) != "hi" {
		t.Fatalf("files get hello.txt = %q, %v", out, err)
	}
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond) // polling a condition with a deadline
	}
}

// The token's permissions override what the client asks for: a blocked tool never runs.
func TestTokenPermissionsBindTheAgent(t *testing.T) {
	st := agentStack(t, agentOpts{})
	ctx := agentCtx(t)
	c := client(t, st, "omar", withBudget(5_000_000), func(cl *token.Claims) {
		cl.Permissions = token.Permissions{BlockedTools: []string{"Bash"}}
	})
	s, err := c.Dial(ctx, &warren.SessionOptions{AllowedTools: []string{"Bash"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	evs, _ := turn(t, ctx, s, "run echo ran > blocked.txt")
	for _, ev := range evs {
		if sys, ok := ev.System(); ok && sys.Subtype == "init" {
			for _, tool := range sys.Tools {
				if tool == "Bash" {
					t.Fatalf("Bash offered to the agent despite the token: %v", sys.Tools)
				}
			}
		}
	}
	if _, err := c.Sandbox().ReadFile(ctx, "blocked.txt"); !warren.IsCode(err, warren.CodeNotFound) {
		t.Fatalf("a blocked tool ran: %v", err)
	}
}

// At most two sessions of one user are live at once (concurrency_limit, docs/PROTOCOL.md#errors).
func TestLiveSessionCap(t *testing.T) {
	st := agentStack(t, agentOpts{})
	ctx := agentCtx(t)
	c := client(t, st, "pia", withBudget(5_000_000))
	a, err := c.Dial(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Dial(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := c.Dial(ctx, nil); !warren.IsCode(err, warren.CodeConcurrencyLimit) {
		t.Fatalf("third live session: %v, want concurrency_limit", err)
	}
	// Closing one frees a place; resuming it later counts again.
	_ = a.Close()
	waitFor(t, 10*time.Second, "a place to free up", func() bool {
		s, err := c.Dial(ctx, nil)
		if err == nil {
			_ = s.Close()
		}
		return err == nil
	})
}

// The README's default data dir is relative (./.warren); runners run elsewhere, so every path they get must
// be absolute.
func TestRelativeDataDir(t *testing.T) {
	cli := testenv.ClaudeCLI(t)
	t.Chdir(t.TempDir())
	st, err := devstack.Start(context.Background(), devstack.Config{
		DataDir: ".warren", Listen: "127.0.0.1:0", Binary: binary, ClaudeCLI: cli, DefaultModel: "claude-sonnet-4-5",
	})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := agentCtx(t)
	s, err := client(t, st, "rel", withBudget(5_000_000)).Dial(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, r := turn(t, ctx, s, "create rel.txt containing ok"); r.IsError {
		t.Fatalf("turn: %+v", r)
	}
}

// Two tokens of one user: a restricted token prompting into a session another token opened still runs
// under its own permissions (the CLI restarts with the new flags and resumes).
func TestPermissionsFollowTheConnection(t *testing.T) {
	st := agentStack(t, agentOpts{})
	ctx := agentCtx(t)
	open := client(t, st, "quin", withBudget(5_000_000))
	s, err := open.Dial(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, r := turn(t, ctx, s, "run echo first > first.txt"); r.IsError {
		t.Fatalf("turn 1: %+v", r)
	}
	sid := s.ID()
	_ = s.Close()

	restricted := client(t, st, "quin", withBudget(5_000_000), func(cl *token.Claims) {
		cl.Permissions = token.Permissions{BlockedTools: []string{"Bash"}}
	})
	s2, err := restricted.Dial(ctx, &warren.SessionOptions{SessionID: sid})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	turn(t, ctx, s2, "run echo second > second.txt")
	if _, err := restricted.Sandbox().ReadFile(ctx, "second.txt"); !warren.IsCode(err, warren.CodeNotFound) {
		t.Fatalf("the restricted token ran Bash in a session opened by another token: %v", err)
	}
	if b, err := restricted.Sandbox().ReadFile(ctx, "first.txt"); err != nil || strings.TrimSpace(string(b)) != "first" {
		t.Fatalf("first.txt = %q, %v", b, err)
	}
}

// Two sessions of one user in parallel against a budget that one turn fits but not two: one turn completes,
// the other ends with error_max_budget_usd, and the ledger never passes the limit. (A turn of the scripted
// model costs ~0.066 $, its input ~22k tokens of the CLI's system prompt. Near the end of a budget the proxy
// bounds a call by its counted input (~0.1 $ at the cache-write price, with margins) and lowers max_tokens
// to what is left, so 0.15 $ fits one turn; the other is refused while the first holds its reservation, or
// finds ~0.084 $ left after it settles, less than its bound.)
func TestParallelSessionsShareOneBudget(t *testing.T) {
	st := agentStack(t, agentOpts{})
	ctx := agentCtx(t)
	const limit = 150_000
	c := client(t, st, "sam", withBudget(limit))
	var sessions [2]*warren.Session
	for i := range sessions {
		s, err := c.Dial(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		sessions[i] = s
	}
	results := make(chan *warren.ResultEvent, 2)
	for i, s := range sessions {
		go func() {
			for ev, err := range s.Prompt(ctx, "say hello "+strconv.Itoa(i)) {
				if err != nil {
					results <- nil
					return
				}
				if r, ok := ev.Result(); ok {
					results <- r
					return
				}
			}
			results <- nil
		}()
	}
	ok, budget := 0, 0
	for range 2 {
		r := <-results
		switch {
		case r == nil:
			t.Fatal("a turn ended without a result")
		case r.Subtype == warren.ResultErrorMaxBudget:
			budget++
		case !r.IsError:
			ok++
		}
	}
	u, err := st.Ledger.Usage(ctx, billing.Account{Issuer: devstack.DevIssuer, User: "sam", Window: billing.Lifetime})
	if err != nil {
		t.Fatal(err)
	}
	if ok != 1 || budget != 1 || u.AIMicros > limit || u.AIMicros == 0 || u.HeldAIMicros != 0 {
		t.Fatalf("completed %d, budget-ended %d, ledger %+v (limit %d)", ok, budget, u, limit)
	}
}

// Prices set through the billing API are what a sandbox started afterwards charges.
func TestAPIPricesReachTheProxy(t *testing.T) {
	st := agentStack(t, agentOpts{})
	ctx := agentCtx(t)
	ps := st.Ledger.(billing.PriceStore)
	// Ten times the list price: a turn must cost ten times what the built-in table says.
	if err := ps.PutPrice(ctx, "claude-sonnet-4-5", billing.Price{Input: 30_000_000, Output: 150_000_000, CacheRead: 3_000_000, CacheCreation: 37_500_000}); err != nil {
		t.Fatal(err)
	}
	s, err := client(t, st, "vic", withBudget(50_000_000)).Dial(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, r := turn(t, ctx, s, "hello")
	if r.IsError || r.Cost == nil {
		t.Fatalf("turn: %+v", r)
	}
	m := r.Cost.Models["claude-sonnet-4-5"]
	want := billing.Price{Input: 30_000_000, Output: 150_000_000, CacheRead: 3_000_000, CacheCreation: 37_500_000}.Cost(billing.TokenUsage{
		InputTokens: m.InputTokens, OutputTokens: m.OutputTokens, CacheReadInputTokens: m.CacheReadInputTokens, CacheCreationInputTokens: m.CacheCreationInputTokens})
	if m.Microdollars != want || want == 0 {
		t.Fatalf("charged %d µ$ for %+v, want %d at the API's price", m.Microdollars, m, want)
	}
}
