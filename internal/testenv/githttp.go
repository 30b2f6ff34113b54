package testenv

import (
	"crypto/subtle"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/warren-mesh/warren/internal/httpx"
)

// GitServer is a real git smart-HTTP server (git http-backend behind net/http/cgi) serving the bare
// repositories under Root, for tests of clones. With Password set every request needs HTTP basic
// authentication with it (any username); Denied counts the requests refused.
type GitServer struct {
	URL    string // http://addr, without a trailing slash
	Root   string
	Denied atomic.Int64
}

// StartGitServer serves the bare repositories of root on addr (e.g. "127.0.0.1:0") until the test ends.
func StartGitServer(t testing.TB, addr, root, password string) *GitServer {
	t.Helper()
	git, err := exec.LookPath("git")
	if err != nil {
		t.Fatalf("git is required: %v", err)
	}
	out, err := exec.Command(git, "--exec-path").Output()
	if err != nil {
		t.Fatalf("git --exec-path: %v", err)
	}
	backend := filepath.Join(strings.TrimSpace(string(out)), "git-http-backend")
	s := &GitServer{Root: root}
	h := &cgi.Handler{
		Path: backend,
		Env:  []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_NOSYSTEM=1", "HOME=" + root},
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("git server listen %s: %v", addr, err)
	}
	srv := httpx.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if password != "" {
			_, pw, ok := r.BasicAuth()
			if !ok || subtle.ConstantTimeCompare([]byte(pw), []byte(password)) != 1 {
				s.Denied.Add(1)
				w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
		}
		h.ServeHTTP(w, r)
	}), httpx.Config{})
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	s.URL = "http://" + ln.Addr().String()
	return s
}

// BareRepo makes, under dir, a repository "src" with one commit (README.md, on branch main) and its bare
// clone name (e.g. "proj.git"), with the host's git; it returns the commit. The commits' author is fixed.
func BareRepo(t testing.TB, dir, name string) string {
	t.Helper()
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	Git(t, src, "init", "-q", "-b", "main")
	if err := os.WriteFile(filepath.Join(src, "README.md"), []byte("# proj\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	Git(t, src, "add", "README.md")
	Git(t, src, "commit", "-q", "-m", "initial")
	Git(t, dir, "clone", "-q", "--bare", src, name)
	return Git(t, src, "rev-parse", "HEAD")
}

// Git runs the host's git in dir (with a fixed author and committer, without the system configuration)
// and returns its trimmed output; a failure is fatal.
func Git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_AUTHOR_NAME=local", "GIT_AUTHOR_EMAIL=local@example.com",
		"GIT_COMMITTER_NAME=local", "GIT_COMMITTER_EMAIL=local@example.com")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v in %s: %v\n%s", args, dir, err, out)
	}
	return strings.TrimSpace(string(out))
}
