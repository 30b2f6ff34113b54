package devstack_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/creack/pty"

	"github.com/warren-mesh/warren/internal/termtest"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner"
	"github.com/warren-mesh/warren/runner/isolate"
	warren "github.com/warren-mesh/warren/sdk"
)

// A terminal through the edge with the SDK, the runner under bubblewrap: typed commands and their output,
// resize, Ctrl-C, the boundary of exec, detach and re-attach with replay, typed refusals.
func TestTerminalThroughTheEdge(t *testing.T) {
	st := startStack(t)
	ctx := ctxT(t)
	sb := client(t, st, "term").Sandbox()
	in, err := sb.CreateTerminal(ctx, warren.TerminalRequest{Cols: 80, Rows: 24, Env: map[string]string{"PS1": "$ "}})
	if err != nil {
		t.Fatal(err)
	}
	tc, err := sb.AttachTerminal(ctx, in.ID)
	if err != nil {
		t.Fatal(err)
	}
	scr := termtest.Watch(tc)
	// Quotes split the words, so the terminal's echo of the typed line does not match the output.
	termtest.Type(t, tc, "echo h''i\n")
	scr.WaitFor(t, "hi\r\n")
	if err := tc.Resize(132, 50); err != nil {
		t.Fatal(err)
	}
	termtest.Type(t, tc, "stty size\n")
	scr.WaitFor(t, "50 132")
	termtest.Type(t, tc, "sh -c 'echo sle\"\"eping; exec sleep 100'\n")
	scr.WaitFor(t, "sleeping")
	termtest.Type(t, tc, "\x03") // SIGINT for the foreground job: without it the next line waits 100 s
	termtest.Type(t, tc, "echo interr''upted\n")
	scr.WaitFor(t, "interrupted")

	// Isolated like exec: the sandbox's uid and hostname, a PID namespace of its own (bwrap is its init,
	// none of the host's processes, this test's included, is visible), no host home.
	self := strconv.Itoa(os.Getpid())
	termtest.Type(t, tc, "echo uid=$(id -u) host=$(hostname) init=$(cat /proc/1/comm) procs=$(ls -d /proc/[0-9]* | wc -l) me=$(cat /proc/"+self+"/comm 2>/dev/null || echo none) root=$(ls /root 2>&1 | head -c 20) e''nd\n")
	scr.WaitFor(t, "uid="+strconv.Itoa(isolate.SandboxUID)+" host="+isolate.Hostname+" init=bwrap procs=")
	scr.WaitFor(t, "end")
	line := scr.String()[strings.LastIndex(scr.String(), "uid="):]
	if !strings.Contains(line, "root=ls: ") {
		t.Errorf("the sandbox sees /root: %q", line)
	}
	procs, _ := strconv.Atoi(strings.Fields(line[strings.Index(line, "procs=")+6:])[0])
	if procs < 3 || procs > 12 {
		t.Errorf("the terminal sees %d processes: %q", procs, line)
	}
	if os.Getpid() > 20 && !strings.Contains(line, "me=none") { // pids this small exist in the sandbox too
		t.Errorf("the terminal sees the test's process %s: %q", self, line)
	}

	// Disconnect, output while nobody is attached, re-attach: the replay has both, then it is live.
	termtest.Type(t, tc, "(sleep 1; echo wh''ile-away) &\n")
	if err := tc.Close(); err != nil {
		t.Fatal(err)
	}
	_ = scr.Wait(t)
	tc2, err := sb.AttachTerminal(ctx, in.ID)
	if err != nil {
		t.Fatal(err)
	}
	scr2 := termtest.Watch(tc2)
	scr2.WaitFor(t, "hi\r\n")
	scr2.WaitFor(t, "50 132")
	scr2.WaitFor(t, "while-away")
	termtest.Type(t, tc2, "echo ba''ck\n")
	scr2.WaitFor(t, "back")
	termtest.Type(t, tc2, "exit 9\n")
	if err := scr2.Wait(t); err != io.EOF {
		t.Fatalf("end = %v", err)
	}
	if code, ok := tc2.ExitCode(); !ok || code != 9 {
		t.Fatalf("exit = %d, %v", code, ok)
	}
	got, err := sb.Terminal(ctx, in.ID)
	if err != nil || got.Status != wire.ProcExited || *got.ExitCode != 9 {
		t.Fatalf("terminal = %+v, %v", got, err)
	}

	// Refusals, typed, through the edge.
	if _, err := sb.CreateTerminal(ctx, warren.TerminalRequest{Cols: 5000, Rows: 10}); !warren.IsCode(err, warren.CodeInvalidArgument) {
		t.Errorf("size out of bounds: %v", err)
	}
	if _, err := sb.AttachTerminal(ctx, "nope"); !warren.IsCode(err, warren.CodeNotFound) {
		t.Errorf("attach to unknown: %v", err)
	}
	for range runner.MaxTerminals {
		if _, err := sb.CreateTerminal(ctx, warren.TerminalRequest{Command: "sleep 1000"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := sb.CreateTerminal(ctx, warren.TerminalRequest{Command: "sleep 1000"}); !warren.IsCode(err, warren.CodeResourceExhausted) {
		t.Errorf("terminal past the limit: %v", err)
	}
}

// warren exec -t with the real binary on a local pseudo-terminal: it sizes the remote terminal from the
// local one, follows a window change (SIGWINCH), sends Ctrl-C as a byte (raw mode: the local terminal does
// not turn it into a signal for warren), and exits with the remote exit code. Without a local terminal,
// piped input is sent as typed.
func TestExecTerminalCLI(t *testing.T) {
	st := startStack(t)
	env := append(os.Environ(), "WARREN_URL="+st.URL(), "WARREN_TOKEN="+mint(t, st, "cli-term"))

	cmd := exec.Command(binary, "exec", "-t", "-env", "PS1=$ ", "--", "sh", "-i")
	cmd.Env = env
	local, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: 91, Rows: 27})
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	scr := termtest.Watch(local)
	termtest.Type(t, local, "stty size\r")
	scr.WaitFor(t, "27 91")
	if err := pty.Setsize(local, &pty.Winsize{Cols: 101, Rows: 33}); err != nil {
		t.Fatal(err)
	}
	// The resize travels on its own; poll with stty until it has arrived.
	for i := 0; !strings.Contains(scr.String(), "33 101"); i++ {
		if i == 200 {
			t.Fatalf("the window change did not reach the sandbox:\n%s", scr.String())
		}
		termtest.Type(t, local, "stty size; echo ro''und-"+strconv.Itoa(i)+"\r")
		scr.WaitFor(t, "round-"+strconv.Itoa(i)+"\r\n")
	}
	termtest.Type(t, local, "sh -c 'echo sle\"\"eping; exec sleep 100'\r")
	scr.WaitFor(t, "sleeping")
	termtest.Type(t, local, "\x03")
	termtest.Type(t, local, "echo sti''ll-here\r")
	scr.WaitFor(t, "still-here")
	termtest.Type(t, local, "exit 3\r")
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("warren exec -t: %v, want exit status 3; output:\n%s", err, scr.String())
	}

	// Piped input: no raw mode, the bytes go as they are.
	cmd = exec.Command(binary, "exec", "-t", "--", "sh", "-i")
	cmd.Env = env
	cmd.Stdin = strings.NewReader("echo pi''ped\nexit 4\n")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	if !errors.As(err, &ee) || ee.ExitCode() != 4 || !strings.Contains(out.String(), "piped") {
		t.Fatalf("piped: %v; stdout %q; stderr %q", err, out.String(), errb.String())
	}
}
