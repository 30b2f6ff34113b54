package devstack_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/devstack"
	"github.com/warren-mesh/warren/internal/testenv"
)

// tourGitAddr is where the tour's git server listens: like gitHostAddr, an address of TEST-NET-2 on the
// host's loopback that the runners' egress allowlist opens (a different one, so the two tests never share it).
const tourGitAddr = "198.51.100.78"

// tourCloneURL is the repository the README's tour clones; the test serves one of its own in its place.
const tourCloneURL = "https://github.com/octocat/Hello-World.git"

// tourBlock returns the lines of the ```sh block under "## Five-minute tour" in README.md, without
// comment lines and trailing comments.
func tourBlock(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "\n## Five-minute tour\n")
	if !ok {
		t.Fatal(`README.md has no "## Five-minute tour"`)
	}
	_, rest, ok = strings.Cut(rest, "\n```sh\n")
	if !ok {
		t.Fatal("the tour has no ```sh block")
	}
	block, _, ok := strings.Cut(rest, "\n```\n")
	if !ok {
		t.Fatal("the tour's block does not end")
	}
	trailing := regexp.MustCompile(`\s+#\s.*$`)
	var lines []string
	for _, l := range strings.Split(block, "\n") {
		l = strings.TrimSpace(trailing.ReplaceAllString(l, ""))
		if l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	return lines
}

// tourAdaptations are what the test changes in the tour's lines, each of which must be found exactly
// once: the edge's address, the clone's URL, and standard input for the interactive lines (a person
// types; the test pipes). Nothing else is changed.
func tourAdaptations(edgeURL, cloneURL string) map[string]func(string) string {
	return map[string]func(string) string{
		"export WARREN_URL=http://127.0.0.1:8080": func(l string) string {
			return strings.Replace(l, "http://127.0.0.1:8080", edgeURL, 1)
		},
		"bin/warren git -path proj clone " + tourCloneURL: func(l string) string {
			return strings.Replace(l, tourCloneURL, cloneURL, 1)
		},
		"bin/warren chat":    func(l string) string { return l + " <<< 'hi'" },
		"bin/warren exec -t": func(l string) string { return l + " <<< 'exit'" },
		// It serves until interrupted: once it has printed the session ID, Ctrl-C (SIGINT) stops it.
		"bin/warren possess -root .": func(l string) string {
			return l + ` > .possess.out & pp=$!; until [ -s .possess.out ] || ! kill -0 $pp 2>/dev/null; do sleep 0.1; done; kill -INT $pp 2>/dev/null; wait $pp`
		},
	}
}

// The README's tour, verbatim but for tourAdaptations, runs line by line in bash from a directory laid out
// as a fresh clone (bin/warren, README.md, examples/, ./.warren the dev stack's data directory) against a
// warren dev with the Claude Code CLI and its scripted model. Every line must exit 0; a background line
// must still run at the end or have exited 0. Before its fixes, `files watch src &` failed (no src), the
// per-user quota line wanted four more flags and `deploy ~/starter` had no directory.
func TestREADMETour(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: starts runner processes under bubblewrap")
	}
	cli := testenv.ClaudeCLI(t)
	addLoopbackAddr(t, tourGitAddr)
	served := t.TempDir()
	testenv.BareRepo(t, served, "Hello-World.git")
	git := testenv.StartGitServer(t, tourGitAddr+":0", served, "")

	dir := t.TempDir()
	st := startStack(t, func(c *devstack.Config) {
		c.DataDir = filepath.Join(dir, ".warren")
		c.ClaudeCLI = cli
		c.RunnerArgs = []string{"-egress-allow", tourGitAddr + "/32"}
		c.DemoPrice = devstack.DemoModelPrice // as warren dev sets it
	})
	layoutClone(t, dir)

	script := tourScript(t, tourBlock(t), tourAdaptations(st.URL(), git.URL+"/Hello-World.git"))
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = dir
	cmd.Env = tourEnv(dir)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// Its own process group, killed whole: background lines must not outlive the test.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	err := cmd.Run()
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	t.Logf("the tour:\n%s", out.String())
	if err != nil || !strings.Contains(out.String(), "TOUR DONE") {
		t.Fatalf("the tour failed: %v", err)
	}
	for _, want := range []string{"hi\n", "src/pkg", "hello.txt", "warren_"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the tour's output lacks %q:\n%s", want, out.String())
		}
	}
	// The scripted model is billed at its demo price: a turn of ~25k tokens costs a fraction of a cent
	// (at claude-opus list prices, what it was billed as before, $0.19 to $0.37).
	costs := regexp.MustCompile(`cost: \$([0-9.]+)`).FindAllStringSubmatch(out.String(), -1)
	if len(costs) == 0 {
		t.Error("the tour printed no cost")
	}
	for _, c := range costs {
		if usd, err := strconv.ParseFloat(c[1], 64); err != nil || usd > 0.01 {
			t.Errorf("a turn cost $%s, more than the demo price allows", c[1])
		}
	}
	if strings.Contains(out.String(), "budget") {
		t.Errorf("the tour ran into a budget:\n%s", out.String())
	}
}

// tourScript is the bash script running lines: each announced, its exit status checked; background jobs
// checked at the end.
func tourScript(t *testing.T, lines []string, adapt map[string]func(string) string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("bgs=()\ntrap 'kill $(jobs -p) 2>/dev/null' EXIT\n")
	used := map[string]int{}
	for i, l := range lines {
		if f, ok := adapt[l]; ok {
			used[l]++
			l = f(l)
		}
		fmt.Fprintf(&b, "echo %s >&2\n", shellQuote(fmt.Sprintf("+ [%d] %s", i+1, l)))
		if strings.HasSuffix(l, "&") {
			fmt.Fprintf(&b, "%s\nbgs+=($!)\n", l)
			continue
		}
		fmt.Fprintf(&b, "%s\nrc=$?; if [ $rc -ne 0 ]; then echo \"TOUR LINE %d FAILED with $rc\" >&2; exit 1; fi\n", l, i+1)
	}
	for l := range adapt {
		if used[l] != 1 {
			t.Fatalf("tour line %q found %d times in README.md, want once", l, used[l])
		}
	}
	b.WriteString(`for p in "${bgs[@]}"; do
  if kill -0 "$p" 2>/dev/null; then kill "$p"; wait "$p" 2>/dev/null
  elif ! wait "$p"; then echo "TOUR BACKGROUND JOB $p FAILED" >&2; exit 1; fi
done
echo "TOUR DONE"
`)
	return b.String()
}

// shellQuote quotes s for bash, expanding nothing.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// layoutClone gives dir what the tour uses of a fresh clone: bin/warren, README.md and examples/.
func layoutClone(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, l := range [][2]string{{binary, "bin/warren"}, {mustAbs(t, "../../README.md"), "README.md"}, {mustAbs(t, "../../examples"), "examples"}} {
		if err := os.Symlink(l[0], filepath.Join(dir, l[1])); err != nil {
			t.Fatal(err)
		}
	}
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// tourEnv is a reader's environment: no WARREN_* or model key of the test's, HOME in dir.
func tourEnv(dir string) []string {
	env := []string{"HOME=" + dir}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "WARREN_") && !strings.HasPrefix(kv, "ANTHROPIC_") && !strings.HasPrefix(kv, "HOME=") {
			env = append(env, kv)
		}
	}
	return env
}
