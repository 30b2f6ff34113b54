package egress

import (
	"crypto/tls"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warren-mesh/warren/internal/httpx"
)

// TestGatewayGitCloneWithInjectedToken: git, run in the sandbox's namespace and given only a placeholder
// in an Authorization header and the sandbox's CA, clones over HTTPS from a git server (git http-backend)
// that requires the token; the token appears nowhere in what the sandbox has afterwards.
func TestGatewayGitCloneWithInjectedToken(t *testing.T) {
	gitPath, err := exec.LookPath("git")
	if err != nil {
		t.Fatalf("git not installed: %v", err)
	}
	l, internetCA, sandboxCA := newInjectingLab(t, `{"mode":"allowlist","allow":[{"domain":"allowed.test","ports":[9443]}]}`)

	// The git server: a bare repository with one commit, served by git http-backend behind a token check.
	dir := t.TempDir()
	git := func(d string, args ...string) {
		t.Helper()
		cmd := exec.Command(gitPath, args...)
		cmd.Dir = d
		cmd.Env = append(os.Environ(), "HOME="+dir, "GIT_CONFIG_NOSYSTEM=1", "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	work := filepath.Join(dir, "work")
	git(dir, "init", "-q", "-b", "main", work)
	if err := os.WriteFile(filepath.Join(work, "README"), []byte("hello from the registry\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git(work, "add", "README")
	git(work, "commit", "-q", "-m", "first")
	git(dir, "clone", "-q", "--bare", work, filepath.Join(dir, "srv", "repo.git"))
	backend := &cgi.Handler{Path: gitPath, Args: []string{"http-backend"},
		Env: []string{"GIT_PROJECT_ROOT=" + filepath.Join(dir, "srv"), "GIT_HTTP_EXPORT_ALL=1"}}
	l.serveWithToken(t, internetCA, backend)
	home, caFile := l.sandboxHome(t, sandboxCA)
	clone := exec.Command("ip", "netns", "exec", filepath.Base(l.sandbox), gitPath,
		"-c", "http.extraHeader=Authorization: Bearer "+placeholder,
		"clone", "-q", "https://allowed.test:9443/repo.git", filepath.Join(home, "repo"))
	clone.Env = []string{"HOME=" + home, "PATH=/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM=1", "GIT_SSL_CAINFO=" + caFile, "GIT_TERMINAL_PROMPT=0"}
	if out, err := clone.CombinedOutput(); err != nil {
		t.Fatalf("git clone in the sandbox: %v: %s", err, out)
	}
	if b, err := os.ReadFile(filepath.Join(home, "repo", "README")); err != nil || string(b) != "hello from the registry\n" {
		t.Fatalf("cloned README: %q, %v", b, err)
	}
	l.sink.wait(t, "brokered clone", func(r Record) bool { return r.Verdict == Injected && r.Name == "allowed.test" })
	holdsNoSecret(t, home)
}

// serveWithToken serves h over HTTPS for allowed.test on port 9443 of its IPv4 and IPv6 addresses, with
// a certificate of the internet's CA, to requests bearing the secret only (403 otherwise).
func (l *lab) serveWithToken(t *testing.T, internetCA *CA, h http.Handler) {
	t.Helper()
	leaf, err := internetCA.Leaf("allowed.test")
	if err != nil {
		t.Fatal(err)
	}
	for _, addr := range []string{pubWeb + ":9443", "[" + pubWeb6 + "]:9443"} {
		srv := httpx.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer "+secret {
				http.Error(w, "token required", http.StatusForbidden)
				return
			}
			h.ServeHTTP(w, r)
		}), httpx.Config{})
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{*leaf}}
		ln := listenTCP(t, l.internet, "tcp", addr)
		go func() { _ = srv.ServeTLS(ln, "", "") }()
		t.Cleanup(func() { srv.Close() })
	}
}

// sandboxHome makes what a program run in the sandbox's namespace (ip netns exec) has: a resolv.conf
// naming an address whose port 53 is redirected to the gateway (ip netns exec mounts the namespace's
// own), and a home directory holding the sandbox's CA certificate (caFile) and nothing secret.
func (l *lab) sandboxHome(t *testing.T, sandboxCA *CA) (home, caFile string) {
	t.Helper()
	etc := filepath.Join("/etc/netns", filepath.Base(l.sandbox))
	if err := os.MkdirAll(etc, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(etc) })
	if err := os.WriteFile(filepath.Join(etc, "resolv.conf"), []byte("nameserver 192.0.2.53\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	home = t.TempDir()
	caFile = filepath.Join(home, "ca.pem")
	if err := os.WriteFile(caFile, sandboxCA.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	return home, caFile
}

// holdsNoSecret fails the test if a file under dir holds the secret.
func holdsNoSecret(t *testing.T, dir string) {
	t.Helper()
	_ = filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err == nil && info.Mode().IsRegular() {
			if b, _ := os.ReadFile(path); strings.Contains(string(b), secret) {
				t.Errorf("%s holds the token", path)
			}
		}
		return nil
	})
}
