package devstack_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/devstack"
	"github.com/warren-mesh/warren/internal/testenv"
	"github.com/warren-mesh/warren/internal/wire"
	warren "github.com/warren-mesh/warren/sdk"
)

// gitHostAddr is where the test's git server listens: an address of TEST-NET-2 put on the host's loopback
// interface for the test, so traffic to it never leaves the machine. The sandbox's own network refuses
// the host's addresses; the runners get -egress-allow for this one, which is how an operator opens a
// private git server or mirror. (The host's loopback itself stays closed to the sandbox: the test shows
// that too.)
const gitHostAddr = "198.51.100.77"

// addLoopbackAddr puts addr on lo for the test (root only, as the end-to-end tests run).
func addLoopbackAddr(t *testing.T, addr string) {
	t.Helper()
	out, err := exec.Command("ip", "addr", "add", addr+"/32", "dev", "lo").CombinedOutput()
	if err != nil && !strings.Contains(string(out), "File exists") && !strings.Contains(string(out), "already assigned") {
		t.Fatalf("ip addr add %s: %v %s (the git end-to-end test needs root and iproute2)", addr, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "addr", "del", addr+"/32", "dev", "lo").Run() })
}

// Git through the edge with a real runner under bubblewrap and its own network: a clone over HTTP with a
// credential from a git server the egress allowlist opens (and nothing anywhere in the data dir holds the
// credential afterwards), init/commit/status/diff/log/branch/checkout, a bundle since a base, `warren pull`
// into a local repository with the real git, the CLI, and attacks (option injection, path escapes,
// forbidden transports, the host's loopback).
func TestGitThroughTheEdge(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: starts runner processes under bubblewrap")
	}
	addLoopbackAddr(t, gitHostAddr)
	const secret = "ghp_E2E-credential-7f3a9c"
	root := t.TempDir()
	served := filepath.Join(root, "served")
	if err := os.MkdirAll(served, 0o755); err != nil {
		t.Fatal(err)
	}
	base := testenv.BareRepo(t, served, "proj.git")
	srv := testenv.StartGitServer(t, gitHostAddr+":0", served, secret)
	loop := testenv.StartGitServer(t, "127.0.0.1:0", served, "")

	st := startStack(t, func(c *devstack.Config) { c.RunnerArgs = []string{"-egress-allow", gitHostAddr + "/32"} })
	dataDir := st.Config().DataDir
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tok := mint(t, st, "gitter")
	c, err := warren.New(st.URL(), tok)
	if err != nil {
		t.Fatal(err)
	}
	sb := c.Sandbox()

	// Clone: refused without the credential and with a wrong one, then cloned with it. The host's loopback
	// is not reachable from the sandbox, the allowed address is.
	url := srv.URL + "/proj.git"
	if _, err := sb.GitClone(ctx, warren.GitCloneRequest{URL: loop.URL + "/proj.git", Path: "viaLoopback"}); !warren.IsCode(err, wire.Unavailable) {
		t.Fatalf("clone from the host's loopback: %v", err)
	}
	if _, err := sb.GitClone(ctx, warren.GitCloneRequest{URL: url, Path: "proj"}); !warren.IsCode(err, wire.PermissionDenied) {
		t.Fatalf("clone without the credential: %v", err)
	}
	_, err = sb.GitClone(ctx, warren.GitCloneRequest{URL: url, Path: "proj", Credential: &warren.GitCredential{Password: "x" + secret}})
	if !warren.IsCode(err, wire.PermissionDenied) || strings.Contains(err.Error(), secret) {
		t.Fatalf("clone with a wrong credential: %v", err)
	}
	denied := srv.Denied.Load()
	head, err := sb.GitClone(ctx, warren.GitCloneRequest{URL: url, Path: "proj", Credential: &warren.GitCredential{Password: secret}})
	if err != nil || head.Commit != base || head.Branch != "main" {
		t.Fatalf("clone: %+v, %v", head, err)
	}
	if srv.Denied.Load() != denied {
		t.Fatalf("the credentialed clone was refused %d times", srv.Denied.Load()-denied)
	}

	// Local work in the sandbox.
	if _, err := sb.WriteFile(ctx, "proj/feature.txt", strings.NewReader("feature\n")); err != nil {
		t.Fatal(err)
	}
	status, err := sb.GitStatus(ctx, "proj")
	if err != nil || status.Clean || len(status.Entries) != 1 || status.Entries[0].Path != "feature.txt" || status.Entries[0].Index != "?" {
		t.Fatalf("status: %+v, %v", status, err)
	}
	one, err := sb.GitCommit(ctx, warren.GitCommitRequest{Path: "proj", Message: "add feature", All: true})
	if err != nil || one.Commit == base {
		t.Fatalf("commit: %+v, %v", one, err)
	}
	if _, err := sb.WriteFile(ctx, "proj/README.md", strings.NewReader("# proj\nmore\n")); err != nil {
		t.Fatal(err)
	}
	diff, err := sb.GitDiff(ctx, "proj", warren.GitDiffOptions{})
	if err != nil || !strings.Contains(diff.Diff, "+more") {
		t.Fatalf("diff: %+v, %v", diff, err)
	}
	two, err := sb.GitCommit(ctx, warren.GitCommitRequest{Path: "proj", Message: "more readme", Paths: []string{"README.md"}, AuthorName: "Ada", AuthorEmail: "ada@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	log, err := sb.GitLog(ctx, "proj", "", 0)
	if err != nil || len(log.Commits) != 3 || log.Commits[0].Commit != two.Commit || log.Commits[0].AuthorName != "Ada" ||
		log.Commits[1].AuthorName != "gitter" || log.Commits[1].AuthorEmail != "gitter@dev.warren.invalid" || log.Commits[2].Commit != base {
		t.Fatalf("log: %+v, %v", log, err)
	}
	if b, err := sb.GitBranch(ctx, warren.GitBranchRequest{Path: "proj", Name: "side", Start: "HEAD~1"}); err != nil || b.Commit != one.Commit {
		t.Fatalf("branch: %+v, %v", b, err)
	}
	if h, err := sb.GitCheckout(ctx, warren.GitCheckoutRequest{Path: "proj", Ref: "side"}); err != nil || h.Branch != "side" || h.Commit != one.Commit {
		t.Fatalf("checkout side: %+v, %v", h, err)
	}
	if h, err := sb.GitCheckout(ctx, warren.GitCheckoutRequest{Path: "proj", Ref: "main"}); err != nil || h.Commit != two.Commit {
		t.Fatalf("checkout main: %+v, %v", h, err)
	}
	if h, err := sb.GitInit(ctx, warren.GitInitRequest{Path: "fresh/repo"}); err != nil || h.Branch != "main" || h.Commit != "" {
		t.Fatalf("init: %+v, %v", h, err)
	}
	if l, err := sb.GitLog(ctx, "fresh/repo", "", 0); err != nil || len(l.Commits) != 0 {
		t.Fatalf("log of a new repository: %+v, %v", l, err)
	}

	// The credential is nowhere: not in the clone's .git/config, the workspace, the runner's state, its
	// log or a snapshot (the whole data dir is searched).
	if n := grepTree(t, dataDir, secret); n == 0 {
		t.Fatal("searched no files")
	}
	res, err := sb.Exec(ctx, warren.ExecRequest{Command: "git -C proj config --get-regexp '.*'; git -C proj remote -v"})
	if err != nil || strings.Contains(res.Stdout, secret) || !strings.Contains(res.Stdout, url) {
		t.Fatalf("repository config: %+v, %v", res, err)
	}

	// A bundle since the base, and nothing since HEAD.
	if _, err := sb.GitBundle(ctx, "proj", two.Commit, ""); !warren.IsCode(err, wire.NotFound) {
		t.Fatalf("bundle since HEAD: %v", err)
	}
	rc, err := sb.GitBundle(ctx, "proj", base, "")
	if err != nil {
		t.Fatal(err)
	}
	bundle, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.HasPrefix(bundle, []byte("# v2 git bundle\n")) || !bytes.Contains(bundle, []byte("-"+base)) {
		t.Fatalf("bundle: %q, %v", bundle[:min(len(bundle), 200)], err)
	}

	// warren pull into a local clone at the base: the sandbox's commits land on warren/gitter.
	local := filepath.Join(root, "local")
	testenv.Git(t, root, "clone", "-q", filepath.Join(served, "proj.git"), local)
	cli := func(dir string, args ...string) (string, string, int) {
		t.Helper()
		cmd := exec.CommandContext(ctx, binary, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "WARREN_URL="+st.URL(), "WARREN_TOKEN="+tok)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		_ = cmd.Run()
		return out.String(), errb.String(), cmd.ProcessState.ExitCode()
	}
	out, stderr, code := cli(local, "pull", "-path", "proj")
	if code != 0 || !strings.Contains(out, "warren/gitter "+two.Commit) || !strings.Contains(out, "2 commits") {
		t.Fatalf("warren pull: %q %q %d", out, stderr, code)
	}
	if got := testenv.Git(t, local, "show", "warren/gitter:feature.txt"); got != "feature" {
		t.Fatalf("feature.txt on warren/gitter: %q", got)
	}
	if got := testenv.Git(t, local, "rev-parse", "HEAD"); got != base {
		t.Fatalf("pull moved the local HEAD to %s", got)
	}
	if out, _, code := cli(local, "pull", "-path", "proj", "-base", "warren/gitter"); code != 0 || !strings.Contains(out, "nothing to pull") {
		t.Fatalf("second pull: %q %d", out, code)
	}
	if _, stderr, code := cli(local, "pull", "-path", "proj", "-branch", "-x"); code == 0 || !strings.Contains(stderr, "not a valid branch") {
		t.Fatalf("pull -branch -x: %q %d", stderr, code)
	}
	// The CLI's git commands.
	if out, stderr, code := cli(root, "git", "-path", "proj", "log", "-n", "1"); code != 0 || !strings.Contains(out, "Ada <ada@example.com> more readme") {
		t.Fatalf("warren git log: %q %q %d", out, stderr, code)
	}
	if out, stderr, code := cli(root, "git", "-path", "proj", "checkout", "-b", "cli-branch"); code != 0 || !strings.Contains(out, "proj cli-branch "+two.Commit) {
		t.Fatalf("warren git checkout -b: %q %q %d", out, stderr, code)
	}

	// Attacks through the edge.
	for _, ref := range []string{"--output=/workspace/pwned", "-p", "HEAD;id", "a..b"} {
		if _, err := sb.GitLog(ctx, "proj", ref, 0); !warren.IsCode(err, wire.InvalidArgument) {
			t.Fatalf("log ref %q: %v", ref, err)
		}
		if _, err := sb.GitCheckout(ctx, warren.GitCheckoutRequest{Path: "proj", Ref: ref}); !warren.IsCode(err, wire.InvalidArgument) {
			t.Fatalf("checkout %q: %v", ref, err)
		}
	}
	for _, u := range []string{"ext::sh -c touch% /workspace/pwned", "file:///workspace/proj", "/workspace/proj", "--upload-pack=touch /workspace/pwned"} {
		if _, err := sb.GitClone(ctx, warren.GitCloneRequest{URL: u, Path: "evil"}); !warren.IsCode(err, wire.InvalidArgument) {
			t.Fatalf("clone %q: %v", u, err)
		}
	}
	for _, p := range []string{"../", "/etc", "proj/../../x"} {
		if _, err := sb.GitStatus(ctx, p); !warren.IsCode(err, wire.PermissionDenied) {
			t.Fatalf("status of %q: %v", p, err)
		}
		if _, err := sb.GitClone(ctx, warren.GitCloneRequest{URL: url, Path: p + "/c"}); !warren.IsCode(err, wire.PermissionDenied) {
			t.Fatalf("clone into %q: %v", p, err)
		}
	}
	if res, err := sb.Exec(ctx, warren.ExecRequest{Command: "ls /workspace"}); err != nil || strings.Contains(res.Stdout, "pwned") || strings.Contains(res.Stdout, "evil") {
		t.Fatalf("workspace after the attacks: %+v, %v", res, err)
	}
}

// grepTree fails the test for every regular file under dir holding secret (or the base64 of the
// Authorization header made of it) and returns how many files it read.
func grepTree(t *testing.T, dir, secret string) int {
	t.Helper()
	b64 := base64.StdEncoding.EncodeToString([]byte("x-access-token:" + secret))
	n := 0
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return nil // a socket or a file that went away meanwhile
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil
		}
		n++
		if bytes.Contains(b, []byte(secret)) || bytes.Contains(b, []byte(b64)) {
			t.Errorf("%s holds the credential", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
