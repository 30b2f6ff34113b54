package isolate

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// screen collects what a terminal writes, so a test can wait for a piece of output.
type screen struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	more chan struct{} // closed and replaced on every write
	done chan struct{} // closed at the end of the output
}

func watchTerminal(term *Terminal) *screen {
	s := &screen{more: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		b := make([]byte, 4096)
		for {
			n, err := term.ReadOutput(b)
			s.mu.Lock()
			s.buf.Write(b[:n])
			close(s.more)
			s.more = make(chan struct{})
			s.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return s
}

// waitFor waits until the output (from offset from) contains want and returns the offset after it.
func (s *screen) waitFor(t *testing.T, from int, want string) int {
	t.Helper()
	deadline := time.After(30 * time.Second) // a hang guard, not an assertion on speed
	for {
		s.mu.Lock()
		out, more := s.buf.String(), s.more
		s.mu.Unlock()
		if i := strings.Index(out[min(from, len(out)):], want); i >= 0 {
			return from + i + len(want)
		}
		select {
		case <-more:
		case <-s.done:
			s.mu.Lock()
			out = s.buf.String()
			s.mu.Unlock()
			if i := strings.Index(out[min(from, len(out)):], want); i >= 0 {
				return from + i + len(want)
			}
			t.Fatalf("terminal ended without %q; output:\n%s", want, out)
		case <-deadline:
			t.Fatalf("no %q in the terminal's output:\n%s", want, out)
		}
	}
}

func startTerminal(t *testing.T, s *Sandbox, spec ProcessSpec, cols, rows int) (*Terminal, *screen) {
	t.Helper()
	term, err := s.StartTerminal(context.Background(), spec, cols, rows)
	if err != nil {
		t.Fatalf("StartTerminal: %v", err)
	}
	t.Cleanup(func() { _ = term.Close() })
	return term, watchTerminal(term)
}

func typeIn(t *testing.T, term *Terminal, s string) {
	t.Helper()
	if _, err := term.PTY.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
}

// ttyNr is field 7 of /proc/PID/stat: the controlling terminal's device number, 0 for none.
func ttyNr(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	n, err := strconv.Atoi(f[4])
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestStartTerminal(t *testing.T) {
	for _, mode := range []struct {
		name     string
		insecure bool
	}{{"bwrap", false}, {"insecure", true}} {
		t.Run(mode.name, func(t *testing.T) {
			s, _ := newSandbox(t, mode.insecure)

			t.Run("output, size and exit", func(t *testing.T) {
				term, scr := startTerminal(t, s, ProcessSpec{Command: `test -t 0 && test -t 1 && echo is-a-tty; stty size; exit 3`}, 80, 24)
				scr.waitFor(t, 0, "is-a-tty")
				scr.waitFor(t, 0, "24 80")
				if code := waitExit(t, term.Process); code != 3 {
					t.Fatalf("exit = %d, want 3", code)
				}
				<-scr.done
			})

			t.Run("interactive shell: resize, Ctrl-C, job control", func(t *testing.T) {
				term, scr := startTerminal(t, s, ProcessSpec{Command: "sh", Args: []string{"-i"}, Env: map[string]string{"PS1": "$ "}}, 80, 24)
				// The quotes keep the echo of the typed line from matching what the command prints.
				typeIn(t, term, "echo he''llo\n")
				at := scr.waitFor(t, 0, "hello")
				if err := term.Resize(132, 43); err != nil {
					t.Fatal(err)
				}
				typeIn(t, term, "stty size\n")
				at = scr.waitFor(t, at, "43 132")
				// The job itself says when it runs (then it is the foreground group), so Ctrl-C cannot reach the
				// shell before the job started.
				typeIn(t, term, "sh -c 'echo sle\"\"eping; exec sleep 100'\n")
				at = scr.waitFor(t, at, "sleeping")
				typeIn(t, term, "\x03") // Ctrl-C: SIGINT for the foreground job; without it sleep lasts 100 s
				typeIn(t, term, "echo ali''ve\n")
				at = scr.waitFor(t, at, "alive")
				if mode.insecure {
					typeIn(t, term, "exit 0\n")
				} else {
					// Inside the boundary: the sandbox's user, hostname and PID namespace.
					typeIn(t, term, "echo id=$(id -u) host=$(hostname) procs=$(ls -d /proc/[0-9]* | wc -l) end\n")
					scr.waitFor(t, at, "id="+strconv.Itoa(SandboxUID)+" host="+Hostname+" procs=")
					typeIn(t, term, "exit 0\n")
				}
				if code := waitExit(t, term.Process); code != 0 {
					t.Fatalf("exit = %d, want 0", code)
				}
			})

			t.Run("only the tenant's processes have the terminal", func(t *testing.T) {
				term, scr := startTerminal(t, s, ProcessSpec{Command: `echo rea''dy; exec sleep 100`}, 80, 24)
				scr.waitFor(t, 0, "ready")
				// The process the runner started (the outer bwrap, or the setsid wrapper in insecure mode)
				// has no controlling terminal: the pseudo-terminal belongs to the session made inside.
				if n := ttyNr(t, term.Pid()); n != 0 {
					t.Errorf("the started process has controlling terminal %#x, want none", n)
				}
				if err := term.Kill(); err != nil {
					t.Fatal(err)
				}
				waitExit(t, term.Process)
				<-scr.done
			})

			t.Run("bounds", func(t *testing.T) {
				for _, size := range [][2]int{{0, 24}, {80, 0}, {MaxTerminalCols + 1, 24}, {80, MaxTerminalRows + 1}, {-1, -1}} {
					if _, err := s.StartTerminal(context.Background(), ProcessSpec{Command: "true"}, size[0], size[1]); err == nil {
						t.Errorf("size %v accepted", size)
					}
				}
			})
		})
	}
}
