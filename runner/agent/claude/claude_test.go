package claude

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/modelserver"
	"github.com/warren-mesh/warren/internal/testenv"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner/isolate/isolatetest"
	"github.com/warren-mesh/warren/runner/session"
)

// realKey stands for the operator's model API key: it is in the runner's environment (as it could be in
// production) but Endpoint never hands it out, so it must appear nowhere inside the sandbox.
const realKey = "sk-ant-api03-REAL-KEY-MUST-NOT-LEAK"

// rig is one sandbox: a workspace, a home, a model server and the CLI.
type rig struct {
	cli, bwrap, ws, home string
	ms                   *modelserver.Server
	url                  string
	forward              []string // more loopback URLs the sandbox reaches (the model server's always)
}

func TestMain(m *testing.M) {
	// The runner's own environment holds the real key; nothing may inherit it.
	os.Setenv("ANTHROPIC_API_KEY", realKey)
	os.Exit(m.Run())
}

// newRig starts a model server for a test, which runs in parallel with the other CLI tests.
func newRig(t *testing.T) *rig {
	t.Helper()
	cli := testenv.ClaudeCLI(t)
	t.Parallel()
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		t.Fatalf("bubblewrap (bwrap) is required: install it (make tools) or run with -short: %v", err)
	}
	ms := modelserver.New(modelserver.Options{})
	url, err := ms.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ms.Close() })
	return &rig{cli: cli, bwrap: bwrap, ws: t.TempDir(), home: t.TempDir(), ms: ms, url: url}
}

func token(sessionID string) string { return "warren-session-token-" + sessionID }

// driver starts a Driver on the rig; scenario "" lets the server pick (auto).
func (r *rig) driver(t *testing.T, scenario string, mut func(*Config)) *Driver {
	t.Helper()
	cfg := Config{
		CLIPath: r.cli, Workspace: r.ws, Home: r.home, Bwrap: r.bwrap,
		Sandbox:  isolatetest.New(t, r.ws, append([]string{r.url}, r.forward...), r.home),
		Endpoint: func(id string) (string, string, error) { return r.url, token(id), nil },
		Logger:   slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if scenario != "" {
		cfg.Env = map[string]string{"ANTHROPIC_CUSTOM_HEADERS": modelserver.HeaderScenario + ": " + scenario}
	}
	if mut != nil {
		mut(&cfg)
	}
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close(context.Background()) })
	return d
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// turnResult is what one turn emitted.
type turnResult struct {
	events []map[string]any
	raw    [][]byte
	err    error
	took   time.Duration
}

func (tr turnResult) types() []string {
	var out []string
	for _, e := range tr.events {
		s, _ := e["type"].(string)
		if st, ok := e["subtype"].(string); ok {
			s += "/" + st
		}
		out = append(out, s)
	}
	return out
}

// result is the turn's last event, which must be its one result.
func (tr turnResult) result(t *testing.T) map[string]any {
	t.Helper()
	n := 0
	for _, e := range tr.events {
		if e["type"] == "result" {
			n++
		}
	}
	if n != 1 || len(tr.events) == 0 || tr.events[len(tr.events)-1]["type"] != "result" {
		t.Fatalf("turn did not end with exactly one result: %v (err %v)", tr.types(), tr.err)
	}
	return tr.events[len(tr.events)-1]
}

func userMessage(prompt string) wire.ClientMessage {
	msg, _ := json.Marshal(map[string]any{"role": "user", "content": prompt})
	return wire.ClientMessage{Type: wire.TypeUser, Message: msg}
}

// run runs one turn; the turn must end within two minutes (the CLI is slow on a loaded machine).
func run(t *testing.T, ctx context.Context, d *Driver, id string, opts wire.SessionOptions, prompt string) turnResult {
	t.Helper()
	return runWatch(t, ctx, d, id, opts, prompt, nil)
}

// runWatch is run calling watch with each event as it is emitted.
func runWatch(t *testing.T, ctx context.Context, d *Driver, id string, opts wire.SessionOptions, prompt string, watch func(map[string]any)) turnResult {
	t.Helper()
	return runTurn(t, ctx, d, session.Turn{SessionID: id, Options: opts, Message: userMessage(prompt)}, prompt, watch)
}

// runTurn runs turn (whose prompt is prompt) like runWatch.
func runTurn(t *testing.T, ctx context.Context, d *Driver, turn session.Turn, prompt string, watch func(map[string]any)) turnResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var tr turnResult
	start := time.Now()
	tr.err = d.Run(ctx, turn, func(ev []byte) {
		var m map[string]any
		if err := json.Unmarshal(ev, &m); err != nil {
			t.Errorf("emitted a non-JSON event %q", ev)
			return
		}
		tr.events = append(tr.events, m)
		tr.raw = append(tr.raw, ev)
		if watch != nil {
			watch(m)
		}
	})
	tr.took = time.Since(start)
	t.Logf("turn %q: %v in %s (err %v)", prompt, tr.types(), tr.took.Round(time.Millisecond), tr.err)
	return tr
}

func mustSucceed(t *testing.T, tr turnResult) map[string]any {
	t.Helper()
	if tr.err != nil {
		t.Fatalf("turn failed: %v", tr.err)
	}
	res := tr.result(t)
	if res["subtype"] != "success" || res["is_error"] != false {
		t.Fatalf("result %v", res)
	}
	return res
}

// mainRequests are the requests of the agent loop.
func mainRequests(ms *modelserver.Server) []modelserver.Request {
	var out []modelserver.Request
	for _, r := range ms.Requests() {
		if r.Main {
			out = append(out, r)
		}
	}
	return out
}

func messagesText(r modelserver.Request) string {
	var b strings.Builder
	for _, m := range r.Messages {
		b.Write(m)
	}
	return b.String()
}

// TestTurns runs several turns of one session in one process: a Write, a Bash command, and a check of the
// environment inside the sandbox, with the conversation carried from turn to turn.
func TestTurns(t *testing.T) {
	r := newRig(t)
	d := r.driver(t, "", nil)
	id := session.NewID()
	ctx := context.Background()

	tr := run(t, ctx, d, id, wire.SessionOptions{}, "create notes/hello.txt containing hi from the agent")
	mustSucceed(t, tr)
	if tr.events[0]["type"] != "system" || tr.events[0]["subtype"] != "init" || tr.events[0]["session_id"] != id || tr.events[0]["cwd"] != "/workspace" {
		t.Errorf("first event %v, want the system init of session %s in /workspace", tr.events[0], id)
	}
	if b, err := os.ReadFile(filepath.Join(r.ws, "notes", "hello.txt")); err != nil || string(b) != "hi from the agent" {
		t.Fatalf("file written by the agent: %q, %v", b, err)
	}
	pid := d.pid(id)

	tr = run(t, ctx, d, id, wire.SessionOptions{}, "run echo from-bash > bash.txt && id -u >> bash.txt")
	mustSucceed(t, tr)
	if b, err := os.ReadFile(filepath.Join(r.ws, "bash.txt")); err != nil || !strings.HasPrefix(string(b), "from-bash\n") {
		t.Fatalf("bash.txt: %q, %v", b, err)
	}
	if got := d.pid(id); got != pid || pid == 0 {
		t.Errorf("second turn ran in process %d, first in %d: want one process per session", got, pid)
	}
	reqs := mainRequests(r.ms)
	last := reqs[len(reqs)-1]
	if !strings.Contains(messagesText(last), "hi from the agent") || !strings.Contains(messagesText(last), "from-bash") {
		t.Errorf("the second turn's request does not carry the first turn: %s", messagesText(last))
	}

	tr = run(t, ctx, d, id, wire.SessionOptions{}, `run env > env.txt; cat /proc/*/environ > environ.txt; ls /home/sandbox/.claude > home.txt; ls / > root.txt`)
	mustSucceed(t, tr)
	env, _ := os.ReadFile(filepath.Join(r.ws, "env.txt"))
	environ, _ := os.ReadFile(filepath.Join(r.ws, "environ.txt"))
	if !bytes.Contains(env, []byte("ANTHROPIC_API_KEY="+token(id))) || !bytes.Contains(env, []byte("HOME=/home/sandbox")) {
		t.Errorf("agent env lacks the session token or HOME:\n%s", env)
	}
	if !bytes.Contains(environ, []byte(token(id))) {
		t.Errorf("/proc/*/environ does not show the CLI's environment (%d bytes)", len(environ))
	}
	for _, r := range mainRequests(r.ms) {
		if k := r.Header.Get("X-Api-Key"); k != token(id) {
			t.Errorf("model request authenticated with %q, want the session token", k)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(r.ws, "home.txt")); !bytes.Contains(b, []byte("projects")) {
		t.Errorf("~/.claude inside the sandbox: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(r.ws, "root.txt")); bytes.Contains(b, []byte("root\n")) || bytes.Contains(b, []byte("srv\n")) {
		t.Errorf("host directories visible in the sandbox: %q", b)
	}
	assertNoSecret(t, r.ws, r.home)
	if p := transcriptPath(r.home, id); p != filepath.Join(r.home, ".claude", "projects", "-workspace", id+".jsonl") {
		t.Errorf("transcript of %s at %q", id, p)
	}
}

// assertNoSecret fails if realKey is in any file under dirs.
func assertNoSecret(t *testing.T, dirs ...string) {
	t.Helper()
	for _, dir := range dirs {
		_ = filepath.WalkDir(dir, func(p string, de os.DirEntry, err error) error {
			if err != nil || !de.Type().IsRegular() {
				return nil
			}
			if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(realKey)) {
				t.Errorf("the real key leaked into %s", p)
			}
			return nil
		})
	}
}

// TestResumeAfterClose: a new driver (another runner process) on the same home resumes the conversation.
func TestResumeAfterClose(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	id := session.NewID()
	d := r.driver(t, "", nil)
	mustSucceed(t, run(t, ctx, d, id, wire.SessionOptions{}, "remember the word pineapple"))
	if err := d.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if tr := run(t, ctx, d, id, wire.SessionOptions{}, "too late"); wire.CodeOf(tr.err) != wire.Unavailable || len(tr.events) != 0 {
		t.Errorf("turn after Close: %v, %v", tr.err, tr.types())
	}

	d2 := r.driver(t, "", nil)
	r.ms.Reset()
	mustSucceed(t, run(t, ctx, d2, id, wire.SessionOptions{SessionID: id}, "what was the word?"))
	reqs := mainRequests(r.ms)
	if len(reqs) == 0 || !strings.Contains(messagesText(reqs[0]), "pineapple") {
		t.Fatalf("resumed request does not carry the earlier turn: %v", reqs)
	}
}

// TestFork: forkSession resumes the source into the hub's new id; the source stays as it was.
func TestFork(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	d := r.driver(t, "", nil)
	src, fork := session.NewID(), session.NewID()
	mustSucceed(t, run(t, ctx, d, src, wire.SessionOptions{}, "remember the word mango"))
	srcTranscript, _ := os.ReadFile(transcriptPath(r.home, src))

	r.ms.Reset()
	tr := run(t, ctx, d, fork, wire.SessionOptions{SessionID: src, ForkSession: true}, "and now?")
	mustSucceed(t, tr)
	if tr.events[0]["session_id"] != fork {
		t.Errorf("fork events carry session %v, want %s", tr.events[0]["session_id"], fork)
	}
	if reqs := mainRequests(r.ms); len(reqs) == 0 || !strings.Contains(messagesText(reqs[0]), "mango") {
		t.Errorf("forked request does not carry the source conversation")
	}
	if transcriptPath(r.home, fork) == "" {
		t.Error("no transcript for the fork")
	}
	if b, _ := os.ReadFile(transcriptPath(r.home, src)); !bytes.Equal(b, srcTranscript) {
		t.Error("forking modified the source transcript")
	}

	// continue: the most recent conversation, copied into the new session's id.
	r.ms.Reset()
	cont := session.NewID()
	tr = run(t, ctx, d, cont, wire.SessionOptions{Continue: true}, "continuing")
	mustSucceed(t, tr)
	if tr.events[0]["session_id"] != cont {
		t.Errorf("continue events carry session %v, want %s", tr.events[0]["session_id"], cont)
	}
	if reqs := mainRequests(r.ms); len(reqs) == 0 || !strings.Contains(messagesText(reqs[0]), "and now?") {
		t.Errorf("continue did not pick up the most recent conversation (the fork)")
	}

	tr = run(t, ctx, d, session.NewID(), wire.SessionOptions{SessionID: session.NewID(), ForkSession: true}, "x")
	if wire.CodeOf(tr.err) != wire.NotFound {
		t.Errorf("fork of an unknown session: %v", tr.err)
	}
	// A runner that kept the source's id for the fork (a fresh driver: no process for it yet).
	tr = run(t, ctx, r.driver(t, "", nil), src, wire.SessionOptions{SessionID: src, ForkSession: true}, "x")
	if wire.CodeOf(tr.err) != wire.Unavailable {
		t.Errorf("fork into the source's own id: %v", tr.err)
	}
}

// TestProcessKilled: a CLI that dies mid-turn (here while a tool runs) ends the turn with a synthesized
// error result and unavailable, taking its whole tree with it; the next turn resumes in a new process.
func TestProcessKilled(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	d := r.driver(t, "", nil)
	id := session.NewID()
	mustSucceed(t, run(t, ctx, d, id, wire.SessionOptions{}, "remember the word kiwi"))

	// The CLI refuses a standalone sleep; a blocking tail is fine. The marker names the tool's processes.
	marker := fmt.Sprintf("warren-marker-%d", time.Now().UnixNano())
	var once sync.Once
	tr := runWatch(t, ctx, d, id, wire.SessionOptions{}, "run tail -f /dev/null # "+marker, func(ev map[string]any) {
		if ev["type"] == "assistant" {
			once.Do(func() {
				go func() {
					waitFor(t, "the tool's process", func() bool { return len(findProcesses(marker)) > 0 })
					if err := d.killForTest(id); err != nil {
						t.Error(err)
					}
				}()
			})
		}
	})
	res := tr.result(t)
	if res["subtype"] != "error_during_execution" || res["is_error"] != true || res["session_id"] != id ||
		!strings.HasPrefix(res["result"].(string), "agent process exited: ") {
		t.Errorf("synthesized result %v", res)
	}
	if wire.CodeOf(tr.err) != wire.Unavailable || !errors.Is(tr.err, ErrExited) {
		t.Errorf("turn error %v, want unavailable wrapping ErrExited", tr.err)
	}
	waitFor(t, "the tool's process to die with the CLI", func() bool { return len(findProcesses(marker)) == 0 })

	r.ms.Reset()
	mustSucceed(t, run(t, ctx, d, id, wire.SessionOptions{}, "what was the word?"))
	if reqs := mainRequests(r.ms); len(reqs) == 0 || !strings.Contains(messagesText(reqs[0]), "kiwi") {
		t.Errorf("the turn after the crash did not resume the conversation")
	}
}

// findProcesses returns the host pids whose command line contains marker.
func findProcesses(marker string) []string {
	ents, _ := os.ReadDir("/proc")
	var pids []string
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})), marker) {
			pids = append(pids, e.Name())
		}
	}
	return pids
}

// TestInterrupt: cancelling a turn of the slow scenario ends it promptly with the CLI's own result; the
// process survives and takes the next turn.
func TestInterrupt(t *testing.T) {
	r := newRig(t)
	d := r.driver(t, "long", nil)
	id := session.NewID()
	ctx, cancel := context.WithCancel(context.Background())
	cancelled := make(chan time.Time, 1)
	go func() {
		waitFor(t, "the model request", func() bool { return len(mainRequests(r.ms)) > 0 })
		time.Sleep(300 * time.Millisecond) // into the stream, which lasts about 10 s
		cancelled <- time.Now()
		cancel()
	}()
	tr := run(t, ctx, d, id, wire.SessionOptions{}, "tell me a long story")
	ended := time.Now()
	if !errors.Is(tr.err, context.Canceled) {
		t.Fatalf("interrupted turn returned %v", tr.err)
	}
	res := tr.result(t)
	if res["is_error"] != true || res["subtype"] != "error_during_execution" {
		t.Errorf("interrupted result %v", res)
	}
	took := ended.Sub(<-cancelled)
	t.Logf("the turn ended %s after the interrupt", took)
	if took > 3*time.Second {
		t.Errorf("the turn ended %s after the interrupt", took)
	}
	pid := d.pid(id)
	if pid == 0 {
		t.Error("the interrupt killed the process; the CLI should have stopped the turn itself")
	}

	// The next turn works; interrupt it after a moment too, to keep the test short.
	r.ms.Reset()
	ctx2, cancel2 := context.WithCancel(context.Background())
	go func() {
		waitFor(t, "the model request", func() bool { return len(mainRequests(r.ms)) > 0 })
		cancel2()
	}()
	tr = run(t, ctx2, d, id, wire.SessionOptions{}, "another")
	tr.result(t)
	if reqs := mainRequests(r.ms); len(reqs) == 0 || !strings.Contains(messagesText(reqs[0]), "tell me a long story") {
		t.Errorf("the turn after the interrupt lost the conversation")
	}
	if d.pid(id) != pid {
		t.Errorf("a new process after the interrupt")
	}
}

// TestInterruptKill: a CLI that does not end an interrupted turn in time is killed; the next turn resumes.
func TestInterruptKill(t *testing.T) {
	r := newRig(t)
	d := r.driver(t, "long", func(c *Config) { c.InterruptGrace = time.Nanosecond })
	id := session.NewID()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		waitFor(t, "the model request", func() bool { return len(mainRequests(r.ms)) > 0 })
		cancel()
	}()
	tr := run(t, ctx, d, id, wire.SessionOptions{}, "tell me a long story")
	if !errors.Is(tr.err, context.Canceled) {
		t.Fatalf("interrupted turn returned %v", tr.err)
	}
	if res := tr.result(t); res["is_error"] != true {
		t.Errorf("result %v", res)
	}
	if d.pid(id) != 0 {
		t.Error("process still registered after the kill")
	}
}

// TestPermissions: the token's blocked tool reaches the real CLI as disallowed, and its model is forced.
func TestPermissions(t *testing.T) {
	r := newRig(t)
	d := r.driver(t, "", func(c *Config) {
		c.Permissions = Permissions{BlockedTools: []string{"Bash"}, Model: "claude-token-model", MaxTurns: 3}
		c.SDKConfig = json.RawMessage(`{"systemPrompt":{"type":"preset","preset":"claude_code","append":"WARREN-APPEND-MARKER"}}`)
	})
	id := session.NewID()
	tr := run(t, context.Background(), d, id, wire.SessionOptions{Model: "claude-client-model", AllowedTools: []string{"Bash"}}, "run echo should-not-run > blocked.txt")
	tr.result(t)
	if _, err := os.Stat(filepath.Join(r.ws, "blocked.txt")); err == nil {
		t.Error("a blocked tool ran")
	}
	init := tr.events[0]
	if tools, _ := init["tools"].([]any); len(tools) == 0 || containsAny(tools, "Bash") {
		t.Errorf("init tools %v: want a tool list without Bash", init["tools"])
	}
	for _, req := range mainRequests(r.ms) {
		if req.Model != "claude-token-model" {
			t.Errorf("model %q, want the token's", req.Model)
		}
		if !bytes.Contains(req.System, []byte("WARREN-APPEND-MARKER")) {
			t.Errorf("system prompt lacks the sdkConfig append")
		}
	}
}

// TestBadOptions: options the driver refuses fail the turn before any process starts.
func TestBadOptions(t *testing.T) {
	r := newRig(t)
	d := r.driver(t, "", nil)
	tr := run(t, context.Background(), d, session.NewID(), wire.SessionOptions{Env: map[string]string{"ANTHROPIC_API_KEY": "x"}}, "hi")
	if wire.CodeOf(tr.err) != wire.InvalidArgument || len(tr.events) != 0 || d.processCount() != 0 {
		t.Errorf("reserved env: %v %v", tr.err, tr.types())
	}
}

// TestConcurrentSessions: two sessions run at once, each in its own process.
func TestConcurrentSessions(t *testing.T) {
	r := newRig(t)
	d := r.driver(t, "", func(c *Config) {
		c.Decorate = func(id string, ev []byte) []byte {
			return append(ev[:len(ev)-1:len(ev)-1], []byte(fmt.Sprintf(`,"warren_session":%q}`, id))...)
		}
	})
	var wg sync.WaitGroup
	ids := []string{session.NewID(), "client-chosen-id"}
	for i, id := range ids {
		wg.Go(func() {
			tr := run(t, context.Background(), d, id, wire.SessionOptions{}, fmt.Sprintf("create s%d.txt containing %d", i, i))
			if res := mustSucceed(t, tr); res["warren_session"] != id {
				t.Errorf("result not decorated for %s: %v", id, res)
			}
		})
	}
	wg.Wait()
	for i := range ids {
		if b, err := os.ReadFile(filepath.Join(r.ws, fmt.Sprintf("s%d.txt", i))); err != nil || string(b) != fmt.Sprint(i) {
			t.Errorf("s%d.txt: %q %v", i, b, err)
		}
	}
	if n := d.processCount(); n != 2 {
		t.Errorf("%d processes, want 2", n)
	}
}

func containsAny(list []any, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// waitFor polls cond for up to 30 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Errorf("timed out waiting for %s", what)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestOptionsAccepted runs the real CLI with every option the driver maps to a flag.
func TestOptionsAccepted(t *testing.T) {
	r := newRig(t)
	d := r.driver(t, "", func(c *Config) {
		c.Permissions = Permissions{Tools: []string{"Read", "Write", "Bash"}, BlockedTools: []string{"Bash"}, MaxTurns: 5}
	})
	opts := wire.SessionOptions{
		Model: "claude-x", FallbackModel: "claude-y", MaxTurns: 9, MaxThinkingTokens: 2048, MaxBudgetUSD: 5,
		Tools: []string{"Read", "Write", "Bash"}, AllowedTools: []string{"Write"}, DisallowedTools: []string{"WebFetch"},
		PermissionMode: "acceptEdits", IncludePartialMessages: true, Env: map[string]string{"WARREN_CLIENT_VAR": "client-value"},
		SystemPrompt: &wire.SystemPrompt{Text: "You are a scripted test agent."},
		OutputFormat: json.RawMessage(`{"type":"json_schema","schema":{"type":"object","properties":{"ok":{"type":"boolean"}}}}`),
	}
	tr := run(t, context.Background(), d, session.NewID(), opts, "create opts.txt containing ok")
	mustSucceed(t, tr)
	if b, err := os.ReadFile(filepath.Join(r.ws, "opts.txt")); err != nil || string(b) != "ok" {
		t.Errorf("opts.txt: %q %v", b, err)
	}
	init := tr.events[0]
	tools, _ := init["tools"].([]any)
	if !containsAny(tools, "Read") || !containsAny(tools, "Write") || containsAny(tools, "Bash") || containsAny(tools, "WebFetch") {
		t.Errorf("init tools %v", tools)
	}
	if init["permissionMode"] != "acceptEdits" || init["model"] != "claude-x" {
		t.Errorf("init %v %v", init["permissionMode"], init["model"])
	}
	if !slices.Contains(tr.types(), "stream_event") {
		t.Errorf("no stream_event with includePartialMessages: %v", tr.types())
	}
	reqs := mainRequests(r.ms)
	if len(reqs) == 0 || !bytes.Contains(reqs[0].System, []byte("You are a scripted test agent.")) {
		t.Errorf("system prompt not replaced")
	}
}

// TestIdleStop: an idle process is stopped and the next turn resumes in a new one.
func TestIdleStop(t *testing.T) {
	r := newRig(t)
	d := r.driver(t, "", func(c *Config) { c.IdleTimeout = 100 * time.Millisecond })
	id := session.NewID()
	mustSucceed(t, run(t, context.Background(), d, id, wire.SessionOptions{}, "remember the word plum"))
	waitFor(t, "the idle process to stop", func() bool { return d.processCount() == 0 })
	r.ms.Reset()
	mustSucceed(t, run(t, context.Background(), d, id, wire.SessionOptions{}, "and the word?"))
	if reqs := mainRequests(r.ms); len(reqs) == 0 || !strings.Contains(messagesText(reqs[0]), "plum") {
		t.Errorf("no resume after the idle stop")
	}
}

// fakeCLI is a stand-in for the CLI at the process boundary, for output the real one does not produce on
// demand: noise, an oversized line, a control request. It answers one prompt and then exits.
const fakeCLI = `#!/bin/sh
read -r prompt
printf '%s\n' "$prompt" > /workspace/prompt.json
echo 'not json at all'
echo '{"type":"system","subtype":"init","session_id":"fake"}'
head -c 9437184 /dev/zero | tr '\0' 'a'; echo
echo '[1,2,3]'
echo '{"type":"control_request","request_id":"req-1","request":{"subtype":"can_use_tool"}}'
read -r answer
printf '%s\n' "$answer" > /workspace/answer.json
echo '{"type":"control_response","response":{"subtype":"success","request_id":"x"}}'
echo '{"type":"assistant","message":{"content":[]}}'
echo '{"type":"result","subtype":"success","is_error":false,"session_id":"fake"}'
read -r next
exit 3
`

func TestRelayFiltersOutput(t *testing.T) {
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		if testing.Short() {
			t.Skip("needs bubblewrap")
		}
		t.Fatal(err)
	}
	t.Parallel()
	ws, home := t.TempDir(), t.TempDir()
	cli := filepath.Join(t.TempDir(), "claude")
	if err := os.WriteFile(cli, []byte(fakeCLI), 0o755); err != nil {
		t.Fatal(err)
	}
	d, err := New(Config{
		CLIPath: cli, Workspace: ws, Home: home, Bwrap: bwrap, Sandbox: isolatetest.New(t, ws, nil, home),
		Endpoint: func(id string) (string, string, error) { return "http://127.0.0.1:1", token(id), nil },
		Decorate: func(id string, ev []byte) []byte { return []byte(`{"decorated":true,` + string(ev[1:])) },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(context.Background())
	tr := run(t, context.Background(), d, "fake-session", wire.SessionOptions{}, "hello")
	if tr.err != nil {
		t.Fatal(tr.err)
	}
	if got := strings.Join(tr.types(), " "); got != "system/init assistant result/success" {
		t.Errorf("events %q", got)
	}
	if res := tr.result(t); res["decorated"] != true {
		t.Errorf("result not decorated: %v", res)
	}
	var prompt map[string]any
	b, _ := os.ReadFile(filepath.Join(ws, "prompt.json"))
	if err := json.Unmarshal(b, &prompt); err != nil || prompt["type"] != "user" || prompt["session_id"] != cliSessionID("fake-session") {
		t.Errorf("prompt line %q", b)
	}
	b, _ = os.ReadFile(filepath.Join(ws, "answer.json"))
	if !bytes.Contains(b, []byte(`"request_id":"req-1"`)) || !bytes.Contains(b, []byte(`"subtype":"error"`)) {
		t.Errorf("control request answer %q", b)
	}

	// The fake exits at the next prompt: the turn gets a synthesized result naming the exit.
	tr = run(t, context.Background(), d, "fake-session", wire.SessionOptions{}, "again")
	res := tr.result(t)
	if wire.CodeOf(tr.err) != wire.Unavailable || res["decorated"] != true || !strings.Contains(res["result"].(string), "exit status 3") {
		t.Errorf("turn on an exiting CLI: %v %v", tr.err, res)
	}
}

func TestReadLine(t *testing.T) {
	in := "short\n" + strings.Repeat("x", 100) + "\nexact12345\nlast"
	r := bufio.NewReaderSize(strings.NewReader(in), 16)
	for _, want := range []struct {
		line    string
		dropped int
	}{{"short\n", 0}, {"", 101}, {"exact12345\n", 0}, {"last", 0}} {
		line, dropped, _ := readLine(r, 10)
		if string(line) != want.line || dropped != want.dropped {
			t.Errorf("readLine = %q, %d; want %q, %d", line, dropped, want.line, want.dropped)
		}
	}
}

// TestInsecure: without bubblewrap the CLI runs with host paths and the same cleared environment.
func TestInsecure(t *testing.T) {
	r := newRig(t)
	d := r.driver(t, "", func(c *Config) { c.Insecure, c.Bwrap, c.Sandbox = true, "", nil })
	id := session.NewID()
	mustSucceed(t, run(t, context.Background(), d, id, wire.SessionOptions{}, "run env > env.txt"))
	env, _ := os.ReadFile(filepath.Join(r.ws, "env.txt"))
	if !bytes.Contains(env, []byte("HOME="+r.home+"\n")) || !bytes.Contains(env, []byte("ANTHROPIC_API_KEY="+token(id))) || bytes.Contains(env, []byte(realKey)) {
		t.Errorf("insecure agent env:\n%s", env)
	}
	if transcriptPath(r.home, id) == "" {
		t.Error("no transcript in the host home")
	}
}

// TestAPIError: a model error ends the turn with the CLI's error result (is_error, in a process that stays:
// unlike one-shot -p, stream-json input mode does not exit); the next turn works.
func TestAPIError(t *testing.T) {
	r := newRig(t)
	d := r.driver(t, "", nil)
	id := session.NewID()
	ctx := context.Background()
	mustSucceed(t, run(t, ctx, d, id, wire.SessionOptions{}, "remember the word lime"))
	r.ms.Inject(modelserver.Fault{Status: 402, Header: http.Header{"X-Should-Retry": []string{"false"}}})
	tr := run(t, ctx, d, id, wire.SessionOptions{}, "this one fails")
	if res := tr.result(t); res["is_error"] != true || tr.err != nil {
		t.Errorf("API error turn: %v %v", tr.err, res)
	}
	pid := d.pid(id)
	r.ms.Reset()
	mustSucceed(t, run(t, ctx, d, id, wire.SessionOptions{}, "and the word?"))
	if d.pid(id) != pid {
		t.Errorf("the process changed after an API error (%d → %d): in stream-json input mode it should stay", pid, d.pid(id))
	}
	if reqs := mainRequests(r.ms); len(reqs) == 0 || !strings.Contains(messagesText(reqs[0]), "lime") {
		t.Errorf("the turn after the API error lost the conversation")
	}
}

// TestWarmAndRelease: a session's process starts when a client attaches (Warm), before any prompt, and the
// prompt runs in it; it is released AgentIdle after the last client left (Cool), and a client coming back
// starts one again that resumes the transcript. A prompt whose options differ from the warm process's
// restarts it under its own.
func TestWarmAndRelease(t *testing.T) {
	r := newRig(t)
	d := r.driver(t, "", func(c *Config) { c.AgentIdle = 100 * time.Millisecond })
	id := session.NewID()
	d.Warm(id, wire.SessionOptions{}, nil)
	waitFor(t, "the warm process to start", func() bool { return d.pid(id) != 0 })
	warm := d.pid(id)
	mustSucceed(t, run(t, context.Background(), d, id, wire.SessionOptions{}, "remember the word plum"))
	if got := d.pid(id); got != warm {
		t.Fatalf("the prompt ran in process %d, not the warm one %d", got, warm)
	}

	d.Cool(id)
	waitFor(t, "the process to be released", func() bool { return d.processCount() == 0 })
	d.Warm(id, wire.SessionOptions{}, nil)
	waitFor(t, "the process to start again", func() bool { return d.pid(id) != 0 })
	r.ms.Reset()
	other := wire.SessionOptions{Model: "claude-sonnet-4-5"}
	mustSucceed(t, run(t, context.Background(), d, id, other, "and the word?"))
	if reqs := mainRequests(r.ms); len(reqs) == 0 || !strings.Contains(messagesText(reqs[0]), "plum") {
		t.Errorf("no resume after the release")
	} else if reqs[0].Model != "claude-sonnet-4-5" {
		t.Errorf("the prompt's model %q was not used: the process was not restarted under its options", reqs[0].Model)
	}
}

// TestStartReleasesCooling: a process starting for one session stops those of the sessions whose clients
// left (waiting out AgentIdle), so a user opening session after session holds no more processes than it
// has sessions in use; a session the hub never cooled keeps its process.
func TestStartReleasesCooling(t *testing.T) {
	r := newRig(t)
	d := r.driver(t, "", func(c *Config) { c.AgentIdle = time.Hour })
	left, kept, next := session.NewID(), session.NewID(), session.NewID()
	mustSucceed(t, run(t, context.Background(), d, kept, wire.SessionOptions{}, "hello"))
	d.Warm(left, wire.SessionOptions{}, nil)
	waitFor(t, "the first session's process to start", func() bool { return d.pid(left) != 0 })
	d.Cool(left)
	d.Warm(next, wire.SessionOptions{}, nil)
	waitFor(t, "the next session's process to start", func() bool { return d.pid(next) != 0 })
	waitFor(t, "the cooling session's process to be released", func() bool { return d.pid(left) == 0 })
	if d.pid(kept) == 0 {
		t.Error("the process of a session that was never cooled was stopped")
	}
}
