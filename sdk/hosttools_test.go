package warren

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/wire"
)

// hostFixture is a root directory with files, and next to it an outside directory the tools must never
// reach: a symlink to a file outside, a symlink to the outside directory, and one to a file inside.
func hostFixture(t *testing.T) (root, outside string, srv *ToolServer) {
	t.Helper()
	base := t.TempDir()
	root, outside = filepath.Join(base, "root"), filepath.Join(base, "outside")
	for _, d := range []string{root, outside, filepath.Join(root, "src")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		filepath.Join(root, "a.txt"):          "alpha\nbeta\ngamma\n",
		filepath.Join(root, "src", "main.go"): "package main\n// TODO one\n// TODO two\n",
		filepath.Join(outside, "secret.txt"):  "OUTSIDE-SECRET\n",
	}
	for p, c := range files {
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{
		"link-out": filepath.Join(outside, "secret.txt"), "dir-out": outside, "rel-out": "../outside/secret.txt", "link-in": "a.txt",
	} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	srv, err := HostTools(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	return root, outside, srv
}

// callHost runs one host tool's handler as HandleToolCall would.
func callHost(t *testing.T, srv *ToolServer, tool, input string) (string, error) {
	t.Helper()
	return callHostCtx(context.Background(), t, srv, tool, input)
}

func callHostCtx(ctx context.Context, t *testing.T, srv *ToolServer, tool, input string) (string, error) {
	t.Helper()
	tl, ok := srv.lookup(ToolCall{ToolName: tool, ServerName: "host", QualifiedName: "mcp__host__" + tool})
	if !ok {
		t.Fatalf("no tool %s", tool)
	}
	res, err := runTool(ctx, tl, json.RawMessage(input))
	if err != nil {
		return "", err
	}
	var block struct{ Text string }
	if len(res.Content) != 1 || json.Unmarshal(res.Content[0], &block) != nil {
		t.Fatalf("%s answered %+v", tool, res)
	}
	return block.Text, nil
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestHostToolsRefuseEscapes tries every way out of the root: "..", absolute paths outside, symlinks
// to a file and to a directory outside (absolute and relative), for reading, writing, editing, globbing
// and grepping. Each is refused (or finds nothing), and nothing outside changes.
func TestHostToolsRefuseEscapes(t *testing.T) {
	root, outside, srv := hostFixture(t)
	secret := filepath.Join(outside, "secret.txt")
	escapes := []string{"../outside/secret.txt", secret, "link-out", "rel-out", "dir-out/secret.txt",
		"src/../../outside/secret.txt", filepath.Join(root, "..", "outside", "secret.txt"), filepath.Join(root, "dir-out", "secret.txt")}
	for _, p := range escapes {
		if out, err := callHost(t, srv, "HostRead", mustJSON(t, map[string]string{"file_path": p})); err == nil {
			t.Errorf("HostRead %s = %q, want a refusal", p, out)
		}
		if out, err := callHost(t, srv, "HostWrite", mustJSON(t, map[string]string{"file_path": p, "content": "PWNED"})); err == nil {
			t.Errorf("HostWrite %s = %q, want a refusal", p, out)
		}
		if out, err := callHost(t, srv, "HostEdit", mustJSON(t, map[string]string{"file_path": p, "old_string": "OUTSIDE", "new_string": "PWNED"})); err == nil {
			t.Errorf("HostEdit %s = %q, want a refusal", p, out)
		}
	}
	for _, p := range []string{"dir-out/new.txt", "../new.txt", filepath.Join(outside, "new.txt"), "dir-out/sub/new.txt"} {
		if _, err := callHost(t, srv, "HostWrite", mustJSON(t, map[string]string{"file_path": p, "content": "PWNED"})); err == nil {
			t.Errorf("HostWrite %s succeeded", p)
		}
	}
	for _, p := range []string{"dir-out", "..", outside, "link-out"} {
		if out, err := callHost(t, srv, "HostGlob", mustJSON(t, map[string]string{"pattern": "**", "path": p})); err == nil {
			t.Errorf("HostGlob in %s = %q, want a refusal", p, out)
		}
		if out, err := callHost(t, srv, "HostGrep", mustJSON(t, map[string]string{"pattern": "SECRET", "path": p})); err == nil {
			t.Errorf("HostGrep in %s = %q, want a refusal", p, out)
		}
	}
	// From the root, symlinks are not followed: nothing outside is listed or searched.
	if out, err := callHost(t, srv, "HostGlob", `{"pattern":"**/*"}`); err != nil || strings.Contains(out, "secret") || !strings.Contains(out, "main.go") {
		t.Errorf("HostGlob ** = %q, %v", out, err)
	}
	if out, err := callHost(t, srv, "HostGrep", `{"pattern":"OUTSIDE-SECRET","output_mode":"content"}`); err != nil || out != "No matches found" {
		t.Errorf("HostGrep from the root = %q, %v", out, err)
	}
	// The outside is as it was.
	entries, _ := os.ReadDir(outside)
	if b, _ := os.ReadFile(secret); string(b) != "OUTSIDE-SECRET\n" || len(entries) != 1 {
		t.Fatalf("outside changed: secret %q, %d entries", b, len(entries))
	}
	if _, err := os.Stat(filepath.Join(root, "..", "new.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a file appeared next to the root: %v", err)
	}
	// Inside, absolute and relative paths and a symlink staying inside work.
	if out, err := callHost(t, srv, "HostRead", mustJSON(t, map[string]string{"file_path": filepath.Join(root, "a.txt")})); err != nil || !strings.Contains(out, "     2\tbeta") {
		t.Errorf("HostRead absolute = %q, %v", out, err)
	}
	if out, err := callHost(t, srv, "HostRead", `{"file_path":"link-in"}`); err != nil || !strings.Contains(out, "alpha") {
		t.Errorf("HostRead link-in = %q, %v", out, err)
	}
}

// TestHostToolsWork: each tool does its job inside the root.
func TestHostToolsWork(t *testing.T) {
	root, _, srv := hostFixture(t)
	if _, err := callHost(t, srv, "HostWrite", `{"file_path":"new/deep/f.txt","content":"one\ntwo\nthree\n"}`); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "new", "deep", "f.txt")); string(b) != "one\ntwo\nthree\n" {
		t.Fatalf("written %q", b)
	}
	if out, err := callHost(t, srv, "HostRead", `{"file_path":"new/deep/f.txt","offset":2,"limit":1}`); err != nil || out != "     2\ttwo\n" {
		t.Fatalf("HostRead offset 2 limit 1 = %q, %v", out, err)
	}
	if out, err := callHost(t, srv, "HostEdit", `{"file_path":"new/deep/f.txt","old_string":"two","new_string":"2"}`); err != nil || !strings.Contains(out, "1 occurrence") {
		t.Fatalf("HostEdit = %q, %v", out, err)
	}
	if out, err := callHost(t, srv, "HostGlob", `{"pattern":"**/*.{go,txt}","path":"src"}`); err != nil || out != filepath.Join(root, "src", "main.go")+"\n" {
		t.Fatalf("HostGlob = %q, %v", out, err)
	}
	if out, err := callHost(t, srv, "HostGlob", `{"pattern":"*.txt"}`); err != nil || out != filepath.Join(root, "a.txt")+"\n" {
		t.Fatalf("HostGlob *.txt = %q, %v", out, err)
	}
	if out, err := callHost(t, srv, "HostGrep", `{"pattern":"todo","-i":true,"-n":true,"output_mode":"content","glob":"*.go"}`); err != nil ||
		out != filepath.Join(root, "src", "main.go")+":2:// TODO one\n"+filepath.Join(root, "src", "main.go")+":3:// TODO two\n" {
		t.Fatalf("HostGrep content = %q, %v", out, err)
	}
	if out, err := callHost(t, srv, "HostGrep", `{"pattern":"TODO","output_mode":"count"}`); err != nil || out != filepath.Join(root, "src", "main.go")+":2\n" {
		t.Fatalf("HostGrep count = %q, %v", out, err)
	}
	if out, err := callHost(t, srv, "HostBash", `{"command":"pwd; echo err >&2; exit 3"}`); err != nil || out != root+"\nerr\n\nExit code 3" {
		t.Fatalf("HostBash = %q, %v", out, err)
	}
}

// TestHostToolsBounds: huge outputs are cut at the documented sizes, binary files are refused, an edit
// whose old_string is not unique changes nothing, Glob and Grep stop at their limits.
func TestHostToolsBounds(t *testing.T) {
	root, _, srv := hostFixture(t)
	out, err := callHost(t, srv, "HostBash", `{"command":"head -c 5000000 /dev/zero | tr '\\0' x"}`)
	if err != nil || len(out) > HostBashMaxOutput+100 || !strings.Contains(out, "(4970000 more bytes cut)") {
		t.Fatalf("HostBash of 5 MB: %d bytes, %v, ending %q", len(out), err, out[max(0, len(out)-60):])
	}
	big := strings.Repeat(strings.Repeat("y", 100)+"\n", 20_000) + strings.Repeat("z", 1<<20) + "\n"
	if err := os.WriteFile(filepath.Join(root, "big.txt"), []byte(big), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := callHost(t, srv, "HostRead", `{"file_path":"big.txt","limit":100000}`); err != nil || len(out) > HostMaxOutput+100 || !strings.Contains(out, "more bytes cut") {
		t.Fatalf("HostRead of a big file: %d bytes, %v", len(out), err)
	}
	if out, err := callHost(t, srv, "HostRead", `{"file_path":"big.txt","offset":20001}`); err != nil || len(out) > HostMaxLineBytes+100 || !strings.HasSuffix(out, "(line cut)\n") {
		t.Fatalf("HostRead of a 1 MiB line: %d bytes, %v", len(out), err)
	}
	if err := os.WriteFile(filepath.Join(root, "bin.dat"), []byte("ELF\x00\x01\x02TODO"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := callHost(t, srv, "HostRead", `{"file_path":"bin.dat"}`); err == nil || !strings.Contains(err.Error(), "binary") {
		t.Fatalf("HostRead of a binary file: %v", err)
	}
	if out, _ := callHost(t, srv, "HostGrep", `{"pattern":"TODO"}`); strings.Contains(out, "bin.dat") {
		t.Fatalf("HostGrep searched a binary file: %q", out)
	}
	// A FIFO would block an open: it is refused before, by every tool.
	if err := syscall.Mkfifo(filepath.Join(root, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	for tool, in := range map[string]string{"HostRead": `{"file_path":"fifo"}`, "HostWrite": `{"file_path":"fifo","content":"x"}`,
		"HostEdit": `{"file_path":"fifo","old_string":"a","new_string":"b"}`} {
		if _, err := callHost(t, srv, tool, in); err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("%s on a FIFO: %v", tool, err)
		}
	}
	if out, err := callHost(t, srv, "HostGrep", `{"pattern":"x","glob":"fifo"}`); err != nil || out != "No matches found" {
		t.Errorf("HostGrep over a FIFO: %q, %v", out, err)
	}
	if err := os.WriteFile(filepath.Join(root, "dup.txt"), []byte("x = 1\nx = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := callHost(t, srv, "HostEdit", `{"file_path":"dup.txt","old_string":"x = 1","new_string":"x = 2"}`); err == nil || !strings.Contains(err.Error(), "occurs 2 times") {
		t.Fatalf("HostEdit of a non-unique string: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "dup.txt")); string(b) != "x = 1\nx = 1\n" {
		t.Fatalf("a refused edit changed the file: %q", b)
	}
	if _, err := callHost(t, srv, "HostEdit", `{"file_path":"dup.txt","old_string":"x = 1","new_string":"x = 2","replace_all":true}`); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "dup.txt")); string(b) != "x = 2\nx = 2\n" {
		t.Fatalf("replace_all: %q", b)
	}
	many := filepath.Join(root, "many")
	if err := os.Mkdir(many, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range HostMaxMatches + 50 {
		if err := os.WriteFile(filepath.Join(many, strconv.Itoa(i)+".log"), []byte("hit\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err = callHost(t, srv, "HostGlob", `{"pattern":"*.log","path":"many"}`)
	if n := strings.Count(out, ".log\n"); err != nil || n != HostMaxMatches || !strings.Contains(out, "results cut") {
		t.Fatalf("HostGlob over %d files: %d listed, %v", HostMaxMatches+50, n, err)
	}
	out, err = callHost(t, srv, "HostGrep", `{"pattern":"hit","path":"many","head_limit":5}`)
	if n := strings.Count(out, ".log\n"); err != nil || n != 5 || !strings.Contains(out, "results cut") {
		t.Fatalf("HostGrep head_limit 5: %d listed, %v: %q", n, err, out)
	}
}

// gone says whether process pid has ended (no such process, or a zombie waiting for its reaper).
func gone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(f) > 0 && f[0] == "Z"
}

// waitGone waits until pid has ended; a process left running fails the test (it is then killed).
func waitGone(t *testing.T, pid int) {
	t.Helper()
	for range 200 {
		if gone(pid) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	t.Fatalf("process %d still runs: the process group was not killed", pid)
}

// TestHostBashKillsItsProcessGroup: on timeout and on cancellation the command's whole process group is
// killed, a background child included.
func TestHostBashKillsItsProcessGroup(t *testing.T) {
	root, _, srv := hostFixture(t)
	_, err := callHost(t, srv, "HostBash", `{"command":"sleep 300 & echo $! > bg.pid; sleep 300","timeout":500}`)
	if err == nil || !strings.Contains(err.Error(), "timed out after 500ms") {
		t.Fatalf("HostBash past its timeout: %v", err)
	}
	pidOf := func() int {
		b, err := os.ReadFile(filepath.Join(root, "bg.pid"))
		pid, perr := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || perr != nil {
			t.Fatalf("bg.pid: %q, %v", b, err)
		}
		return pid
	}
	waitGone(t, pidOf())

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := callHostCtx(ctx, t, srv, "HostBash", `{"command":"rm -f bg.pid; sleep 300 & echo $! > bg.pid; sleep 300"}`)
		done <- err
	}()
	for {
		if b, _ := os.ReadFile(filepath.Join(root, "bg.pid")); strings.HasSuffix(string(b), "\n") {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err == nil || !strings.Contains(err.Error(), "cancelled") {
		t.Fatalf("cancelled HostBash: %v", err)
	}
	waitGone(t, pidOf())
}

// TestHostToolsConfirm: the confirmation sees the tool and its input; a denied call does nothing and
// answers an error; an invalid input is refused before anyone is asked.
func TestHostToolsConfirm(t *testing.T) {
	root := t.TempDir()
	var asked []HostCall
	allow := false
	srv, err := HostTools(root, func(_ context.Context, c HostCall) bool {
		asked = append(asked, c)
		return allow
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := callHost(t, srv, "HostWrite", `{"file_path":"f","content":"x"}`); !errors.Is(err, errDenied) {
		t.Fatalf("denied call: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "f")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a denied write wrote: %v", err)
	}
	if len(asked) != 1 || asked[0].Tool != "HostWrite" || string(asked[0].Input) != `{"file_path":"f","content":"x"}` {
		t.Fatalf("asked %+v", asked)
	}
	for _, in := range []string{`{"file_path":"f"}`, `{"file_path":"f","content":"x","mode":"0777"}`, `[]`, `{"file_path":"","content":""}`} {
		if _, err := callHost(t, srv, "HostWrite", in); err == nil || errors.Is(err, errDenied) {
			t.Errorf("HostWrite %s: %v, want an input error", in, err)
		}
	}
	if len(asked) != 1 {
		t.Fatalf("invalid inputs were shown for confirmation: %+v", asked)
	}
	allow = true
	if _, err := callHost(t, srv, "HostWrite", `{"file_path":"f","content":"x"}`); err != nil {
		t.Fatal(err)
	}
	// The declaration passes init's validation.
	if _, err := wire.DecodeSessionOptions(mustMarshal(t, SessionOptions{Role: wire.RoleHost, MCPServers: MCPServerList{srv.MCPServer()}})); err != nil {
		t.Fatalf("the host declaration is refused: %v", err)
	}
}

// TestParseHostInput: inputs of the wrong shape or out of bounds are refused with the tool's name.
func TestParseHostInput(t *testing.T) {
	for _, tt := range []struct{ tool, input string }{
		{"HostBash", `{}`}, {"HostBash", `{"command":"ls","timeout":600001}`}, {"HostBash", `{"command":"ls","timeout":-1}`},
		{"HostBash", `{"command":"ls","run_in_background":true}`}, {"HostRead", `{"file_path":"a","offset":1.5}`},
		{"HostRead", `{"file_path":"a\u0000b"}`}, {"HostEdit", `{"file_path":"a","old_string":"x","new_string":"x"}`},
		{"HostEdit", `{"file_path":"a","old_string":"","new_string":"x"}`}, {"HostGlob", `{"pattern":"{a,{b}}"}`},
		{"HostGlob", `{"pattern":"[a"}`}, {"HostGrep", `{"pattern":"("}`}, {"HostGrep", `{"pattern":"a","output_mode":"all"}`},
		{"HostGrep", `{"pattern":"` + strings.Repeat("a", HostMaxPattern+1) + `"}`}, {"HostNope", `{}`}, {"HostRead", `{"file_path":"a"} {}`},
		{"HostBash", `{"command":"` + strings.Repeat("a", HostBashMaxCommand+1) + `"}`},
	} {
		if _, err := ParseHostInput(tt.tool, json.RawMessage(tt.input)); err == nil || !strings.Contains(err.Error(), tt.tool) {
			t.Errorf("%s %s: %v, want an error naming the tool", tt.tool, clipTest(tt.input), err)
		}
	}
}

func clipTest(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// FuzzParseHostInput: no input of any tool panics the parser, and one it accepts is a JSON object.
func FuzzParseHostInput(f *testing.F) {
	for _, s := range []string{`{"command":"ls"}`, `{"file_path":"a","offset":2,"limit":3}`, `{"file_path":"a","content":"x"}`,
		`{"file_path":"a","old_string":"x","new_string":"y","replace_all":true}`, `{"pattern":"**/*.{go,md}","path":"src"}`,
		`{"pattern":"a+","glob":"[!x]*","output_mode":"count","-i":true,"head_limit":3}`} {
		for i := range 6 {
			f.Add(i, s)
		}
	}
	tools := []string{"HostBash", "HostRead", "HostWrite", "HostEdit", "HostGlob", "HostGrep"}
	f.Fuzz(func(t *testing.T, i int, input string) {
		tool := tools[(i%6+6)%6]
		if _, err := ParseHostInput(tool, json.RawMessage(input)); err == nil && !json.Valid([]byte(input)) {
			t.Fatalf("%s accepted invalid JSON %q", tool, input)
		}
	})
}

// FuzzGlobRegexp: no pattern panics the compiler; a pattern without glob syntax matches itself exactly.
func FuzzGlobRegexp(f *testing.F) {
	for _, s := range []string{"*.go", "**/*.{go,md}", "src/**", "a?c", "[!a-c]x", "{a,b", "[", "a]b", "ü*.txt"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, pattern string) {
		re, err := globRegexp(pattern)
		if err != nil {
			return
		}
		lit := strings.TrimPrefix(pattern, "./")
		if strings.ContainsAny(pattern, "*?[]{},") {
			return
		}
		if !re.MatchString(lit) {
			t.Fatalf("%q does not match itself (%s)", pattern, re)
		}
		if re.MatchString(lit + "/x") {
			t.Fatalf("%q matches beyond its end", pattern)
		}
	})
}

// TestHostGrepCountBounded: a pattern matching the empty string counts (and so allocates) at most
// hostMaxCount matches of a file, not one per byte; content mode goes line by line.
func TestHostGrepCountBounded(t *testing.T) {
	root, _, srv := hostFixture(t)
	if err := os.WriteFile(filepath.Join(root, "n.txt"), []byte(strings.Repeat("\n", 1<<20)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := callHost(t, srv, "HostGrep", `{"pattern":"x?","output_mode":"count"}`)
	if err != nil || !strings.Contains(out, "n.txt:100000+\n") {
		t.Fatalf("count of an empty-matching pattern: %q, %v", out, err)
	}
	out, err = callHost(t, srv, "HostGrep", `{"pattern":"^$","glob":"n.txt","output_mode":"content","-n":true,"head_limit":3}`)
	if err != nil || !strings.Contains(out, "n.txt:3:\n") || strings.Contains(out, "n.txt:4:") {
		t.Fatalf("content: %q, %v", out, err)
	}
}
