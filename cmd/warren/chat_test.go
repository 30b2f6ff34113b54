package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/coder/websocket"

	"github.com/warren-mesh/warren/internal/wire"
)

// chatEdge is an httptest edge speaking the agent channel on /ws; script plays the server's side of the
// connection. Cleanup waits for the script.
func chatEdge(t *testing.T, script func(ctx context.Context, c *chatConn)) string {
	t.Helper()
	var wg sync.WaitGroup
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/ws" || r.Header.Get("Authorization") != "Bearer tok" {
			wire.WriteHTTPError(w, nil, wire.Errorf(wire.NotFound, "no route %s", r.URL.Path))
			return
		}
		conn, err := websocket.Accept(w, r, nil)
		if err != nil {
			t.Errorf("accept: %v", err)
			return
		}
		wg.Add(1)
		defer wg.Done()
		defer conn.CloseNow()
		script(r.Context(), &chatConn{t: t, c: conn})
	}))
	t.Cleanup(func() {
		srv.Close()
		wg.Wait()
	})
	return srv.URL
}

type chatConn struct {
	t   *testing.T
	c   *websocket.Conn
	seq int64
}

// read returns the client's next message, decoded.
func (c *chatConn) read(ctx context.Context) map[string]any {
	c.t.Helper()
	_, b, err := c.c.Read(ctx)
	if err != nil {
		c.t.Errorf("server read: %v", err)
		return nil
	}
	if _, err := wire.ParseClientMessage(b); err != nil {
		c.t.Errorf("client sent an invalid message %s: %v", b, err)
	}
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return m
}

func (c *chatConn) send(ctx context.Context, msg []byte) {
	c.t.Helper()
	c.seq++
	if err := c.c.Write(ctx, websocket.MessageText, wire.WithSeq(msg, c.seq)); err != nil {
		c.t.Errorf("server write: %v", err)
	}
}

func (c *chatConn) sendLines(ctx context.Context, lines string) {
	c.t.Helper()
	for l := range strings.SplitSeq(strings.TrimSpace(lines), "\n") {
		c.send(ctx, []byte(l))
	}
}

// open answers init like the runner: session_info initializing, ready, session_info ready.
func (c *chatConn) open(ctx context.Context) map[string]any {
	c.t.Helper()
	init := c.read(ctx)
	c.send(ctx, wire.Control(wire.ActionSessionInfo, map[string]any{"state": "initializing", "sessionId": "s1"}))
	c.send(ctx, wire.Control(wire.ActionReady, map[string]any{"sessionId": "s1", "region": "local", "model": "claude-sonnet-4-5"}))
	c.send(ctx, wire.Control(wire.ActionSessionInfo, map[string]any{"state": "ready", "sessionId": "s1"}))
	p, _ := init["payload"].(map[string]any)
	return p
}

// prompt reads a user message and returns its text.
func (c *chatConn) prompt(ctx context.Context) string {
	c.t.Helper()
	m := c.read(ctx)
	msg, _ := m["message"].(map[string]any)
	text, _ := msg["content"].(string)
	if m["type"] != "user" || m["session_id"] != "s1" {
		c.t.Errorf("want a user message for s1, got %v", m)
	}
	return text
}

// expectClose reads until the client's control close, then closes normally.
func (c *chatConn) expectClose(ctx context.Context) {
	for {
		m := c.read(ctx)
		if m == nil {
			return
		}
		if p, _ := m["payload"].(map[string]any); m["type"] == "control" && p["action"] == "close" {
			c.c.Close(websocket.StatusNormalClosure, "")
			return
		}
	}
}

func (c *chatConn) state(ctx context.Context, state string) {
	c.send(ctx, wire.Control(wire.ActionSessionInfo, map[string]any{"state": state, "sessionId": "s1"}))
}

// fakeSignals replaces the process's signals for one test.
func fakeSignals(t *testing.T) chan os.Signal {
	t.Helper()
	ch := make(chan os.Signal, 4)
	prev := chatSignals
	chatSignals = func() (<-chan os.Signal, func()) { return ch, func() {} }
	t.Cleanup(func() { chatSignals = prev })
	return ch
}

func withStdin(t *testing.T, s string) {
	t.Helper()
	prev := clientStdin
	clientStdin = strings.NewReader(s)
	t.Cleanup(func() { clientStdin = prev })
}

func runChatTest(t *testing.T, url string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var o, e bytes.Buffer
	err = runChat(context.Background(), append([]string{"-url", url, "-token", "tok"}, args...), &o, &e)
	return o.String(), e.String(), err
}

func TestChatOneShot(t *testing.T) {
	url := chatEdge(t, func(ctx context.Context, c *chatConn) {
		opts := c.open(ctx)
		sp, _ := opts["systemPrompt"].(map[string]any)
		if opts["model"] != "m1" || opts["maxTurns"] != 5.0 || opts["sessionId"] != "old" || opts["forkSession"] != true ||
			opts["includePartialMessages"] != true || sp["preset"] != "claude_code" || sp["append"] != "be brief" {
			t.Errorf("init options %v", opts)
		}
		if p := c.prompt(ctx); p != "write hello.txt" {
			t.Errorf("prompt %q", p)
		}
		c.sendLines(ctx, turnStreamed)
		c.expectClose(ctx)
	})
	out, errOut, err := runChatTest(t, url, "-p", "write hello.txt", "-model", "m1", "-max-turns", "5",
		"-resume", "old", "-fork", "-append-system", "be brief")
	if err != nil {
		t.Fatalf("runChat: %v (stderr %q)", err, errOut)
	}
	if out != turnStreamedOut {
		t.Errorf("stdout:\n%s\nwant:\n%s", out, turnStreamedOut)
	}
	want := "warren chat: session s1 (claude-sonnet-4-5) over websocket; continue it later with -resume s1\n" +
		"cost: $0.0123 (37,033 in / 210 out tokens, 3.2 s compute)\n"
	if errOut != want {
		t.Errorf("stderr:\n%q\nwant:\n%q", errOut, want)
	}
}

func TestChatOneShotErrors(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		script func(ctx context.Context, c *chatConn)
		code   int    // exitError code; 0 for another error
		errMsg string // part of the error's text
		stderr string // part of stderr
	}{
		{"error result exits 1", []string{"-p", "test it"}, func(ctx context.Context, c *chatConn) {
			c.open(ctx)
			c.prompt(ctx)
			c.sendLines(ctx, turnFailed)
			c.expectClose(ctx)
		}, 1, "", "the agent failed: API Error: 529 overloaded"},
		{"budget exhausted exits 1", []string{"-p", "refactor", "-quiet"}, func(ctx context.Context, c *chatConn) {
			c.open(ctx)
			c.prompt(ctx)
			c.sendLines(ctx, turnBudget)
			c.expectClose(ctx)
		}, 1, "", "the budget ran out"},
		{"budget exceeded close is described", []string{"-p", "hi"}, func(ctx context.Context, c *chatConn) {
			c.open(ctx)
			c.prompt(ctx)
			c.send(ctx, wire.ErrorMessage(wire.Errorf(wire.BudgetExceeded, "the AI budget of this day is spent: $2.000000 of $2.000000 used")))
			c.c.Close(websocket.StatusCode(wire.BudgetExceeded.CloseCode()), "budget_exceeded")
		}, 0, "the AI budget of this day is spent: $2.000000 of $2.000000 used (raise the user's quota", ""},
		{"refused at dial", []string{"-p", "hi"}, func(ctx context.Context, c *chatConn) {
			c.read(ctx)
			c.c.Close(websocket.StatusCode(wire.ConcurrencyLimit.CloseCode()), `{"code":"concurrency_limit","message":"3 sessions"}`)
		}, 0, "too many sessions at once: 3 sessions", ""},
		{"tool calls are left to the client that declared the tool", []string{"-p", "look it up"}, func(ctx context.Context, c *chatConn) {
			// Another client (a warren possess host) declared the tool and answers; chat must not, or its
			// answer could win the race and become the agent's result.
			c.open(ctx)
			c.prompt(ctx)
			c.state(ctx, "processing")
			c.send(ctx, []byte(`{"type":"tool_call","payload":{"callId":"c1","toolName":"mcp__host__HostRead","input":{"file_path":"go.mod"}}}`))
			c.state(ctx, "waiting_tool")
			c.state(ctx, "processing")
			c.send(ctx, []byte(`{"type":"result","subtype":"error_during_execution","is_error":true,"errors":["lookup failed"],"usage":{}}`))
			for {
				m := c.read(ctx)
				if m == nil {
					return
				}
				if m["type"] == "tool_result" {
					t.Errorf("chat answered a call of a tool it did not declare: %v", m)
				}
				if p, _ := m["payload"].(map[string]any); m["type"] == "control" && p["action"] == "close" {
					c.c.Close(websocket.StatusNormalClosure, "")
					return
				}
			}
		}, 1, "", "lookup failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url := chatEdge(t, tt.script)
			_, errOut, err := runChatTest(t, url, tt.args...)
			var ee exitError
			switch {
			case tt.code != 0:
				if !errors.As(err, &ee) || ee.code != tt.code {
					t.Fatalf("runChat = %v, want exit %d", err, tt.code)
				}
			case err == nil || !strings.Contains(err.Error(), tt.errMsg):
				t.Fatalf("runChat = %v, want an error containing %q", err, tt.errMsg)
			}
			if !strings.Contains(errOut, tt.stderr) {
				t.Fatalf("stderr %q, want it to contain %q", errOut, tt.stderr)
			}
		})
	}
}

func TestChatInteractive(t *testing.T) {
	withStdin(t, "first\n\n   \nsecond\n")
	url := chatEdge(t, func(ctx context.Context, c *chatConn) {
		c.open(ctx)
		if p := c.prompt(ctx); p != "first" {
			t.Errorf("first prompt %q", p)
		}
		c.state(ctx, "processing")
		c.send(ctx, []byte(`{"type":"assistant","message":{"id":"m1","content":[{"type":"text","text":"One."}]}}`))
		c.send(ctx, []byte(`{"type":"result","subtype":"error_max_turns","is_error":true,"num_turns":2,"usage":{"input_tokens":10,"output_tokens":2}}`))
		c.state(ctx, "ready")
		if p := c.prompt(ctx); p != "second" {
			t.Errorf("second prompt %q", p)
		}
		// The agent fails without a result: the server reports the error and the session goes on.
		c.state(ctx, "processing")
		c.send(ctx, wire.ErrorMessage(wire.Errorf(wire.Unavailable, "no agent configured")))
		c.state(ctx, "ready")
		c.expectClose(ctx)
	})
	out, errOut, err := runChatTest(t, url)
	if err != nil {
		t.Fatalf("runChat: %v (stderr %q)", err, errOut)
	}
	if out != "One.\n" {
		t.Errorf("stdout %q", out)
	}
	for _, want := range []string{"the agent stopped after 2 turns", "cost: $0.0000 (10 in / 2 out tokens)",
		"the platform could not start your sandbox: no agent configured"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr %q lacks %q", errOut, want)
		}
	}
	if strings.Contains(errOut, "> ") {
		t.Errorf("prompt marker printed although stdin is not a terminal: %q", errOut)
	}
}

func TestChatCtrlC(t *testing.T) {
	t.Run("first interrupts the turn", func(t *testing.T) {
		sigs := fakeSignals(t)
		url := chatEdge(t, func(ctx context.Context, c *chatConn) {
			c.open(ctx)
			c.prompt(ctx)
			c.state(ctx, "processing")
			c.send(ctx, []byte(`{"type":"assistant","message":{"id":"m1","content":[{"type":"text","text":"Working"}]}}`))
			sigs <- os.Interrupt
			if m := c.read(ctx); m["type"] != "control" || m["payload"].(map[string]any)["action"] != "interrupt" {
				t.Errorf("want interrupt, got %v", m)
			}
			c.state(ctx, "ready") // interrupted: no result
			c.expectClose(ctx)
		})
		out, errOut, err := runChatTest(t, url, "-p", "go")
		var ee exitError
		if !errors.As(err, &ee) || ee.code != exitInterrupted {
			t.Fatalf("runChat = %v, want exit %d", err, exitInterrupted)
		}
		if out != "Working\n" || !strings.Contains(errOut, "interrupting the agent (Ctrl-C again to quit)") {
			t.Fatalf("stdout %q, stderr %q", out, errOut)
		}
	})
	t.Run("second quits", func(t *testing.T) {
		sigs := fakeSignals(t)
		withStdin(t, "go\nnever sent\n")
		url := chatEdge(t, func(ctx context.Context, c *chatConn) {
			c.open(ctx)
			c.prompt(ctx)
			c.state(ctx, "processing")
			sigs <- os.Interrupt
			if m := c.read(ctx); m["payload"].(map[string]any)["action"] != "interrupt" {
				t.Errorf("want interrupt, got %v", m)
			}
			sigs <- os.Interrupt // the agent is slow to stop
			c.expectClose(ctx)
		})
		_, _, err := runChatTest(t, url)
		var ee exitError
		if !errors.As(err, &ee) || ee.code != exitInterrupted {
			t.Fatalf("runChat = %v, want exit %d", err, exitInterrupted)
		}
	})
	t.Run("at the prompt quits", func(t *testing.T) {
		sigs := fakeSignals(t)
		r, w, err := os.Pipe() // standard input that stays open
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		defer r.Close()
		prev := clientStdin
		clientStdin = r
		t.Cleanup(func() { clientStdin = prev })
		url := chatEdge(t, func(ctx context.Context, c *chatConn) {
			c.open(ctx)
			sigs <- os.Interrupt
			// The signal may beat the end of the dial, so the client may or may not say goodbye.
			for {
				if _, _, err := c.c.Read(ctx); err != nil {
					return
				}
			}
		})
		_, _, err = runChatTest(t, url)
		var ee exitError
		if !errors.As(err, &ee) || ee.code != exitInterrupted {
			t.Fatalf("runChat = %v, want exit %d", err, exitInterrupted)
		}
	})
}

func TestChatFlags(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"-fork"}, "-fork needs the session to fork"},
		{[]string{"-resume", "a", "-continue"}, "use one of -resume and -continue"},
		{[]string{"-system", "a", "-append-system", "b"}, "use one of -system and -append-system"},
		{[]string{"-max-turns", "-1"}, "must not be negative"},
		{[]string{"-p", " "}, "the prompt is empty"},
		{[]string{"hello"}, `unexpected argument "hello"`},
	}
	for _, tt := range tests {
		_, _, err := runChatTest(t, "http://127.0.0.1:1", tt.args...)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("runChat %v = %v, want %q", tt.args, err, tt.want)
		}
	}
	var o, e bytes.Buffer
	if err := runChat(context.Background(), []string{"-p", "hi", "-token", ""}, &o, &e); err == nil || !strings.Contains(err.Error(), "no token") {
		t.Errorf("without a token: %v", err)
	}
}
