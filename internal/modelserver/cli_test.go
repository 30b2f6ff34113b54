package modelserver_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/modelserver"
	"github.com/warren-mesh/warren/internal/testenv"
)

// cliTimeout bounds one CLI run; a plain turn takes well under a second.
const cliTimeout = 30 * time.Second

// startServer starts a model server on a free port for one test.
func startServer(t testing.TB, opts modelserver.Options) *modelserver.Server {
	t.Helper()
	s := modelserver.New(opts)
	if _, err := s.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return s
}

// cliEnv is the environment the CLI runs with: a private HOME and config dir, the server as the API, no
// background traffic. Extra entries ("K=V") come last and win.
func cliEnv(t testing.TB, url, scenario string, extra ...string) []string {
	t.Helper()
	home := t.TempDir()
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + home,
		"CLAUDE_CONFIG_DIR=" + filepath.Join(home, ".claude"),
		"ANTHROPIC_BASE_URL=" + url,
		"ANTHROPIC_API_KEY=test-key",
		"ANTHROPIC_CUSTOM_HEADERS=" + modelserver.HeaderScenario + ": " + scenario,
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"DISABLE_TELEMETRY=1",
		"DISABLE_AUTOUPDATER=1",
		"IS_SANDBOX=1", // lets --permission-mode bypassPermissions run as root
	}
	return append(env, extra...)
}

var cliArgs = []string{"--output-format", "stream-json", "--verbose", "--model", "claude-sonnet-4-5", "--permission-mode", "bypassPermissions"}

// cliResult is one finished CLI run.
type cliResult struct {
	dir      string           // the working directory
	lines    []map[string]any // stdout's stream-json lines
	stderr   string
	exitCode int
	elapsed  time.Duration
}

// result is the last "result" line; it fails the test when there is none.
func (r cliResult) result(t testing.TB) map[string]any {
	t.Helper()
	for i := len(r.lines) - 1; i >= 0; i-- {
		if r.lines[i]["type"] == "result" {
			return r.lines[i]
		}
	}
	t.Fatalf("no result line; exit %d, stderr:\n%s\nstdout lines: %v", r.exitCode, r.stderr, r.lines)
	return nil
}

func (r cliResult) file(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(r.dir, name))
	if err != nil {
		t.Fatalf("%v (stdout lines: %v)", err, r.lines)
	}
	return string(b)
}

// runPrompt runs `claude -p prompt` in a fresh working directory against url and waits for it.
func runPrompt(t testing.TB, url, scenario, prompt string, extraEnv ...string) cliResult {
	t.Helper()
	cli := testenv.ClaudeCLI(t)
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	dir := t.TempDir()
	cmd := exec.CommandContext(ctx, cli, append([]string{"-p", prompt}, cliArgs...)...)
	cmd.Dir = dir
	cmd.Env = cliEnv(t, url, scenario, extraEnv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	res := cliResult{dir: dir, stderr: stderr.String(), elapsed: time.Since(start)}
	if ctx.Err() != nil {
		t.Fatalf("the CLI did not finish within %v; stderr:\n%s\nstdout:\n%s", cliTimeout, stderr.String(), stdout.String())
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		res.exitCode = ee.ExitCode()
	default:
		t.Fatalf("run the CLI: %v", err)
	}
	res.lines = parseLines(t, stdout.Bytes())
	return res
}

func parseLines(t testing.TB, out []byte) []map[string]any {
	t.Helper()
	var lines []map[string]any
	for line := range bytes.Lines(out) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("stdout line is not JSON: %v: %s", err, line)
		}
		lines = append(lines, m)
	}
	return lines
}

// session is a CLI running with --input-format stream-json: prompts go in on stdin one line each, and
// each turn ends with a result line on stdout.
type session struct {
	t      testing.TB
	dir    string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan map[string]any
	stderr *lockedBuffer
	done   chan struct{}
}

func startSession(t testing.TB, url, scenario string) *session {
	t.Helper()
	cli := testenv.ClaudeCLI(t)
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	dir := t.TempDir()
	cmd := exec.CommandContext(ctx, cli, append([]string{"-p", "--input-format", "stream-json"}, cliArgs...)...)
	cmd.Dir = dir
	cmd.Env = cliEnv(t, url, scenario)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	s := &session{t: t, dir: dir, cmd: cmd, stdin: stdin, lines: make(chan map[string]any, 64), stderr: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stderr = s.stderr
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	go func() {
		defer close(s.lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				s.lines <- m
			}
		}
	}()
	go func() {
		defer close(s.done)
		_ = cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = stdin.Close()
		select {
		case <-s.done:
		case <-time.After(5 * time.Second):
			cancel()
			<-s.done
		}
		cancel()
	})
	return s
}

// send writes one user message line.
func (s *session) send(text string) {
	s.t.Helper()
	line, err := json.Marshal(map[string]any{
		"type":               "user",
		"message":            map[string]any{"role": "user", "content": text},
		"session_id":         "",
		"parent_tool_use_id": nil,
	})
	if err != nil {
		s.t.Fatal(err)
	}
	if _, err := s.stdin.Write(append(line, '\n')); err != nil {
		s.t.Fatalf("write prompt: %v", err)
	}
}

// result waits for the next result line.
func (s *session) result() map[string]any {
	s.t.Helper()
	timeout := time.NewTimer(cliTimeout)
	defer timeout.Stop()
	for {
		select {
		case m, ok := <-s.lines:
			if !ok {
				s.t.Fatalf("the CLI exited before a result; stderr:\n%s", s.stderr.String())
			}
			if m["type"] == "result" {
				return m
			}
		case <-timeout.C:
			s.t.Fatalf("no result within %v; stderr:\n%s", cliTimeout, s.stderr.String())
		}
	}
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func mainRequests(s *modelserver.Server) []modelserver.Request {
	var out []modelserver.Request
	for _, r := range s.Requests() {
		if r.Main {
			out = append(out, r)
		}
	}
	return out
}

func resultText(t testing.TB, res map[string]any) string {
	t.Helper()
	s, _ := res["result"].(string)
	return strings.TrimSpace(s)
}

// The tests below run the real Claude Code CLI against the server: they are how this package knows its
// scripts work with the client that matters. README.md records what they taught.

func TestCLIScenarios(t *testing.T) {
	s := startServer(t, modelserver.Options{Delay: time.Millisecond})
	tests := []struct {
		scenario, prompt string
		result           string            // the result line's text
		files            map[string]string // files the turn leaves in the working directory
		mainRequests     int
	}{
		{"plain", "hello", "Hello from the Warren model server. This answer is scripted and arrives in several deltas.", nil, 1},
		{"write", "x", "Done.", map[string]string{"hello.txt": "hi"}, 2},
		{"bash", "x", "Done.", map[string]string{"bash.txt": "from-bash\n"}, 2},
		{"write_bash", "x", "Done.", map[string]string{"hello.txt": "hi"}, 3},
		{"two_tools", "x", "Done.", map[string]string{"a.txt": "a", "b.txt": "b"}, 2},
		{"auto", "create notes/todo.txt containing buy milk", "Done.", map[string]string{"notes/todo.txt": "buy milk"}, 2},
		{"auto", "run echo ran > ran.txt", "Done.", map[string]string{"ran.txt": "ran\n"}, 2},
		{"auto", "what is 2+2?", "You said: what is 2+2?", nil, 1},
		{"long", "x", "", nil, 1},
		{"huge_usage", "x", "This short answer reports an enormous usage.", nil, 1},
	}
	for _, tt := range tests {
		t.Run(tt.scenario+"/"+tt.prompt, func(t *testing.T) {
			t.Parallel()
			res := runPrompt(t, s.URL(), tt.scenario, tt.prompt)
			r := res.result(t)
			if r["subtype"] != "success" || r["is_error"] != false || res.exitCode != 0 {
				t.Fatalf("result %v, exit %d; stderr:\n%s", r, res.exitCode, res.stderr)
			}
			got := resultText(t, r)
			switch {
			case tt.scenario == "long":
				if n := len(strings.Fields(got)); n != 200 {
					t.Errorf("long answer has %d words: %q", n, got)
				}
			case got != tt.result:
				t.Errorf("result %q, want %q", got, tt.result)
			}
			for name, want := range tt.files {
				if got := res.file(t, name); got != want {
					t.Errorf("%s = %q, want %q", name, got, want)
				}
			}
			if tt.scenario == "huge_usage" {
				u, _ := r["usage"].(map[string]any)
				if u["output_tokens"] != float64(modelserver.HugeOutputTokens) {
					t.Errorf("result usage %v, want output_tokens %d", u, modelserver.HugeOutputTokens)
				}
			}
			// The CLI's session id header tells this run's requests from the parallel ones.
			sid, _ := r["session_id"].(string)
			var mine []modelserver.Request
			for _, q := range mainRequests(s) {
				if q.Header.Get("X-Claude-Code-Session-Id") == sid {
					mine = append(mine, q)
				}
			}
			if len(mine) != tt.mainRequests {
				t.Errorf("%d main requests, want %d", len(mine), tt.mainRequests)
			}
			for _, q := range mine {
				if q.Scenario != tt.scenario || q.Header.Get("X-Api-Key") != "test-key" || !q.Stream || len(q.Tools) == 0 {
					t.Errorf("request %s stream=%v tools=%v key=%q", q.Scenario, q.Stream, q.Tools, q.Header.Get("X-Api-Key"))
				}
			}
			t.Logf("%s: %v", tt.scenario, res.elapsed)
		})
	}
}

// TestCLIMultiTurn feeds two prompts through --input-format stream-json: the second request must carry the
// first turn in its history.
func TestCLIMultiTurn(t *testing.T) {
	t.Parallel()
	s := startServer(t, modelserver.Options{})
	sess := startSession(t, s.URL(), "auto")
	sess.send("create first.txt containing one")
	if r := sess.result(); r["subtype"] != "success" || resultText(t, r) != "Done." {
		t.Fatalf("first turn: %v", r)
	}
	sess.send("second question")
	if r := sess.result(); r["subtype"] != "success" || resultText(t, r) != "You said: second question" {
		t.Fatalf("second turn: %v", r)
	}
	if b, err := os.ReadFile(filepath.Join(sess.dir, "first.txt")); err != nil || string(b) != "one" {
		t.Errorf("first.txt = %q, %v", b, err)
	}
	reqs := mainRequests(s)
	if len(reqs) != 3 {
		t.Fatalf("%d main requests, want 3 (write, done, second answer)", len(reqs))
	}
	history := string(joinRaw(reqs[2].Messages))
	for _, want := range []string{"create first.txt containing one", "toolu_warren_s0_b0_", "Done.", "second question"} {
		if !strings.Contains(history, want) {
			t.Errorf("the second turn's history lacks %q", want)
		}
	}
}

func joinRaw(msgs []json.RawMessage) []byte {
	var b []byte
	for _, m := range msgs {
		b = append(b, m...)
	}
	return b
}

// TestCLIErrors pins down how the CLI reacts to error answers; README.md explains the numbers.
func TestCLIErrors(t *testing.T) {
	tests := []struct {
		name  string
		fault modelserver.Fault
		env   []string
		// ok is whether the turn succeeds in the end; requests how many main requests the CLI makes.
		ok       bool
		requests int
		status   float64
	}{
		// Retryable answers are retried after about 0.5 s, then 1 s, 2 s ...
		{"429 once is retried", modelserver.Fault{Status: 429}, nil, true, 2, 0},
		{"529 once is retried", modelserver.Fault{Status: 529}, nil, true, 2, 0},
		{"a cut stream is retried", modelserver.Fault{Drop: true}, nil, true, 2, 0},
		// CLAUDE_CODE_MAX_RETRIES bounds the retries.
		{"500 with CLAUDE_CODE_MAX_RETRIES=1", modelserver.Fault{Status: 500, Count: 100}, []string{"CLAUDE_CODE_MAX_RETRIES=1"}, false, 2, 500},
		// x-should-retry: false stops retries at once, whatever the status.
		{"429 with x-should-retry false", modelserver.Fault{Status: 429, Count: 100, Header: http.Header{"X-Should-Retry": {"false"}}}, nil, false, 1, 429},
		{"402 billing_error", modelserver.Fault{Status: 402, Count: 100}, nil, false, 1, 402},
		// A 400 is not retried, but the CLI first resends the request with optional betas stripped.
		{"400 invalid_request_error", modelserver.Fault{Status: 400, Count: 100}, nil, false, 6, 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := startServer(t, modelserver.Options{})
			s.Inject(tt.fault)
			res := runPrompt(t, s.URL(), "plain", "hello", tt.env...)
			r := res.result(t)
			n := len(mainRequests(s))
			t.Logf("%s: %d requests in %v; result %q", tt.name, n, res.elapsed, r["result"])
			if n != tt.requests {
				t.Errorf("%d main requests, want %d", n, tt.requests)
			}
			if tt.ok {
				if r["is_error"] != false || res.exitCode != 0 || !strings.HasPrefix(resultText(t, r), "Hello from") {
					t.Errorf("result %v, exit %d", r, res.exitCode)
				}
				return
			}
			if r["is_error"] != true || res.exitCode != 1 || r["api_error_status"] != tt.status || r["terminal_reason"] != "api_error" {
				t.Errorf("result is_error=%v api_error_status=%v terminal_reason=%v exit=%d, want an API error %v",
					r["is_error"], r["api_error_status"], r["terminal_reason"], res.exitCode, tt.status)
			}
		})
	}
}

// TestCLIBudget checks that huge_usage exhausts a --max-budget-usd at once.
func TestCLIBudget(t *testing.T) {
	t.Parallel()
	s := startServer(t, modelserver.Options{})
	cli := testenv.ClaudeCLI(t)
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, cli, append([]string{"-p", "x", "--max-budget-usd", "1"}, cliArgs...)...)
	cmd.Dir = t.TempDir()
	cmd.Env = cliEnv(t, s.URL(), "huge_usage")
	out, _ := cmd.Output()
	lines := parseLines(t, out)
	r := cliResult{lines: lines}.result(t)
	if r["subtype"] != "error_max_budget_usd" || r["is_error"] != true {
		t.Errorf("result %v", r)
	}
}
