package isolate

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func startProcess(t testing.TB, s *Sandbox, ctx context.Context, spec ProcessSpec) *Process {
	t.Helper()
	p, err := s.Start(ctx, spec)
	if err != nil {
		t.Fatalf("Start(%q): %v", spec.Command, err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func waitExit(t testing.TB, p *Process) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	code, err := p.Wait(ctx)
	if err != nil {
		t.Fatalf("process did not exit: %v", err)
	}
	return code
}

// eachMode runs f as a subtest under bubblewrap and in insecure mode, with a sandbox of that mode.
func eachMode(t *testing.T, f func(t *testing.T, s *Sandbox, insecure bool)) {
	for _, mode := range []struct {
		name     string
		insecure bool
	}{{"bwrap", false}, {"insecure", true}} {
		t.Run(mode.name, func(t *testing.T) {
			s, _ := newSandbox(t, mode.insecure)
			f(t, s, mode.insecure)
		})
	}
}

func TestStart(t *testing.T) {
	eachMode(t, func(t *testing.T, s *Sandbox, insecure bool) {

		t.Run("pipes", func(t *testing.T) {
			p := startProcess(t, s, context.Background(), ProcessSpec{
				Command: `while read -r line; do echo "got $line"; echo "err $line" >&2; done; exit 7`,
			})
			out, errs := bufio.NewReader(p.Stdout), bufio.NewReader(p.Stderr)
			for _, in := range []string{"one", "two"} {
				if _, err := fmt.Fprintln(p.Stdin, in); err != nil {
					t.Fatal(err)
				}
				if l, err := out.ReadString('\n'); err != nil || l != "got "+in+"\n" {
					t.Fatalf("stdout line = %q, %v", l, err)
				}
				if l, err := errs.ReadString('\n'); err != nil || l != "err "+in+"\n" {
					t.Fatalf("stderr line = %q, %v", l, err)
				}
			}
			p.Stdin.Close()
			if code := waitExit(t, p); code != 7 {
				t.Fatalf("exit = %d, want 7", code)
			}
			if rest, _ := io.ReadAll(out); len(rest) != 0 {
				t.Fatalf("unexpected output %q", rest)
			}
			if got := p.ExitError(); got != "exit status 7" {
				t.Errorf("ExitError = %q", got)
			}
		})

		t.Run("env", func(t *testing.T) {
			t.Setenv("WARREN_ISOLATE_TEST_SECRET", "leak")
			p := startProcess(t, s, context.Background(), ProcessSpec{
				Command: "/bin/sh", Args: []string{"-c", `echo "$HOME|$FOO|$WARREN_ISOLATE_TEST_SECRET"`},
				Env: map[string]string{"HOME": "/elsewhere", "FOO": "bar"},
			})
			b, _ := io.ReadAll(p.Stdout)
			if string(b) != "/elsewhere|bar|\n" {
				t.Fatalf("output %q", b)
			}
		})

		t.Run("close kills the tree", func(t *testing.T) {
			marker := fmt.Sprintf("86400.%d", rand.Uint32())
			p := startProcess(t, s, context.Background(), ProcessSpec{
				Command: fmt.Sprintf("sleep %s & sleep %s & echo ready; wait", marker, marker),
			})
			if l, err := bufio.NewReader(p.Stdout).ReadString('\n'); err != nil || l != "ready\n" {
				t.Fatalf("first line %q, %v", l, err)
			}
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
			select {
			case <-p.Done():
			default:
				t.Fatal("Close returned before the process was reaped")
			}
			if !insecure {
				// Under bwrap, Close returns once the sandbox's PID namespace is gone.
				if pids := findProcesses("sleep " + marker); len(pids) > 0 {
					t.Errorf("processes %v still alive when Close returned", pids)
				}
			}
			waitNoProcess(t, "sleep "+marker)
			if err := p.Close(); err != nil {
				t.Fatalf("second Close: %v", err)
			}
			if _, err := p.Stdin.Write([]byte("x")); err == nil {
				t.Fatal("write to a closed process succeeded")
			}
		})

		t.Run("ctx ends the process", func(t *testing.T) {
			marker := fmt.Sprintf("86400.%d", rand.Uint32())
			ctx, cancel := context.WithCancel(context.Background())
			p := startProcess(t, s, ctx, ProcessSpec{Command: "sleep", Args: []string{marker}})
			cancel()
			if code := waitExit(t, p); code != 128+9 {
				t.Errorf("exit after cancel = %d, want %d", code, 128+9)
			}
			waitNoProcess(t, "sleep "+marker)
		})

		t.Run("cancel right after start never leaks", func(t *testing.T) {
			// A kill landing between bwrap's clone and its child's parent-death signal used to leave
			// the sandbox running (about 1 in 50); a hundred immediate cancels catch that nearly always.
			marker := fmt.Sprintf("86400.%d", rand.Uint32())
			for range 100 {
				ctx, cancel := context.WithCancel(context.Background())
				p := startProcess(t, s, ctx, ProcessSpec{Command: "sleep", Args: []string{marker}})
				cancel()
				waitExit(t, p)
			}
			waitNoProcess(t, "sleep "+marker)
		})

		t.Run("invalid spec", func(t *testing.T) {
			if _, err := s.Start(context.Background(), ProcessSpec{}); !errors.Is(err, ErrInvalidSpec) {
				t.Errorf("empty command: %v", err)
			}
			if _, err := s.Start(context.Background(), ProcessSpec{Command: "true", Env: map[string]string{"A-B": "x"}}); !errors.Is(err, ErrInvalidSpec) {
				t.Errorf("bad env: %v", err)
			}
		})
	})
}

func TestStartBinds(t *testing.T) {
	s, ws := newSandbox(t, false)
	tool := filepath.Join(t.TempDir(), "tool")
	if err := os.WriteFile(tool, []byte("#!/bin/sh\necho tool \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	if err := os.WriteFile(filepath.Join(home, "old"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	if s.cfg.HostUID != 0 { // the runner gives the agent's home to the sandbox the same way
		if err := Chown(home, int(s.cfg.HostUID), int(s.cfg.HostGID)); err != nil {
			t.Fatal(err)
		}
	}
	p := startProcess(t, s, context.Background(), ProcessSpec{
		Command: "/opt/warren/tool", Args: []string{"a b"},
		Env:   map[string]string{"HOME": "/home/sandbox"},
		Binds: []Bind{{Host: tool, Sandbox: "/opt/warren/tool"}, {Host: home, Sandbox: "/home/sandbox", Writable: true}},
	})
	b, _ := io.ReadAll(p.Stdout)
	if string(b) != "tool a b\n" {
		t.Fatalf("bound program printed %q", b)
	}

	script := `cat "$HOME/old"; echo new > "$HOME/new"; pwd; ` +
		`if echo x > /opt/warren/tool 2>/dev/null; then echo WROTE-RO; fi; ` +
		`if echo x > /opt/other 2>/dev/null; then echo WROTE-ROOT; fi`
	p = startProcess(t, s, context.Background(), ProcessSpec{
		Command: script,
		Env:     map[string]string{"HOME": "/home/sandbox"},
		Binds:   []Bind{{Host: tool, Sandbox: "/opt/warren/tool"}, {Host: home, Sandbox: "/home/sandbox", Writable: true}},
	})
	b, _ = io.ReadAll(p.Stdout)
	if got := string(b); got != "kept/workspace\n" {
		t.Errorf("output %q, want the home file, the workspace as cwd, and no write outside the writable binds", got)
	}
	if got, err := os.ReadFile(filepath.Join(home, "new")); err != nil || string(got) != "new\n" {
		t.Errorf("file written in the writable bind: %q, %v", got, err)
	}
	if got, _ := os.ReadFile(tool); !strings.Contains(string(got), "echo tool") {
		t.Errorf("read-only bind was modified: %q", got)
	}
	if _, err := os.Stat(filepath.Join(ws, "new")); err == nil {
		t.Error("the home file landed in the workspace")
	}
}

func TestValidateBinds(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		name string
		bind Bind
		ok   bool
	}{
		{"ok", Bind{Host: dir, Sandbox: "/home/sandbox"}, true},
		{"tmp", Bind{Host: dir, Sandbox: "/tmp/x"}, true},
		{"relative host", Bind{Host: "rel", Sandbox: "/x"}, false},
		{"missing host", Bind{Host: filepath.Join(dir, "missing"), Sandbox: "/x"}, false},
		{"relative target", Bind{Host: dir, Sandbox: "x"}, false},
		{"unclean target", Bind{Host: dir, Sandbox: "/opt/../usr"}, false},
		{"root", Bind{Host: dir, Sandbox: "/"}, false},
		{"workspace", Bind{Host: dir, Sandbox: "/workspace"}, false},
		{"under workspace", Bind{Host: dir, Sandbox: "/workspace/x"}, false},
		{"system dir", Bind{Host: dir, Sandbox: "/usr/local/bin/x"}, false},
		{"proc", Bind{Host: dir, Sandbox: "/proc/1"}, false},
		{"etc", Bind{Host: dir, Sandbox: "/etc"}, false},
	} {
		err := validateBinds([]Bind{tt.bind})
		if (err == nil) != tt.ok {
			t.Errorf("%s: validateBinds(%+v) = %v, want ok=%v", tt.name, tt.bind, err, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("%s: %v does not wrap ErrInvalidSpec", tt.name, err)
		}
	}
}

func TestBwrapArgsBinds(t *testing.T) {
	l := boxLayout{workspace: "/ws", binds: []Bind{{Host: "/h/cli", Sandbox: "/opt/cli"}, {Host: "/h/home", Sandbox: "/home/sandbox", Writable: true}}}
	got := strings.Join(bwrapArgs(l, ".", nil, []string{"x"}), " ")
	want := "--bind /ws /workspace --ro-bind /h/cli /opt/cli --bind /h/home /home/sandbox --remount-ro /"
	if !strings.Contains(got, want) {
		t.Errorf("bwrap args %q\nlack %q", got, want)
	}
}
