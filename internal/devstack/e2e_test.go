package devstack_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/warren-mesh/warren/billing"
	billingsqlite "github.com/warren-mesh/warren/billing/sqlite"
	"github.com/warren-mesh/warren/edge"
	"github.com/warren-mesh/warren/internal/devstack"
	"github.com/warren-mesh/warren/internal/registry"
	"github.com/warren-mesh/warren/internal/token"
	"github.com/warren-mesh/warren/internal/wire"
	warren "github.com/warren-mesh/warren/sdk"
)

// binary is the warren binary built once for every test here: runners are real processes.
var binary string

func TestMain(m *testing.M) {
	code := func() int {
		dir, err := os.MkdirTemp("", "warren-e2e-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		binary = filepath.Join(dir, "warren")
		out, err := exec.Command("go", "build", "-o", binary, "github.com/warren-mesh/warren/cmd/warren").CombinedOutput()
		if err != nil {
			fmt.Fprintf(os.Stderr, "build warren: %v\n%s", err, out)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

func startStack(t testing.TB, mods ...func(*devstack.Config)) *devstack.Stack {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end: starts runner processes under bubblewrap")
	}
	cfg := devstack.Config{
		DataDir: t.TempDir(), Listen: "127.0.0.1:0", Binary: binary, MeterInterval: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	for _, m := range mods {
		m(&cfg)
	}
	st, err := devstack.Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("start dev stack: %v", err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("close stack: %v", err)
		}
		if t.Failed() {
			logs, _ := filepath.Glob(filepath.Join(st.Config().DataDir, "sandboxes", "*", "state", "runner.log"))
			for _, l := range logs {
				b, _ := os.ReadFile(l)
				t.Logf("%s:\n%s", l, b)
			}
		}
	})
	return st
}

func mint(t testing.TB, st *devstack.Stack, user string, mod ...func(*token.Claims)) string {
	t.Helper()
	c := token.Claims{Issuer: devstack.DevIssuer, Subject: user, ExpiresAt: time.Now().Add(time.Hour)}
	for _, f := range mod {
		f(&c)
	}
	tok, err := token.Mint(st.DevKey, c)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func client(t testing.TB, st *devstack.Stack, user string, mod ...func(*token.Claims)) *warren.Client {
	t.Helper()
	c, err := warren.New(st.URL(), mint(t, st, user, mod...))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestExecAndFiles(t *testing.T) {
	st := startStack(t)
	ctx := ctxT(t)
	sb := client(t, st, "alice").Sandbox()

	res, err := sb.Exec(ctx, wire.ExecRequest{Command: "echo hi > f && cat f"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Stdout != "hi\n" || res.ExitCode != 0 {
		t.Fatalf("exec = %+v", res)
	}
	got, err := sb.ReadFile(ctx, "f")
	if err != nil || string(got) != "hi\n" {
		t.Fatalf("ReadFile f = %q, %v", got, err)
	}

	// Streaming: chunks of both streams arrive, in order per stream, then the exit with the command's code.
	var out, errOut strings.Builder
	var exit *wire.ExecResult
	firstBeforeExit := false
	for ev, err := range sb.ExecStream(ctx, wire.ExecRequest{Command: "echo one; sleep 0.2; echo two >&2; exit 3"}) {
		if err != nil {
			t.Fatal(err)
		}
		switch ev.Kind {
		case warren.ExecStdout:
			out.WriteString(ev.Data)
			firstBeforeExit = exit == nil
		case warren.ExecStderr:
			errOut.WriteString(ev.Data)
		case warren.ExecExit:
			exit = ev.Result
		}
	}
	if out.String() != "one\n" || errOut.String() != "two\n" || exit == nil || exit.ExitCode != 3 || !firstBeforeExit {
		t.Fatalf("stream: stdout %q stderr %q exit %+v", out.String(), errOut.String(), exit)
	}

	// Files round trip, a 5 MiB body streamed both ways, listing and removal.
	big := bytes.Repeat([]byte("0123456789abcdef"), 5<<20/16)
	if _, err := sb.WriteFile(ctx, "dir/big.bin", bytes.NewReader(big)); err != nil {
		t.Fatal(err)
	}
	rc, err := sb.Open(ctx, "dir/big.bin")
	if err != nil {
		t.Fatal(err)
	}
	back, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(back, big) {
		t.Fatalf("big file round trip: %d bytes, %v", len(back), err)
	}
	ls, err := sb.List(ctx, "dir")
	if err != nil || len(ls) != 1 || ls[0].Name != "big.bin" || ls[0].Size != int64(len(big)) {
		t.Fatalf("List dir = %+v, %v", ls, err)
	}
	res, err = sb.Exec(ctx, wire.ExecRequest{Command: "sha256sum", Args: []string{"dir/big.bin"}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("sha256sum in sandbox: %+v %v", res, err)
	}
	if err := sb.Remove(ctx, "dir", true); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.ReadFile(ctx, "dir/big.bin"); !warren.IsCode(err, warren.CodeNotFound) {
		t.Fatalf("read removed file = %v, want not_found", err)
	}
	// Escapes are refused through the edge as well.
	for _, p := range []string{"../x", "/etc/passwd", "a/../../x"} {
		if _, err := sb.ReadFile(ctx, p); err == nil || warren.IsCode(err, warren.CodeNotFound) {
			t.Errorf("ReadFile(%q) = %v, want a refusal", p, err)
		}
	}
	if st.Scheduler.Live() != 1 {
		t.Fatalf("live sandboxes = %d, want 1", st.Scheduler.Live())
	}
}

func TestUsersAreIsolated(t *testing.T) {
	st := startStack(t)
	ctx := ctxT(t)
	alice, bob := client(t, st, "alice").Sandbox(), client(t, st, "bob").Sandbox()
	if _, err := alice.WriteFile(ctx, "secret.txt", strings.NewReader("alice's")); err != nil {
		t.Fatal(err)
	}
	if _, err := bob.ReadFile(ctx, "secret.txt"); !warren.IsCode(err, warren.CodeNotFound) {
		t.Fatalf("bob reads alice's file: %v", err)
	}
	// From inside bob's sandbox nothing of alice's, nor of the platform's data dir, is reachable.
	dataDir := st.Config().DataDir
	res, err := bob.Exec(ctx, wire.ExecRequest{Command: fmt.Sprintf(
		"ls /workspace; cat %s/secrets.json; ls %s/sandboxes; grep -rl alice /workspace /tmp 2>/dev/null; echo pids=$(ls /proc | grep -c '^[0-9]')",
		dataDir, dataDir)})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(res.Stdout, "secret.txt") || strings.Contains(res.Stdout, "dev-v1") {
		t.Fatalf("bob's sandbox sees another user's or the platform's files: %+v", res)
	}
	if !strings.Contains(res.Stderr, "No such file") {
		t.Fatalf("expected the data dir to be absent inside the sandbox: %+v", res)
	}
	ea, _ := st.Registry.Lookup(ctx, devstack.DevIssuer, "alice")
	eb, _ := st.Registry.Lookup(ctx, devstack.DevIssuer, "bob")
	if ea.Alloc == eb.Alloc || ea.Addr == eb.Addr || ea.Key == eb.Key {
		t.Fatalf("alice and bob share a runner: %+v %+v", ea, eb)
	}
	// A runner refuses the edge key of another runner: runners of different users cannot be cross-called.
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+ea.Addr+"/v1/sandbox/files/list?path=.", nil)
	req.Header.Set("Authorization", "Bearer "+eb.Key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("alice's runner with bob's key: %d, want 401", resp.StatusCode)
	}
}

func TestConcurrentConnectsStartOneRunner(t *testing.T) {
	st := startStack(t)
	ctx := ctxT(t)
	c := client(t, st, "carol")
	const n = 50
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sessions := make(chan *warren.Session, n)
	// All attach to one conversation: a user may have only 2 live sessions (TestLiveSessionCap), but any
	// number of clients on one session.
	for range n {
		wg.Go(func() {
			s, err := c.Dial(ctx, &warren.SessionOptions{SessionID: "shared-session"})
			if err != nil {
				errs <- err
				return
			}
			sessions <- s
		})
	}
	wg.Wait()
	close(errs)
	close(sessions)
	for err := range errs {
		t.Fatalf("dial: %v", err)
	}
	ids := map[string]bool{}
	for s := range sessions {
		if s.Region() != "local" {
			t.Errorf("region = %q", s.Region())
		}
		ids[s.ID()] = true
		_ = s.Close()
	}
	if len(ids) != 1 || !ids["shared-session"] {
		t.Errorf("session ids %v, want only shared-session", ids)
	}
	if live := st.Scheduler.Live(); live != 1 {
		t.Fatalf("live runners = %d, want 1", live)
	}
	e, err := st.Registry.Lookup(ctx, devstack.DevIssuer, "carol")
	if err != nil || e.Epoch != 1 {
		t.Fatalf("registry = %+v, %v; want epoch 1", e, err)
	}
	if got := runnerProcesses(t, "carol"); got != 1 {
		t.Fatalf("%d runner processes for carol, want 1", got)
	}
}

func TestKilledRunnerIsReplacedWithNextEpoch(t *testing.T) {
	st := startStack(t)
	ctx := ctxT(t)
	c := client(t, st, "dave")
	s, err := c.Dial(ctx, &warren.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := st.Registry.Lookup(ctx, devstack.DevIssuer, "dave")
	if err != nil || first.Epoch != 1 {
		t.Fatalf("first = %+v, %v", first, err)
	}
	pid, _ := strconv.Atoi(first.Alloc)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The open channel learns its sandbox is gone.
	var sawErr error
	for _, err := range s.Events() {
		if err != nil {
			sawErr = err
			break
		}
	}
	if !warren.IsCode(sawErr, warren.CodeUnavailable) {
		t.Fatalf("open session after kill: %v, want unavailable", sawErr)
	}
	// Reconnect at once: whether or not the exit was noticed yet, the edge ends on a fresh runner.
	s2, err := c.Dial(ctx, &warren.SessionOptions{})
	if err != nil {
		t.Fatalf("reconnect: %v", err)
	}
	defer s2.Close()
	second, err := st.Registry.Lookup(ctx, devstack.DevIssuer, "dave")
	if err != nil || second.Epoch != 2 || second.Alloc == first.Alloc {
		t.Fatalf("after kill = %+v, %v; want epoch 2 in a new process", second, err)
	}
	if res, err := c.Sandbox().Exec(ctx, wire.ExecRequest{Command: "true"}); err != nil || res.ExitCode != 0 {
		t.Fatalf("exec on the new runner: %+v %v", res, err)
	}
}

func TestAgentChannel(t *testing.T) {
	st := startStack(t)
	ctx := ctxT(t)
	c := client(t, st, "erin")
	s, err := c.Dial(ctx, &warren.SessionOptions{Model: "claude-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.ID() == "" || s.Region() != "local" || s.Model() != "claude-test" {
		t.Fatalf("ready: id %q region %q model %q", s.ID(), s.Region(), s.Model())
	}
	if _, err := s.Ping(ctx); err != nil {
		t.Fatalf("ping: %v", err)
	}
	if err := s.Send(ctx, "hello"); err != nil {
		t.Fatal(err)
	}
	var lastSeq int64
	for ev, err := range s.Events() {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Seq <= lastSeq {
			t.Fatalf("seq %d after %d", ev.Seq, lastSeq)
		}
		lastSeq = ev.Seq
		if e := ev.Err(); e != nil {
			if e.Code != wire.Unavailable {
				t.Fatalf("error event %+v, want unavailable (no agent yet)", e)
			}
			break
		}
	}

	// Malformed input ends the channel with invalid_argument (4400) and nothing else is affected.
	conn, _, err := websocket.Dial(ctx, "ws://"+st.Addr()+"/ws?token="+mint(t, st, "erin"), nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.Write(ctx, websocket.MessageText, []byte(`{"type":"init"}`))
	_ = conn.Write(ctx, websocket.MessageText, []byte(`{"type":"bogus"}`))
	for {
		if _, _, err = conn.Read(ctx); err != nil {
			break
		}
	}
	if got := websocket.CloseStatus(err); got != 4400 {
		t.Fatalf("close status = %d (%v), want 4400", got, err)
	}
	if _, err := s.Ping(ctx); err != nil {
		t.Fatalf("the first session was affected: %v", err)
	}
}

func TestAuthAndAdmissionErrors(t *testing.T) {
	st := startStack(t)
	ctx := ctxT(t)
	status := func(tok string) (int, wire.Code) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, st.URL()+"/v1/sandbox/files/list?path=.", nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, wire.ReadHTTPError(resp.StatusCode, b).Code
	}
	other := token.Claims{Issuer: "nobody", Subject: "x", ExpiresAt: time.Now().Add(time.Hour)}
	otherTok, _ := token.Mint(st.DevKey, other)
	for name, tok := range map[string]string{
		"no token":       "",
		"garbage":        "not.a.jwt",
		"expired":        mint(t, st, "frank", func(c *token.Claims) { c.ExpiresAt = time.Now().Add(-time.Hour) }),
		"unknown issuer": otherTok,
	} {
		if code, wc := status(tok); code != 401 || wc != wire.Unauthenticated {
			t.Errorf("%s: %d %s, want 401 unauthenticated", name, code, wc)
		}
	}
	// A WebSocket with a bad token is closed with 4401.
	_, err := warren.Dial(ctx, st.URL(), "not.a.jwt", nil)
	if !warren.IsCode(err, warren.CodeUnauthenticated) {
		t.Fatalf("ws bad token: %v", err)
	}

	// A spent budget is refused before any sandbox starts.
	budget := func(c *token.Claims) {
		c.HasBudget = true
		c.Budget = token.Budget{AIMicros: 1000, ComputeSeconds: 60, Window: "lifetime"}
	}
	acct := billing.Account{Issuer: devstack.DevIssuer, User: "gina", Window: billing.Lifetime}
	if err := st.Ledger.Record(ctx, billing.UsageEvent{Key: "test/1", Account: acct, Kind: billing.KindAI, AIMicros: 1000}); err != nil {
		t.Fatal(err)
	}
	if code, wc := status(mint(t, st, "gina", budget)); code != 402 || wc != wire.BudgetExceeded {
		t.Fatalf("spent budget: %d %s, want 402 budget_exceeded", code, wc)
	}
	_, err = client(t, st, "gina", budget).Dial(ctx, nil)
	var we *warren.Error
	if !errors.As(err, &we) || we.Code != warren.CodeBudgetExceeded {
		t.Fatalf("ws spent budget: %v", err)
	}
	// The refusal says which budget, used of its limit, and that a lifetime budget does not reset, in
	// words and in details, on the channel as over REST.
	if !strings.Contains(we.Message, "the AI budget of this user is spent: $0.001000 of $0.001000 used (a lifetime budget") ||
		fmt.Sprint(we.Details["budgets"]) != "[ai]" || we.Details["ai_limit_microdollars"] != float64(1000) || we.Details["window"] != "lifetime" {
		t.Fatalf("ws spent budget: %q %v", we.Message, we.Details)
	}
	if _, err := client(t, st, "gina", budget).Sandbox().Exec(ctx, wire.ExecRequest{Command: "true"}); !errors.As(err, &we) ||
		!strings.Contains(we.Message, "the AI budget of this user is spent") || we.Details["ai_used_microdollars"] != float64(1000) {
		t.Fatalf("rest spent budget: %v", err)
	}
	// A malformed request is refused as malformed, not as over budget, and starts nothing.
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, st.URL()+"/v1/sandbox/exec", strings.NewReader(`{"command": 5}`))
	req.Header.Set("Authorization", "Bearer "+mint(t, st, "gina", budget))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if e := wire.ReadHTTPError(resp.StatusCode, b); resp.StatusCode != 400 || e.Code != wire.InvalidArgument || e.Details["field"] != "/command" ||
		strings.Contains(e.Message, "Go struct") {
		t.Fatalf("malformed exec with a spent budget: %d %s, want 400 invalid_argument naming /command", resp.StatusCode, b)
	}
	// A day's budget says when it resets: the next window's start from the token's anchor.
	anchor := time.Now().UTC().Add(-30 * time.Hour).Truncate(time.Second)
	daily := func(c *token.Claims) {
		c.HasBudget = true
		c.Budget = token.Budget{AIMicros: 1000, ComputeSeconds: 60, Window: "day", WindowStart: anchor}
	}
	start := billing.CurrentWindowStart(billing.Day, anchor, time.Now())
	dayAcct := billing.Account{Issuer: devstack.DevIssuer, User: "gina", Window: billing.Day, WindowStart: start}
	if err := st.Ledger.Record(ctx, billing.UsageEvent{Key: "test/2", Account: dayAcct, Kind: billing.KindAI, AIMicros: 1500}); err != nil {
		t.Fatal(err)
	}
	_, err = client(t, st, "gina", daily).Sandbox().Exec(ctx, wire.ExecRequest{Command: "true"})
	resets := start.Add(24 * time.Hour).Format(time.RFC3339)
	if !errors.As(err, &we) || !strings.Contains(we.Message, "the AI budget of this day is spent: $0.001500 of $0.001000 used") ||
		!strings.Contains(we.Message, "resets at "+resets) || we.Details["resets_at"] != resets || we.Details["window"] != "day" {
		t.Fatalf("day budget spent: %v %v, want it to reset at %s", err, we.Details, resets)
	}
	if _, err := st.Registry.Lookup(ctx, devstack.DevIssuer, "gina"); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("a sandbox started for a user without budget: %v", err)
	}
}

func TestComputeSecondsAreMetered(t *testing.T) {
	st := startStack(t)
	ctx := ctxT(t)
	budget := func(c *token.Claims) {
		c.HasBudget = true
		c.Budget = token.Budget{AIMicros: 1000, ComputeSeconds: 3600, Window: "lifetime"}
	}
	sb := client(t, st, "hank", budget).Sandbox()
	if _, err := sb.Exec(ctx, wire.ExecRequest{Command: "sleep 1.2"}); err != nil {
		t.Fatal(err)
	}
	acct := billing.Account{Issuer: devstack.DevIssuer, User: "hank", Window: billing.Lifetime}
	deadline := time.Now().Add(20 * time.Second)
	for {
		u, err := st.Ledger.Usage(ctx, acct)
		if err != nil {
			t.Fatal(err)
		}
		if u.ComputeSeconds >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no compute seconds recorded: %+v", u)
		}
		time.Sleep(50 * time.Millisecond) // polling the ledger, not waiting for a guess
	}
}

// runnerProcesses counts live `warren runner` processes of a user by their command line.
func runnerProcesses(t *testing.T, user string) int {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) > 1 && args[0] == binary && args[1] == "runner" && slicesContainsPair(args, "-user", user) {
			n++
		}
	}
	return n
}

func slicesContainsPair(args []string, k, v string) bool {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == k && args[i+1] == v {
			return true
		}
	}
	return false
}

// Regression: the edge must proxy full duplex. The runner answers a streamed exec with headers before the
// edge has finished forwarding the request body; a half-duplex HTTP/1 handler then had its request body
// closed under the transport, which dropped the runner connection mid-stream (about 1 in 4 calls).
func TestStreamedExecRepeatedly(t *testing.T) {
	st := startStack(t)
	ctx := ctxT(t)
	sb := client(t, st, "ivan").Sandbox()
	for i := range 20 {
		if _, err := sb.Exec(ctx, wire.ExecRequest{Command: "echo hi > f"}); err != nil {
			t.Fatalf("round %d: exec = %v", i, err)
		}
		if _, err := sb.ReadFile(ctx, "f"); err != nil {
			t.Fatalf("round %d: read = %v", i, err)
		}
		var exit *wire.ExecResult
		for ev, err := range sb.ExecStream(ctx, wire.ExecRequest{Command: "echo x; sleep 0.05; exit 2"}) {
			if err != nil {
				t.Fatalf("round %d: %v", i, err)
			}
			if ev.Kind == warren.ExecExit {
				exit = ev.Result
			}
		}
		if exit == nil || exit.ExitCode != 2 {
			t.Fatalf("round %d: exit %+v", i, exit)
		}
	}
}

// A sandbox that spends its window's compute budget is stopped, and the next admission is refused.
func TestComputeBudgetStopsTheSandbox(t *testing.T) {
	st := startStack(t)
	ctx := ctxT(t)
	tight := func(c *token.Claims) {
		c.HasBudget = true
		c.Budget = token.Budget{AIMicros: 1000, ComputeSeconds: 1, Window: "lifetime"}
	}
	sb := client(t, st, "olga", tight).Sandbox()
	res, err := sb.Exec(ctx, wire.ExecRequest{Command: "sleep 20", TimeoutMs: 30_000})
	if err == nil && !res.TimedOut && res.ExitCode == 0 {
		t.Fatalf("a 20 s command finished on a 1 s compute budget: %+v", res)
	}
	waitFor(t, 20*time.Second, "the sandbox to stop", func() bool {
		_, err := st.Registry.Lookup(ctx, devstack.DevIssuer, "olga")
		return errors.Is(err, registry.ErrNotFound)
	})
	_, err = sb.Exec(ctx, wire.ExecRequest{Command: "true"})
	var we *warren.Error
	if !errors.As(err, &we) || we.Code != warren.CodeBudgetExceeded || !strings.Contains(we.Message, "the compute budget of this user is spent") ||
		fmt.Sprint(we.Details["budgets"]) != "[compute]" || we.Details["compute_limit_seconds"] != float64(1) {
		t.Fatalf("after the compute budget: %v %v, want budget_exceeded naming the compute budget", err, we.Details)
	}
}

// A quota caps a token's budget at admission: a user whose quota allows nothing is refused even with a
// token that carries no budget (and a user without a quota is not affected).
func TestQuotaCapsTheToken(t *testing.T) {
	st := startStack(t)
	ctx := ctxT(t)
	qs := st.Ledger.(billing.Quotas)
	if _, err := qs.PutQuota(ctx, billing.QuotaKey{Issuer: devstack.DevIssuer, User: "paul"},
		billing.Quota{AIMicros: 0, ComputeSeconds: 0, Window: billing.Lifetime, MaxConcurrentSessions: 2}, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := client(t, st, "paul").Sandbox().Exec(ctx, wire.ExecRequest{Command: "true"}); !warren.IsCode(err, warren.CodeBudgetExceeded) {
		t.Fatalf("user with a zero quota: %v, want budget_exceeded", err)
	}
	if _, err := client(t, st, "rita").Sandbox().Exec(ctx, wire.ExecRequest{Command: "true"}); err != nil {
		t.Fatalf("user without a quota: %v", err)
	}
}

// max_concurrent_sessions from the quota holds through a lease per agent connection, released on close;
// connects beyond the per-minute rate are refused with rate_limited.
func TestSessionCapAndConnectRate(t *testing.T) {
	st, err := devstack.Start(context.Background(), devstack.Config{
		DataDir: t.TempDir(), Listen: "127.0.0.1:0", Binary: binary,
		Rates: edge.Rates{ConnectsPerUser: 5, ConnectsPerIssuer: -1, PromptsPerUser: -1, PromptsPerIssuer: -1},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := ctxT(t)
	qs := st.Ledger.(billing.Quotas)
	if _, err := qs.PutQuota(ctx, billing.QuotaKey{Issuer: devstack.DevIssuer, User: "uma"},
		billing.Quota{AIMicros: -1, ComputeSeconds: -1, Window: billing.Lifetime, MaxConcurrentSessions: 1}, 0); err != nil {
		t.Fatal(err)
	}
	c := client(t, st, "uma")
	s1, err := c.Dial(ctx, nil) // connect 1
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Dial(ctx, nil); !warren.IsCode(err, warren.CodeConcurrencyLimit) { // connect 2
		t.Fatalf("second concurrent session: %v, want concurrency_limit", err)
	}
	_ = s1.Close()
	waitFor(t, 10*time.Second, "the lease to be released", func() bool { // connects 3..5 at most
		s, err := c.Dial(ctx, nil)
		if err == nil {
			_ = s.Close()
		}
		return err == nil
	})
	var last error
	for range 6 {
		s, err := c.Dial(ctx, nil)
		if err == nil {
			_ = s.Close()
		}
		if last = err; warren.IsCode(err, warren.CodeRateLimited) {
			break
		}
	}
	if !warren.IsCode(last, warren.CodeRateLimited) {
		t.Fatalf("connects beyond 5/min: %v, want rate_limited", last)
	}
}

// The issuer's default quota, written through the billing API, caps the sessions of all the issuer's users
// together (max_issuer_sessions, held by the session leases) and sets each user's connect rate in place of
// the edge's default (connects_per_minute; the stack runs with edge.DefaultRates, 120 a minute).
func TestIssuerSessionCapAndQuotaConnectRate(t *testing.T) {
	st := startStack(t)
	ctx := ctxT(t)
	putQuota(t, st, "/v1/quotas/"+devstack.DevIssuer, `{"ai_microdollars":-1,"compute_seconds":-1,"window":"lifetime",
		"max_concurrent_sessions":-1,"max_issuer_sessions":2,"connects_per_minute":2,"revision":0}`)

	vera := client(t, st, "vera")
	s1, err := vera.Dial(ctx, nil) // vera's connect 1
	if err != nil {
		t.Fatal(err)
	}
	s2, err := vera.Dial(ctx, nil) // connect 2: the issuer is at its cap
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	_, err = client(t, st, "walt").Dial(ctx, nil)
	var we *warren.Error
	if !warren.IsCode(err, warren.CodeConcurrencyLimit) || !errors.As(err, &we) || we.Details["max_issuer_sessions"] != float64(2) {
		t.Fatalf("another user of the issuer at its cap: %v (details %v), want concurrency_limit with max_issuer_sessions 2", err, we)
	}
	if _, err := vera.Dial(ctx, nil); !warren.IsCode(err, warren.CodeRateLimited) { // connect 3
		t.Fatalf("vera's third connect within a minute: %v, want rate_limited", err)
	}

	// Once one of vera's sessions ends, its lease is released and another user gets in.
	_ = s1.Close()
	leases := st.Ledger.(*billingsqlite.Ledger).Sessions()
	waitFor(t, 10*time.Second, "vera's closed session to release its lease", func() bool {
		_, issuerLive, err := leases.Count(ctx, devstack.DevIssuer, "vera")
		return err == nil && issuerLive == 1
	})
	s3, err := client(t, st, "walt").Dial(ctx, nil) // walt's connect 2 of 2
	if err != nil {
		t.Fatalf("walt after vera's session ended: %v", err)
	}
	_ = s3.Close()
}

// A user's quota sets its prompt rate in place of the edge's default (prompts_per_minute): the prompt over
// the rate is refused at the edge with rate_limited and a retry hint, and the channel stays open.
func TestQuotaPromptRate(t *testing.T) {
	st := startStack(t)
	ctx := ctxT(t)
	qs := st.Ledger.(billing.Quotas)
	if _, err := qs.PutQuota(ctx, billing.QuotaKey{Issuer: devstack.DevIssuer, User: "yara"},
		billing.Quota{AIMicros: -1, ComputeSeconds: -1, Window: billing.Lifetime, MaxConcurrentSessions: -1, PromptsPerMinute: 1}, 0); err != nil {
		t.Fatal(err)
	}
	s, err := client(t, st, "yara").Dial(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// This stack runs no agent: the first prompt reaches the runner, which answers unavailable.
	if err := promptOutcome(ctx, s, "one"); warren.IsCode(err, warren.CodeRateLimited) {
		t.Fatalf("first prompt: %v, want it to reach the runner", err)
	}
	err = promptOutcome(ctx, s, "two")
	var we *warren.Error
	if !warren.IsCode(err, warren.CodeRateLimited) || !errors.As(err, &we) {
		t.Fatalf("second prompt within a minute: %v, want rate_limited", err)
	}
	if _, err := s.Ping(ctx); err != nil {
		t.Fatalf("the channel closed after a refused prompt: %v", err)
	}
}

// The issuer's default quota sets the prompt rate of all its users together (issuer_prompts_per_minute):
// once one user has taken it, another user's prompt is refused at the edge with rate_limited, and that
// user's channel stays open.
func TestQuotaIssuerPromptRate(t *testing.T) {
	st := startStack(t)
	ctx := ctxT(t)
	qs := st.Ledger.(billing.Quotas)
	if _, err := qs.PutQuota(ctx, billing.QuotaKey{Issuer: devstack.DevIssuer},
		billing.Quota{AIMicros: -1, ComputeSeconds: -1, Window: billing.Lifetime, MaxConcurrentSessions: -1, IssuerPromptsPerMinute: 1}, 0); err != nil {
		t.Fatal(err)
	}
	ivo, err := client(t, st, "ivo").Dial(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ivo.Close()
	ina, err := client(t, st, "ina").Dial(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ina.Close()
	// This stack runs no agent: the first prompt reaches the runner, which answers unavailable.
	if err := promptOutcome(ctx, ivo, "one"); warren.IsCode(err, warren.CodeRateLimited) {
		t.Fatalf("ivo's first prompt: %v, want it to reach the runner", err)
	}
	err = promptOutcome(ctx, ina, "two")
	var we *warren.Error
	if !warren.IsCode(err, warren.CodeRateLimited) || !errors.As(err, &we) {
		t.Fatalf("ina's first prompt after the issuer's one a minute: %v, want rate_limited", err)
	}
	if _, err := ina.Ping(ctx); err != nil {
		t.Fatalf("the channel closed after a refused prompt: %v", err)
	}
}

// promptOutcome sends prompt and returns the error it ends with: nil for a result, the stream's error or
// an error event's.
func promptOutcome(ctx context.Context, s *warren.Session, prompt string) error {
	for ev, err := range s.Prompt(ctx, prompt) {
		if err != nil {
			return err
		}
		if e := ev.Err(); e != nil {
			return e
		}
		if _, ok := ev.Result(); ok {
			return nil
		}
	}
	return nil
}
