package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coder/websocket"
)

// TestPossess: warren possess connects as the host of the session it is given, declaring the six host
// tools and its root; each call is shown and asked (n denies: an error result and nothing done; y runs
// it), the input shown with its invisible characters escaped; a call of another client's tool is left
// unanswered; the session's end ends possess.
func TestPossess(t *testing.T) {
	dir := t.TempDir()
	withStdin(t, "n\ny\n")
	url := chatEdge(t, func(ctx context.Context, c *chatConn) {
		opts := c.open(ctx)
		servers, _ := opts["mcpServers"].([]any)
		var tools []string
		if len(servers) == 1 {
			srv, _ := servers[0].(map[string]any)
			list, _ := srv["tools"].([]any)
			for _, tl := range list {
				m, _ := tl.(map[string]any)
				tools = append(tools, m["name"].(string))
			}
		}
		if opts["role"] != "host" || opts["root"] != dir || opts["sessionId"] != "s1" ||
			strings.Join(tools, ",") != "HostBash,HostRead,HostWrite,HostEdit,HostGlob,HostGrep" {
			t.Errorf("init %v (tools %v)", opts, tools)
		}
		call := func(id, tool, input string) {
			c.send(ctx, []byte(`{"type":"tool_call","payload":{"callId":"`+id+`","toolName":"`+tool+`","input":`+input+`}}`))
		}
		answer := func(id string) (isError bool, text string) {
			m := c.read(ctx)
			p, _ := m["payload"].(map[string]any)
			res, _ := p["result"].(map[string]any)
			content, _ := res["content"].([]any)
			if m["type"] != "tool_result" || p["callId"] != id || len(content) != 1 {
				t.Fatalf("want the tool_result of %s, got %v", id, m)
			}
			block, _ := content[0].(map[string]any)
			text, _ = block["text"].(string)
			return res["isError"] == true, text
		}
		call("c1", "mcp__host__HostWrite", `{"file_path":"f.txt","content":"hi\u202e"}`)
		if isErr, text := answer("c1"); !isErr || !strings.Contains(text, "denied") {
			t.Errorf("denied call: %v %q", isErr, text)
		}
		call("c2", "mcp__app__lookup", `{"q":"x"}`) // another client's tool: left alone
		call("c3", "mcp__host__HostWrite", `{"file_path":"f.txt","content":"hi"}`)
		if isErr, text := answer("c3"); isErr || !strings.Contains(text, "wrote 2 bytes") {
			t.Errorf("allowed call: %v %q", isErr, text)
		}
		c.c.Close(websocket.StatusNormalClosure, "")
	})
	var out, errOut bytes.Buffer
	err := runPossess(context.Background(), []string{"-url", url, "-token", "tok", "-root", dir, "-session", "s1"}, &out, &errOut)
	if err != nil {
		t.Fatalf("runPossess: %v\n%s", err, errOut.String())
	}
	if out.String() != "s1\n" {
		t.Errorf("stdout %q", out.String())
	}
	if b, err := os.ReadFile(filepath.Join(dir, "f.txt")); err != nil || string(b) != "hi" {
		t.Errorf("f.txt: %q, %v", b, err)
	}
	for _, want := range []string{
		`⏺ HostWrite {"file_path":"f.txt","content":"hi\u202e"}` + "\n  run it? [y/N] ",
		"  ⎿  HostWrite: the user denied this call\n",
		"  (mcp__app__lookup is another client's tool)\n",
		"  ⎿  HostWrite: done\n",
	} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut.String())
		}
	}
}

// TestPossessShowsWhatRuns: the confirmation prints no character that could redraw or reorder what the
// user reads: carriage returns between JSON tokens are removed, control and bidirectional format
// characters inside strings escaped.
func TestPossessShowsWhatRuns(t *testing.T) {
	for in, want := range map[string]string{
		"{\"command\":\"rm -rf ~\",\r\"description\":\"ls\"}": `{"command":"rm -rf ~","description":"ls"}`,
		"{\"command\":\"ls \u202e~ fr- mr\"}":                 `{"command":"ls \u202e~ fr- mr"}`,
		`{"command":"echo \u001b[2K"}`:                        `{"command":"echo \u001b[2K"}`,
		`{"content":"` + strings.Repeat("a", 5000) + `"}`:     `{"content":"` + strings.Repeat("a", possessMaxShown-12) + `... (5014 bytes in all)`,
	} {
		if got := shown([]byte(in)); got != want {
			t.Errorf("shown(%q) = %q, want %q", in, got, want)
		}
	}
}
