package devstack_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warren-mesh/warren/internal/devstack"
)

// TestCLITour follows the README tour with the real binary: mint a token from the data dir, exec, files.
func TestCLITour(t *testing.T) {
	st := startStack(t)
	run := func(stdin string, args ...string) (string, string, int) {
		t.Helper()
		cmd := exec.Command(binary, args...)
		cmd.Env = append(os.Environ(), "WARREN_URL="+st.URL(), "WARREN_DATA_DIR="+st.Config().DataDir)
		if tok := os.Getenv("TOUR_TOKEN"); tok != "" {
			cmd.Env = append(cmd.Env, "WARREN_TOKEN="+tok)
		}
		cmd.Stdin = strings.NewReader(stdin)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatalf("%v: %v", args, err)
		}
		return out.String(), errb.String(), cmd.ProcessState.ExitCode()
	}
	tok, stderr, code := run("", "token", "-user", "alice", "-ai-usd", "5", "-compute", "3600", "-ttl", "1h")
	if code != 0 || strings.Count(tok, ".") != 2 {
		t.Fatalf("warren token: %q %q %d", tok, stderr, code)
	}
	t.Setenv("TOUR_TOKEN", strings.TrimSpace(tok))

	if out, stderr, code := run("", "exec", "--", "echo hi > f && cat f"); out != "hi\n" || code != 0 {
		t.Fatalf("exec: %q %q %d", out, stderr, code)
	}
	if out, _, code := run("", "files", "get", "f"); out != "hi\n" || code != 0 {
		t.Fatalf("files get: %q %d", out, code)
	}
	if _, stderr, code := run("", "exec", "--", "sh", "-c", "echo oops >&2; exit 7"); code != 7 || stderr != "oops\n" {
		t.Fatalf("exit code: %d stderr %q", code, stderr)
	}
	if _, stderr, code := run("from stdin", "files", "put", "-", "docs/in.txt"); code != 0 {
		t.Fatalf("files put: %q %d", stderr, code)
	}
	if out, _, _ := run("", "files", "ls", "docs"); !strings.Contains(out, "in.txt") {
		t.Fatalf("files ls: %q", out)
	}
	if _, _, code := run("", "files", "rm", "docs/in.txt"); code != 0 {
		t.Fatalf("files rm: %d", code)
	}
	if _, stderr, code := run("", "files", "get", "docs/in.txt"); code == 0 || !strings.Contains(stderr, "not") {
		t.Fatalf("get removed file: %q %d", stderr, code)
	}
	cliFilesWatch(t, run, st)
	// A background process: started, fed, waited on, followed, killed, listed.
	id, stderr, code := run("", "proc", "start", "-env", "GREETING=hello", "--", "echo $GREETING; cat; sleep 1000")
	id = strings.TrimSpace(id)
	if code != 0 || id == "" {
		t.Fatalf("proc start: %q %q %d", id, stderr, code)
	}
	if out, stderr, code := run("", "proc", "wait", "-log", "hello", id); out != "hello\n" || code != 0 {
		t.Fatalf("proc wait -log: %q %q %d", out, stderr, code)
	}
	if _, stderr, code := run("fed\n", "proc", "stdin", "-close", id); code != 0 {
		t.Fatalf("proc stdin: %q %d", stderr, code)
	}
	if out, _, code := run("", "proc", "wait", "-log", "^fed$", "-regex", id); out != "fed\n" || code != 0 {
		t.Fatalf("proc wait -regex: %q %d", out, code)
	}
	if _, stderr, code := run("", "proc", "kill", id); code != 0 {
		t.Fatalf("proc kill: %q %d", stderr, code)
	}
	if out, stderr, code := run("", "proc", "logs", "-f", "-offset", "6", id); out != "fed\n" || !strings.Contains(stderr, "exited with 137") || code != 0 {
		t.Fatalf("proc logs -f: %q %q %d", out, stderr, code)
	}
	if out, _, _ := run("", "proc", "ls"); !strings.Contains(out, id) || !strings.Contains(out, "137 (killed)") {
		t.Fatalf("proc ls: %q", out)
	}
	if _, stderr, code := run("", "proc", "signal", id, "SEGV"); code == 0 || !strings.Contains(stderr, "SEGV") {
		t.Fatalf("proc signal SEGV: %q %d", stderr, code)
	}
	if out, _, code := run("", "sessions"); code != 0 || !strings.HasPrefix(out, "ID") {
		t.Fatalf("sessions: %q %d", out, code)
	}
	t.Setenv("TOUR_TOKEN", "garbage")
	if _, stderr, code := run("", "exec", "--", "true"); code == 0 || !strings.Contains(stderr, "warren token") {
		t.Fatalf("bad token message: %q %d", stderr, code)
	}
}

func TestRefusesWithoutBubblewrap(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // no bwrap anywhere
	_, err := devstack.Start(context.Background(), devstack.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Binary: binary})
	if !errors.Is(err, devstack.ErrNoBubblewrap) {
		t.Fatalf("Start without bwrap = %v, want ErrNoBubblewrap", err)
	}
	if !strings.Contains(err.Error(), "-insecure-no-sandbox") {
		t.Fatalf("error does not name the escape hatch: %v", err)
	}
	// With the flag it starts.
	st, err := devstack.Start(context.Background(), devstack.Config{DataDir: filepath.Join(t.TempDir(), "d"), Listen: "127.0.0.1:0", Binary: binary, Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	_ = st.Close()
}

// The billing API is served by warren dev and driven by warren admin with the admin key from the data dir.
func TestAdminCLI(t *testing.T) {
	st := startStack(t)
	run := func(args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(binary, append([]string{"admin"}, args...)...)
		cmd.Env = append(os.Environ(), "WARREN_URL="+st.URL(), "WARREN_DATA_DIR="+st.Config().DataDir)
		out, _ := cmd.CombinedOutput()
		return string(out), cmd.ProcessState.ExitCode()
	}
	if out, code := run("issuers", "ls"); code != 0 || !strings.Contains(out, devstack.DevIssuer) {
		t.Fatalf("issuers ls: %d %s", code, out)
	}
	if out, code := run("quota", "set", devstack.DevIssuer, "-ai-usd", "2", "-compute", "600", "-window", "day", "-max-sessions", "2"); code != 0 {
		t.Fatalf("quota set: %d %s", code, out)
	}
	if out, code := run("quota", "get", devstack.DevIssuer, "-json"); code != 0 || !strings.Contains(out, "2000000") {
		t.Fatalf("quota get: %d %s", code, out)
	}
	// Without the key: unauthenticated.
	cmd := exec.Command(binary, "admin", "-admin-key", "wrong", "issuers", "ls")
	cmd.Env = append(os.Environ(), "WARREN_URL="+st.URL())
	if out, _ := cmd.CombinedOutput(); cmd.ProcessState.ExitCode() == 0 {
		t.Fatalf("a wrong admin key was accepted: %s", out)
	}
}
