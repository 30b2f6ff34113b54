package testenv

import (
	"crypto/subtle"
	"net"
	"net/http"
	"net/http/cgi"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"
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
	backend := filepath.Join(string(trimNL(out)), "git-http-backend")
	s := &GitServer{Root: root}
	h := &cgi.Handler{
		Path: backend,
		Env:  []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_NOSYSTEM=1", "HOME=" + root},
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("git server listen %s: %v", addr, err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	s.URL = "http://" + ln.Addr().String()
	return s
}

func trimNL(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}
