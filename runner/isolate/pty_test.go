package isolate

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/warren-mesh/warren/internal/termtest"
	"github.com/warren-mesh/warren/internal/wire"
)

func startTerminal(t *testing.T, s *Sandbox, spec ProcessSpec, cols, rows int) (*Terminal, *termtest.Screen) {
	t.Helper()
	term, err := s.StartTerminal(context.Background(), spec, cols, rows)
	if err != nil {
		t.Fatalf("StartTerminal: %v", err)
	}
	t.Cleanup(func() { _ = term.Close() })
	return term, termtest.Watch(termtest.ReaderFunc(term.ReadOutput))
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
	eachMode(t, func(t *testing.T, s *Sandbox, insecure bool) {

		t.Run("output, size and exit", func(t *testing.T) {
			term, scr := startTerminal(t, s, ProcessSpec{Command: `test -t 0 && test -t 1 && echo is-a-tty; stty size; exit 3`}, 80, 24)
			scr.WaitFor(t, "is-a-tty")
			scr.WaitFor(t, "24 80")
			if code := waitExit(t, term.Process); code != 3 {
				t.Fatalf("exit = %d, want 3", code)
			}
			_ = scr.Wait(t)
		})

		t.Run("interactive shell: resize, Ctrl-C, job control", func(t *testing.T) {
			term, scr := startTerminal(t, s, ProcessSpec{Command: "sh", Args: []string{"-i"}, Env: map[string]string{"PS1": "$ "}}, 80, 24)
			// The quotes keep the echo of the typed line from matching what the command prints.
			termtest.Type(t, term.PTY, "echo he''llo\n")
			scr.WaitFor(t, "hello")
			if err := term.Resize(132, 43); err != nil {
				t.Fatal(err)
			}
			termtest.Type(t, term.PTY, "stty size\n")
			scr.WaitFor(t, "43 132")
			// The job itself says when it runs (then it is the foreground group), so Ctrl-C cannot reach the
			// shell before the job started.
			termtest.Type(t, term.PTY, "sh -c 'echo sle\"\"eping; exec sleep 100'\n")
			scr.WaitFor(t, "sleeping")
			termtest.Type(t, term.PTY, "\x03") // Ctrl-C: SIGINT for the foreground job; without it sleep lasts 100 s
			termtest.Type(t, term.PTY, "echo ali''ve\n")
			scr.WaitFor(t, "alive")
			if insecure {
				termtest.Type(t, term.PTY, "exit 0\n")
			} else {
				// Inside the boundary: the sandbox's user, hostname and PID namespace.
				termtest.Type(t, term.PTY, "echo id=$(id -u) host=$(hostname) procs=$(ls -d /proc/[0-9]* | wc -l) end\n")
				scr.WaitFor(t, "id="+strconv.Itoa(SandboxUID)+" host="+Hostname+" procs=")
				termtest.Type(t, term.PTY, "exit 0\n")
			}
			if code := waitExit(t, term.Process); code != 0 {
				t.Fatalf("exit = %d, want 0", code)
			}
		})

		t.Run("only the tenant's processes have the terminal", func(t *testing.T) {
			term, scr := startTerminal(t, s, ProcessSpec{Command: `echo rea''dy; exec sleep 100`}, 80, 24)
			scr.WaitFor(t, "ready")
			// The process the runner started (the outer bwrap, or the setsid wrapper in insecure mode)
			// has no controlling terminal: the pseudo-terminal belongs to the session made inside.
			if n := ttyNr(t, term.Pid()); n != 0 {
				t.Errorf("the started process has controlling terminal %#x, want none", n)
			}
			if err := term.Kill(); err != nil {
				t.Fatal(err)
			}
			waitExit(t, term.Process)
			_ = scr.Wait(t)
		})

		t.Run("bounds", func(t *testing.T) {
			for _, size := range [][2]int{{0, 24}, {80, 0}, {wire.MaxTermCols + 1, 24}, {80, wire.MaxTermRows + 1}, {-1, -1}} {
				if _, err := s.StartTerminal(context.Background(), ProcessSpec{Command: "true"}, size[0], size[1]); err == nil {
					t.Errorf("size %v accepted", size)
				}
			}
		})
	})
}
