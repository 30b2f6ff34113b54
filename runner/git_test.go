package runner_test

import (
	"bytes"
	"encoding/base64"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warren-mesh/warren/internal/testenv"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner"
)

func (h *harness) git(t testing.TB, op string, body any) wire.GitHead {
	t.Helper()
	var head wire.GitHead
	decode(t, h.doJSON(t, http.MethodPost, "/v1/sandbox/git/"+op, body), http.StatusOK, &head)
	return head
}

func (h *harness) gitGet(t testing.TB, op string, q url.Values, v any) {
	t.Helper()
	decode(t, h.do(t, http.MethodGet, "/v1/sandbox/git/"+op+"?"+q.Encode(), nil), http.StatusOK, v)
}

// The whole local workflow inside the sandbox: init, status, commit (the token's user as author unless
// given), log, diff, branch, checkout, and bundles (whole and since a base) that the host's git reads.
func TestGitWorkflow(t *testing.T) {
	h := startRunner(t)
	head := h.git(t, "init", wire.GitInitRequest{Path: "repo"})
	if head.Path != "repo" || head.Branch != "main" || head.Commit != "" {
		t.Fatalf("init: %+v", head)
	}
	var l wire.GitLog
	h.gitGet(t, "log", url.Values{"path": {"repo"}}, &l)
	if len(l.Commits) != 0 || l.Truncated {
		t.Fatalf("log of a new repository: %+v", l)
	}
	h.exec(t, wire.ExecRequest{Command: "printf 'one\\n' > a.txt && mkdir -p d && printf x > 'd/sp ace.txt'", Cwd: "repo"})
	var st wire.GitStatus
	h.gitGet(t, "status", url.Values{"path": {"repo"}}, &st)
	if st.Clean || st.Branch != "main" || len(st.Entries) != 2 || st.Entries[0].Path != "a.txt" || st.Entries[0].Index != "?" || st.Entries[1].Path != "d/sp ace.txt" {
		t.Fatalf("status: %+v", st)
	}
	first := h.git(t, "commit", wire.GitCommitRequest{Path: "repo", Message: "first\n\nbody", All: true})
	if first.Branch != "main" || len(first.Commit) != 40 {
		t.Fatalf("commit: %+v", first)
	}
	h.gitGet(t, "status", url.Values{"path": {"repo"}}, &st)
	if !st.Clean || st.Commit != first.Commit {
		t.Fatalf("status after commit: %+v", st)
	}
	h.exec(t, wire.ExecRequest{Command: "printf 'two\\n' >> a.txt", Cwd: "repo"})
	var d wire.GitDiff
	h.gitGet(t, "diff", url.Values{"path": {"repo"}}, &d)
	if !strings.Contains(d.Diff, "+two") || !strings.Contains(d.Diff, "a/a.txt") {
		t.Fatalf("diff: %+v", d)
	}
	second := h.git(t, "commit", wire.GitCommitRequest{Path: "repo", Message: "second", Paths: []string{"a.txt"}, AuthorName: "Ada", AuthorEmail: "ada@example.com"})
	h.gitGet(t, "log", url.Values{"path": {"repo"}}, &l)
	if len(l.Commits) != 2 || l.Commits[0].Commit != second.Commit || l.Commits[0].Subject != "second" || l.Commits[0].AuthorName != "Ada" ||
		l.Commits[1].AuthorName != "alice" || l.Commits[1].AuthorEmail != "alice@acme.warren.invalid" || l.Commits[0].Parents[0] != first.Commit {
		t.Fatalf("log: %+v", l)
	}
	h.gitGet(t, "log", url.Values{"path": {"repo"}, "limit": {"1"}}, &l)
	if len(l.Commits) != 1 || !l.Truncated {
		t.Fatalf("log limit 1: %+v", l)
	}
	h.gitGet(t, "diff", url.Values{"path": {"repo"}, "base": {first.Commit}}, &d)
	if !strings.Contains(d.Diff, "+two") {
		t.Fatalf("diff since first: %+v", d)
	}
	if b := h.git(t, "branch", wire.GitBranchRequest{Path: "repo", Name: "feature/x", Start: "HEAD~1"}); b.Commit != first.Commit {
		t.Fatalf("branch: %+v", b)
	}
	if c := h.git(t, "checkout", wire.GitCheckoutRequest{Path: "repo", Ref: "feature/x"}); c.Branch != "feature/x" || c.Commit != first.Commit {
		t.Fatalf("checkout: %+v", c)
	}
	if c := h.git(t, "checkout", wire.GitCheckoutRequest{Path: "repo", Ref: "topic", Create: true, Start: "main"}); c.Branch != "topic" || c.Commit != second.Commit {
		t.Fatalf("checkout -c: %+v", c)
	}
	if c := h.git(t, "checkout", wire.GitCheckoutRequest{Path: "repo", Ref: first.Commit}); c.Branch != "" || c.Commit != first.Commit {
		t.Fatalf("detached checkout: %+v", c)
	}
	h.git(t, "checkout", wire.GitCheckoutRequest{Path: "repo", Ref: "main"})

	// The whole history, cloned by the host's git; then a bundle of what came after first, fetched into a
	// host repository that has first.
	host := t.TempDir()
	full := filepath.Join(host, "full.bundle")
	writeBundle(t, h, url.Values{"path": {"repo"}}, full)
	testenv.Git(t, host, "clone", "-q", full, "clone")
	clone := filepath.Join(host, "clone")
	testenv.Git(t, clone, "reset", "-q", "--hard", first.Commit)
	since := filepath.Join(host, "since.bundle")
	writeBundle(t, h, url.Values{"path": {"repo"}, "base": {first.Commit}}, since)
	if out := testenv.Git(t, clone, "bundle", "verify", since); !strings.Contains(out, first.Commit) {
		t.Fatalf("bundle verify: %s", out)
	}
	testenv.Git(t, clone, "fetch", "-q", since, "HEAD:refs/heads/warren/alice")
	if got := testenv.Git(t, clone, "rev-parse", "warren/alice"); got != second.Commit {
		t.Fatalf("fetched %s, want %s", got, second.Commit)
	}
	resp := h.do(t, http.MethodGet, "/v1/sandbox/git/bundle?"+url.Values{"path": {"repo"}, "base": {"main"}}.Encode(), nil)
	wantError(t, resp, wire.NotFound)
}

func writeBundle(t *testing.T, h *harness, q url.Values, file string) {
	t.Helper()
	resp := h.do(t, http.MethodGet, "/v1/sandbox/git/bundle?"+q.Encode(), nil)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/x-git-bundle" {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("bundle: %d %s", resp.StatusCode, b)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil || !bytes.HasPrefix(b, []byte("# v2 git bundle\n")) {
		t.Fatalf("bundle body %q, %v", b[:min(len(b), 64)], err)
	}
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// Hostile input is refused before git runs: option injection through revisions, branch names and URLs,
// paths out of the workspace (also through a symlink), transports other than https/http/git, credentials
// in a URL. The tenant's hooks and fsmonitor program never run.
func TestGitRefusesAttacks(t *testing.T) {
	h := startRunner(t)
	h.git(t, "init", wire.GitInitRequest{Path: "repo"})
	if err := os.Symlink(h.other, filepath.Join(h.ws, "out")); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(h.base, "pwned")
	post := func(op string, body any, code wire.Code) {
		t.Helper()
		wantError(t, h.doJSON(t, http.MethodPost, "/v1/sandbox/git/"+op, body), code)
	}
	get := func(op string, q url.Values, code wire.Code) {
		t.Helper()
		wantError(t, h.do(t, http.MethodGet, "/v1/sandbox/git/"+op+"?"+q.Encode(), nil), code)
	}
	for _, u := range []string{
		"ext::sh -c touch% " + marker, "ext::sh", "file:///etc", "/etc", "../repo", "repo", "-uhttps://x/y",
		"--upload-pack=touch " + marker, "https://user:pw@example.com/r.git", "ssh://example.com/r.git",
		"example.com:r.git", "https://", "https://-oProxyCommand=x/r", "http://example.com/a b", "fd::17",
	} {
		post("clone", wire.GitCloneRequest{URL: u, Path: "c"}, wire.InvalidArgument)
	}
	post("clone", wire.GitCloneRequest{URL: "https://example.com/r.git", Path: "../escape"}, wire.PermissionDenied)
	post("clone", wire.GitCloneRequest{URL: "https://example.com/r.git", Path: "/tmp/x"}, wire.PermissionDenied)
	post("clone", wire.GitCloneRequest{URL: "https://example.com/r.git", Path: "out/x"}, wire.PermissionDenied)
	post("clone", wire.GitCloneRequest{URL: "https://example.com/r.git", Path: "c", Branch: "--upload-pack=x"}, wire.InvalidArgument)
	post("init", wire.GitInitRequest{Path: "../bob"}, wire.PermissionDenied)
	post("init", wire.GitInitRequest{Path: "r2", Branch: "-x"}, wire.InvalidArgument)
	for _, rev := range []string{"--output=" + marker, "-p", "HEAD --output=x", "a..b", "HEAD@{1}", "HEAD:file", "x\ny", ""} {
		post("checkout", wire.GitCheckoutRequest{Path: "repo", Ref: rev}, wire.InvalidArgument)
		post("branch", wire.GitBranchRequest{Path: "repo", Name: rev}, wire.InvalidArgument)
		if rev != "" {
			get("log", url.Values{"path": {"repo"}, "ref": {rev}}, wire.InvalidArgument)
			get("diff", url.Values{"path": {"repo"}, "base": {rev}}, wire.InvalidArgument)
			get("bundle", url.Values{"path": {"repo"}, "base": {rev}}, wire.InvalidArgument)
		}
	}
	post("checkout", wire.GitCheckoutRequest{Path: "repo", Ref: "x", Create: true, Start: "--orphan"}, wire.InvalidArgument)
	post("commit", wire.GitCommitRequest{Path: "repo", Message: "m", AuthorName: "a>b"}, wire.InvalidArgument)
	post("commit", wire.GitCommitRequest{Path: "repo", Message: "m", AuthorEmail: "a\nb"}, wire.InvalidArgument)
	post("commit", wire.GitCommitRequest{Path: "repo", Message: "  "}, wire.InvalidArgument)
	post("commit", wire.GitCommitRequest{Path: "repo", Message: "m", Paths: []string{"../../bob/secret.txt"}}, wire.PermissionDenied)
	post("commit", wire.GitCommitRequest{Path: "repo", Message: "m", Paths: []string{"/etc/passwd"}}, wire.PermissionDenied)
	for _, p := range []string{"../bob", "/etc", "out"} {
		get("status", url.Values{"path": {p}}, wire.PermissionDenied)
		get("log", url.Values{"path": {p}}, wire.PermissionDenied)
		get("bundle", url.Values{"path": {p}}, wire.PermissionDenied)
	}
	get("status", url.Values{"path": {"."}}, wire.NotFound) // the workspace is no repository, nor is anything above it
	get("log", url.Values{"path": {"repo"}, "limit": {"100000"}}, wire.InvalidArgument)
	post("clone", wire.GitCloneRequest{URL: "https://example.com/r.git", Path: "c", Credential: &wire.GitCredential{Password: "a\r\nX-Evil: 1"}}, wire.InvalidArgument)

	// Hooks and an fsmonitor program of the tenant's repository do not run for the API's git.
	h.exec(t, wire.ExecRequest{Cwd: "repo", Command: `for hk in pre-commit post-commit; do printf '#!/bin/sh\ntouch /workspace/hook-ran\n' > .git/hooks/$hk; chmod +x .git/hooks/$hk; done
git config core.fsmonitor 'touch /workspace/fsmonitor-ran' && echo x > f`})
	h.git(t, "commit", wire.GitCommitRequest{Path: "repo", Message: "m", All: true})
	var st wire.GitStatus
	h.gitGet(t, "status", url.Values{"path": {"repo"}}, &st)
	for _, f := range []string{"hook-ran", "fsmonitor-ran", "../pwned"} {
		if _, err := os.Stat(filepath.Join(h.ws, f)); err == nil {
			t.Fatalf("%s exists: the tenant's program ran", f)
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("an injected command ran")
	}
}

// A clone over HTTP with a credential: it authenticates (the server refuses it without), and afterwards
// nothing in the workspace, .git included, holds the credential, nor the runner's log; a wrong one is
// permission_denied with the credential blotted out of the message. The sandbox shares the host's network
// here (the devstack test reaches the server through the egress allowlist instead).
func TestGitCloneWithCredential(t *testing.T) {
	h := startRunner(t, func(c *runner.Config) { c.HostNetwork = true })
	const secret = "s3cr3t-T0KEN-for-clone"
	root := t.TempDir()
	want := testenv.BareRepo(t, root, "r.git")
	srv := testenv.StartGitServer(t, "127.0.0.1:0", root, secret)

	wantError(t, h.doJSON(t, http.MethodPost, "/v1/sandbox/git/clone", wire.GitCloneRequest{URL: srv.URL + "/r.git", Path: "nocred"}), wire.PermissionDenied)
	e := wantError(t, h.doJSON(t, http.MethodPost, "/v1/sandbox/git/clone", wire.GitCloneRequest{
		URL: srv.URL + "/r.git", Path: "wrong", Credential: &wire.GitCredential{Password: "wrong-" + secret}}), wire.PermissionDenied)
	if strings.Contains(e.Message, secret) {
		t.Fatalf("error message carries the credential: %s", e.Message)
	}
	head := h.git(t, "clone", wire.GitCloneRequest{URL: srv.URL + "/r.git", Path: "sub/clone", Credential: &wire.GitCredential{Password: secret}})
	if head.Commit != want || head.Branch != "main" || head.Path != "sub/clone" {
		t.Fatalf("clone: %+v, want %s", head, want)
	}
	b, err := os.ReadFile(filepath.Join(h.ws, "sub", "clone", "README.md"))
	if err != nil || string(b) != "# proj\n" {
		t.Fatalf("README %q %v", b, err)
	}
	assertNoSecret(t, h.ws, secret)
	assertNoSecret(t, h.state, secret)
	// A fetch afterwards needs the credential again: none was kept.
	res := h.exec(t, wire.ExecRequest{Cwd: "sub/clone", Command: "GIT_TERMINAL_PROMPT=0 git fetch 2>&1; echo rc=$?"})
	if !strings.Contains(res.Stdout, "rc=128") {
		t.Fatalf("fetch without the credential: %q", res.Stdout)
	}
}

// assertNoSecret walks dir (everything, .git included) and fails if any file holds secret or its base64.
func assertNoSecret(t *testing.T, dir, secret string) {
	t.Helper()
	b64 := base64.StdEncoding.EncodeToString([]byte("x-access-token:" + secret))
	n := 0
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || !fi.Mode().IsRegular() {
			return err
		}
		n++
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte(secret)) || bytes.Contains(b, []byte(b64)) {
			t.Errorf("%s holds the credential", p)
		}
		return nil
	})
	if err != nil || n == 0 {
		t.Fatalf("walk %s: %d files, %v", dir, n, err)
	}
}
