package runner_test

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner"
)

func TestExecSync(t *testing.T) {
	h := startRunner(t)
	if err := os.MkdirAll(filepath.Join(h.ws, "sub", "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		req  wire.ExecRequest
		want wire.ExecResult
	}{
		{"streams and exit code", wire.ExecRequest{Command: "echo out; echo err >&2; exit 3"}, wire.ExecResult{Stdout: "out\n", Stderr: "err\n", ExitCode: 3}},
		{"stdin", wire.ExecRequest{Command: "tr a-z A-Z", Stdin: "hello"}, wire.ExecResult{Stdout: "HELLO"}},
		{"env", wire.ExecRequest{Command: `echo "$FOO $HOME $TERM $USER"`, Env: map[string]string{"FOO": "bar baz"}}, wire.ExecResult{Stdout: "bar baz /workspace dumb sandbox\n"}},
		{"cwd", wire.ExecRequest{Command: "pwd", Cwd: "sub/dir"}, wire.ExecResult{Stdout: "/workspace/sub/dir\n"}},
		{"cwd dot-dot inside", wire.ExecRequest{Command: "pwd", Cwd: "sub/dir/.."}, wire.ExecResult{Stdout: "/workspace/sub\n"}},
		{"default cwd", wire.ExecRequest{Command: "pwd"}, wire.ExecResult{Stdout: "/workspace\n"}},
		{"args run directly", wire.ExecRequest{Command: "printf", Args: []string{"[%s]", "a b", "$HOME", "*"}}, wire.ExecResult{Stdout: "[a b][$HOME][*]"}},
		{"missing program", wire.ExecRequest{Command: "no-such-program", Args: []string{"x"}}, wire.ExecResult{ExitCode: 127}},
		{"invalid UTF-8 replaced", wire.ExecRequest{Command: `printf 'a\377b\303'`}, wire.ExecResult{Stdout: "a\uFFFDb\uFFFD"}},
		{"multibyte kept", wire.ExecRequest{Command: `printf 'h\303\251'`}, wire.ExecResult{Stdout: "hé"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := h.exec(t, tt.req)
			if got.Stdout != tt.want.Stdout || got.ExitCode != tt.want.ExitCode || got.TimedOut || got.Truncated ||
				(tt.want.Stderr != "" && got.Stderr != tt.want.Stderr) {
				t.Fatalf("exec = %+v, want %+v", got, tt.want)
			}
			if got.DurationMs < 0 {
				t.Fatalf("durationMs = %d", got.DurationMs)
			}
		})
	}
}

func TestExecRejects(t *testing.T) {
	h := startRunner(t)
	if err := os.WriteFile(filepath.Join(h.ws, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		body string
		code wire.Code
	}{
		{"not JSON", `{"command":`, wire.InvalidArgument},
		{"no command", `{"args":["x"]}`, wire.InvalidArgument},
		{"bad env name", `{"command":"true","env":{"1BAD":"x"}}`, wire.InvalidArgument},
		{"env name with dash", `{"command":"true","env":{"A-B":"x"}}`, wire.InvalidArgument},
		{"negative timeout", `{"command":"true","timeoutMs":-5}`, wire.InvalidArgument},
		{"cwd escapes", `{"command":"true","cwd":"../x"}`, wire.PermissionDenied},
		{"cwd absolute", `{"command":"true","cwd":"/etc"}`, wire.PermissionDenied},
		{"cwd missing", `{"command":"true","cwd":"nope"}`, wire.NotFound},
		{"cwd is a file", `{"command":"true","cwd":"file"}`, wire.InvalidArgument},
		{"NUL in command", `{"command":"echo \u0000"}`, wire.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, accept := range []string{"", "text/event-stream"} {
				resp := h.do(t, http.MethodPost, "/v1/sandbox/exec", strings.NewReader(tt.body), "Accept", accept)
				wantError(t, resp, tt.code)
			}
		})
	}
	t.Run("body too large", func(t *testing.T) {
		body := `{"command":"true","stdin":"` + strings.Repeat("x", 9<<20) + `"}`
		resp := h.do(t, http.MethodPost, "/v1/sandbox/exec", strings.NewReader(body))
		wantError(t, resp, wire.PayloadTooLarge)
	})
	t.Run("a bad member is named in details.field", func(t *testing.T) {
		for body, field := range map[string]string{
			`{"command":"true","command":"false"}`: "/command",
			`{"command":"true","args":[1]}`:        "/args/0",
		} {
			we := wantError(t, h.do(t, http.MethodPost, "/v1/sandbox/exec", strings.NewReader(body)), wire.InvalidArgument)
			if we.Details["field"] != field || !strings.HasPrefix(we.Message, "exec request: ") {
				t.Errorf("%s: %q, details %v", body, we.Message, we.Details)
			}
		}
	})
	t.Run("unknown fields are ignored", func(t *testing.T) {
		resp := h.do(t, http.MethodPost, "/v1/sandbox/exec", strings.NewReader(`{"command":"echo ok","future":1}`))
		var res wire.ExecResult
		decode(t, resp, http.StatusOK, &res)
		if res.Stdout != "ok\n" {
			t.Fatalf("stdout %q", res.Stdout)
		}
	})
}

// TestExecStreamChunksBeforeExit proves output is forwarded while the command runs: the command prints,
// then waits for a file that the test creates only after it has received the first chunk. A runner that
// buffered until exit would deadlock into the timeout.
func TestExecStreamChunksBeforeExit(t *testing.T) {
	h := startRunner(t)
	resp := h.doJSON(t, http.MethodPost, "/v1/sandbox/exec", wire.ExecRequest{
		Command:   `echo first; echo warn >&2; while [ ! -e go ]; do sleep 0.02; done; echo second; exit 4`,
		TimeoutMs: 30000,
	}, "Accept", "text/event-stream")
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	sse := newSSEReader(resp.Body)
	var stdout, stderr strings.Builder
	released := false
	for {
		ev, err := sse.next()
		if err != nil {
			t.Fatalf("stream ended without exit: %v (stdout %q)", err, stdout.String())
		}
		switch ev.name {
		case wire.EventStdout, wire.EventStderr:
			var c wire.ExecChunk
			if err := json.Unmarshal([]byte(ev.data), &c); err != nil {
				t.Fatal(err)
			}
			if ev.name == wire.EventStdout {
				stdout.WriteString(c.Data)
			} else {
				stderr.WriteString(c.Data)
			}
			if !released && strings.Contains(stdout.String(), "first\n") {
				released = true
				if err := os.WriteFile(filepath.Join(h.ws, "go"), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		case wire.EventExit:
			if !released {
				t.Fatal("exit arrived before the first chunk")
			}
			var res wire.ExecResult
			if err := json.Unmarshal([]byte(ev.data), &res); err != nil {
				t.Fatal(err)
			}
			if res.ExitCode != 4 || res.TimedOut || res.Stdout != "" || res.Stderr != "" {
				t.Fatalf("exit = %+v", res)
			}
			if stdout.String() != "first\nsecond\n" || stderr.String() != "warn\n" {
				t.Fatalf("stdout %q stderr %q", stdout.String(), stderr.String())
			}
			if _, err := sse.next(); err != io.EOF {
				t.Fatalf("events after exit: %v", err)
			}
			return
		default:
			t.Fatalf("unexpected event %q: %s", ev.name, ev.data)
		}
	}
}

func TestExecTimeoutKillsTree(t *testing.T) {
	h := startRunner(t)
	marker := fmt.Sprintf("86400.%d", rand.Uint32())
	start := time.Now()
	res := h.exec(t, wire.ExecRequest{
		Command: fmt.Sprintf("echo before; sleep %s & (sleep %s; echo late) & sleep %s", marker, marker, marker),
		// The timeout includes entering the sandbox (its namespaces, network and cgroup), which takes
		// well over 500 ms on a loaded 2-core machine: long enough that "before" is always printed.
		TimeoutMs: 3000,
	})
	if !res.TimedOut || res.ExitCode != -1 || res.Stdout != "before\n" {
		t.Fatalf("result %+v, want timedOut with exit -1", res)
	}
	if time.Since(start) > 30*time.Second { // a hang, not a speed check
		t.Fatalf("timeout took %s", time.Since(start))
	}
	waitFor(t, "every process of the command to die", func() bool { return len(processesMatching("sleep "+marker)) == 0 })

	t.Run("capped by MaxExecTimeout", func(t *testing.T) {
		h := startRunner(t, func(c *runner.Config) {
			c.MaxExecTimeout = 300 * time.Millisecond
			c.DefaultExecTimeout = 300 * time.Millisecond
		})
		res := h.exec(t, wire.ExecRequest{Command: "sleep 30", TimeoutMs: 3_600_000})
		if !res.TimedOut {
			t.Fatalf("result %+v, want timed out at the cap", res)
		}
	})
}

func TestExecOutputCaps(t *testing.T) {
	h := startRunner(t, func(c *runner.Config) { c.OutputCap = 1000; c.StreamOutputCap = 3000 })
	t.Run("sync", func(t *testing.T) {
		res := h.exec(t, wire.ExecRequest{Command: "head -c 100000 /dev/zero | tr '\\0' a; echo done >&2"})
		if len(res.Stdout) != 1000 || !res.Truncated || res.Stderr != "done\n" || res.ExitCode != 0 {
			t.Fatalf("stdout %d bytes, truncated %v, stderr %q, exit %d", len(res.Stdout), res.Truncated, res.Stderr, res.ExitCode)
		}
	})
	t.Run("sync cut inside a character", func(t *testing.T) {
		res := h.exec(t, wire.ExecRequest{Command: "printf a; for i in $(seq 600); do printf '\\303\\251'; done"})
		if !res.Truncated || len(res.Stdout) != 999 || !strings.HasSuffix(res.Stdout, "é") || strings.ContainsRune(res.Stdout, '\uFFFD') {
			t.Fatalf("stdout %d bytes %q...", len(res.Stdout), res.Stdout[len(res.Stdout)-4:])
		}
	})
	t.Run("stream", func(t *testing.T) {
		resp := h.doJSON(t, http.MethodPost, "/v1/sandbox/exec", wire.ExecRequest{Command: "head -c 100000 /dev/zero | tr '\\0' a"}, "Accept", "text/event-stream")
		sse := newSSEReader(resp.Body)
		total := 0
		for {
			ev, err := sse.next()
			if err != nil {
				t.Fatalf("stream ended without exit: %v", err)
			}
			if ev.name == wire.EventStdout {
				var c wire.ExecChunk
				_ = json.Unmarshal([]byte(ev.data), &c)
				total += len(c.Data)
				continue
			}
			var res wire.ExecResult
			_ = json.Unmarshal([]byte(ev.data), &res)
			if ev.name != wire.EventExit || !res.Truncated || res.ExitCode != 0 || total != 3000 {
				t.Fatalf("event %s %+v after %d bytes; want exit, truncated, 3000 bytes", ev.name, res, total)
			}
			return
		}
	})
}
