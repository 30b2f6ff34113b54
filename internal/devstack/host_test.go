package devstack_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	warren "github.com/warren-mesh/warren/sdk"
)

// TestHostToolsEndToEnd: possession mode through the dev platform with the real CLI. A client opens a
// session and runs a turn; a host attaches to that session with the SDK's host tools on a directory of this
// machine; the scripted model then calls mcp__host__HostWrite and mcp__host__HostRead: the file appears in
// the directory and its content is the tool_result of the next model request. A write trying to leave the
// directory gets an error result and nothing outside changes; a call the user denies gets an error result
// and does nothing. The client, which declared no tools, never answers the host's calls.
func TestHostToolsEndToEnd(t *testing.T) {
	st, ms := toolStack(t)
	ctx := agentCtx(t)
	base := t.TempDir()
	dir := filepath.Join(base, "project")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		asked []warren.HostCall
	)
	tools, err := warren.HostTools(dir, func(_ context.Context, c warren.HostCall) bool {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, c)
		return !strings.Contains(string(c.Input), "DENY")
	})
	if err != nil {
		t.Fatal(err)
	}
	c := client(t, st, "hana", withBudget(5_000_000))
	a, err := c.Dial(ctx, &warren.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	turn := func(prompt string) {
		t.Helper()
		if err := a.Send(ctx, prompt); err != nil {
			t.Fatal(err)
		}
		untilResult(t, ctx, a, nil) // a answers nothing
	}
	turn("hello before the host")

	host, err := c.DialHost(ctx, a.ID(), dir, tools)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	hctx, stopHost := context.WithCancel(ctx)
	go func() { served <- host.ServeHost(hctx, tools, nil) }()
	defer func() {
		stopHost()
		if err := <-served; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("ServeHost: %v", err)
		}
		_ = host.Close()
	}()

	turn(`call mcp__host__HostWrite {"file_path":"notes/hello.txt","content":"HOST-E2E-CONTENT"}`)
	if b, err := os.ReadFile(filepath.Join(dir, "notes", "hello.txt")); err != nil || string(b) != "HOST-E2E-CONTENT" {
		t.Fatalf("the host's file: %q, %v", b, err)
	}
	if msg := lastToolResult(t, ms); !strings.Contains(msg, "wrote 16 bytes") {
		t.Fatalf("HostWrite's tool_result given to the model: %s", msg)
	}
	turn(`call mcp__host__HostRead {"file_path":"notes/hello.txt"}`)
	if msg := lastToolResult(t, ms); !strings.Contains(msg, "HOST-E2E-CONTENT") || strings.Contains(msg, `"is_error":true`) {
		t.Fatalf("HostRead's tool_result given to the model: %s", msg)
	}

	turn(`call mcp__host__HostWrite {"file_path":"../escaped.txt","content":"PWNED"}`)
	if msg := lastToolResult(t, ms); !strings.Contains(msg, "outside") || !strings.Contains(msg, `"is_error":true`) {
		t.Fatalf("escaping HostWrite's tool_result given to the model: %s", msg)
	}
	if entries, _ := os.ReadDir(base); len(entries) != 1 {
		t.Fatalf("something appeared next to the host's directory: %v", entries)
	}

	turn(`call mcp__host__HostWrite {"file_path":"denied.txt","content":"DENY me"}`)
	if msg := lastToolResult(t, ms); !strings.Contains(msg, "denied") || !strings.Contains(msg, `"is_error":true`) {
		t.Fatalf("denied HostWrite's tool_result given to the model: %s", msg)
	}
	if _, err := os.Stat(filepath.Join(dir, "denied.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a denied write wrote: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) != 4 || asked[0].Tool != "HostWrite" || asked[1].Tool != "HostRead" {
		t.Fatalf("confirmations asked: %+v", asked)
	}
}

// TestPossessCLI: the real binaries, as a user would: `warren possess -root DIR` opens a session and prints
// its id; `warren chat -resume ID -p ...` prompts it; the scripted model calls mcp__host__HostWrite; possess
// shows the call, the user answers y on its standard input, and the file lands in DIR. chat, which declared
// no tools, shows the call and leaves it to possess. Ctrl-C (SIGINT) ends possess normally.
func TestPossessCLI(t *testing.T) {
	st, ms := toolStack(t)
	dir := t.TempDir()
	env := append(os.Environ(), "WARREN_URL="+st.URL(), "WARREN_TOKEN="+mint(t, st, "pia", withBudget(5_000_000)))
	possess := exec.Command(binary, "possess", "-root", dir)
	possess.Env = env
	stdin, err := possess.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := possess.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var possessErr bytes.Buffer
	possess.Stderr = &possessErr
	if err := possess.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = possess.Process.Kill() }()
	id, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("possess printed no session id: %v\n%s", err, possessErr.String())
	}
	id = strings.TrimSpace(id)
	if _, err := io.WriteString(stdin, "y\n"); err != nil { // the answer to the call to come
		t.Fatal(err)
	}

	chat := exec.Command(binary, "chat", "-resume", id, "-p", `call mcp__host__HostWrite {"file_path":"from-agent.txt","content":"POSSESSED"}`)
	chat.Env = env
	out, err := chat.CombinedOutput()
	if err != nil {
		t.Fatalf("chat: %v\n%s\npossess:\n%s", err, out, possessErr.String())
	}
	if b, err := os.ReadFile(filepath.Join(dir, "from-agent.txt")); err != nil || string(b) != "POSSESSED" {
		t.Fatalf("the host's file: %q, %v\nchat:\n%s\npossess:\n%s", b, err, out, possessErr.String())
	}
	if !strings.Contains(string(out), "runs in the client that declared it") {
		t.Errorf("chat did not show the call:\n%s", out)
	}
	if msg := lastToolResult(t, ms); !strings.Contains(msg, "wrote 9 bytes") {
		t.Fatalf("the model was given: %s", msg)
	}
	if err := possess.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := possess.Wait(); err != nil {
		t.Fatalf("possess after Ctrl-C: %v\n%s", err, possessErr.String())
	}
	for _, want := range []string{`⏺ HostWrite {`, `"file_path":"from-agent.txt"`, "run it? [y/N]", "HostWrite: done", "warren possess: stopped"} {
		if !strings.Contains(possessErr.String(), want) {
			t.Errorf("possess's terminal lacks %q:\n%s", want, possessErr.String())
		}
	}
}
