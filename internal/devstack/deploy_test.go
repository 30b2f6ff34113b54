package devstack_test

import (
	"archive/tar"
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/devstack"
	"github.com/warren-mesh/warren/internal/secrets"
	"github.com/warren-mesh/warren/internal/token"
	"github.com/warren-mesh/warren/internal/wire"
	warren "github.com/warren-mesh/warren/sdk"
)

// Workspace templates end to end, through the CLI and the edge: a deployed directory is what a new user's
// sandbox starts with (read through the files API), a sandbox that already runs is untouched, a second
// deploy (of a git ref) changes what the next new user gets and not what the earlier one has, a rollback
// brings the first tree back, a hostile archive is refused with a typed error and stores nothing, and
// after rm new sandboxes start empty again.
func TestWorkspaceTemplates(t *testing.T) {
	st := startStack(t)
	ctx := ctxT(t)
	cli := func(args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(binary, args...)
		cmd.Env = append(os.Environ(), "WARREN_URL="+st.URL(), "WARREN_DATA_DIR="+st.Config().DataDir)
		out, _ := cmd.CombinedOutput()
		return string(out), cmd.ProcessState.ExitCode()
	}
	read := func(user, path string) (string, error) {
		t.Helper()
		b, err := client(t, st, user).Sandbox().ReadFile(ctx, path)
		return string(b), err
	}

	// A sandbox that runs before any deploy.
	old := client(t, st, "old-timer").Sandbox()
	if _, err := old.WriteFile(ctx, "own.txt", strings.NewReader("mine")); err != nil {
		t.Fatal(err)
	}

	// Version 1: a plain directory.
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"README.md": "v1 readme\n", "src/app.py": "print('v1')\n"})
	if err := os.Symlink("src/app.py", filepath.Join(dir, "app-link")); err != nil {
		t.Fatal(err)
	}
	if out, code := cli("deploy", dir); code != 0 || !strings.Contains(out, "version 1 ") {
		t.Fatalf("deploy 1: %d %s", code, out)
	}
	if got, err := read("newbie-1", "README.md"); err != nil || got != "v1 readme\n" {
		t.Fatalf("new user after deploy 1: %q %v", got, err)
	}
	res, err := client(t, st, "newbie-1").Sandbox().Exec(ctx, wire.ExecRequest{Command: "cat app-link && ls -A"})
	if err != nil || res.Stdout != "print('v1')\nREADME.md\napp-link\nsrc\n" {
		t.Fatalf("exec in the new sandbox: %+v %v", res, err)
	}
	// The sandbox that already ran is not touched.
	if _, err := old.ReadFile(ctx, "README.md"); !warren.IsCode(err, wire.NotFound) {
		t.Fatalf("the existing sandbox got the template: %v", err)
	}
	if got, err := old.ReadFile(ctx, "own.txt"); err != nil || string(got) != "mine" {
		t.Fatalf("the existing sandbox's own file: %q %v", got, err)
	}

	// Version 2: a git repository at a ref; an untracked file is not part of it.
	repo := t.TempDir()
	writeTree(t, repo, map[string]string{"README.md": "v2 readme\n", "lib/util.py": "x = 2\n"})
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", repo, "-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	git("init", "-q")
	git("add", ".")
	git("commit", "-q", "-m", "v2")
	writeTree(t, repo, map[string]string{"untracked.txt": "not deployed"})
	if out, code := cli("deploy", repo, "-ref", "HEAD"); code != 0 || !strings.Contains(out, "version 2 ") {
		t.Fatalf("deploy 2: %d %s", code, out)
	}
	if got, err := read("newbie-2", "README.md"); err != nil || got != "v2 readme\n" {
		t.Fatalf("new user after deploy 2: %q %v", got, err)
	}
	if _, err := read("newbie-2", "untracked.txt"); !warren.IsCode(err, wire.NotFound) {
		t.Fatalf("an untracked file was deployed: %v", err)
	}
	if _, err := read("newbie-2", "src/app.py"); !warren.IsCode(err, wire.NotFound) {
		t.Fatalf("version 1's file is in version 2's sandbox: %v", err)
	}
	if got, err := read("newbie-1", "README.md"); err != nil || got != "v1 readme\n" {
		t.Fatalf("the first new user's sandbox changed: %q %v", got, err)
	}

	// Rollback to version 1 (as version 3).
	if out, code := cli("admin", "templates", "use", "1"); code != 0 || !strings.Contains(out, "version 3 ") {
		t.Fatalf("templates use 1: %d %s", code, out)
	}
	if got, err := read("newbie-3", "src/app.py"); err != nil || got != "print('v1')\n" {
		t.Fatalf("new user after rollback: %q %v", got, err)
	}
	out, code := cli("admin", "templates", "ls", "-json")
	var list struct {
		Versions []struct {
			ID      string `json:"version"`
			Current bool   `json:"current"`
		} `json:"versions"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list.Versions) != 3 || list.Versions[0].ID != "3" || !list.Versions[0].Current {
		t.Fatalf("templates ls: %d %s", code, out)
	}

	// A hostile archive: refused, typed, nothing stored.
	before := countFiles(t, filepath.Join(st.Config().DataDir, "blobs", "templates"))
	if before == 0 {
		t.Fatal("no template objects in the blob store: the count below would prove nothing")
	}
	var evil bytes.Buffer
	tw := tar.NewWriter(&evil)
	for _, h := range []*tar.Header{
		{Name: "fine.txt", Typeflag: tar.TypeReg, Mode: 0o644, Size: 2},
		{Name: "../../escape.txt", Typeflag: tar.TypeReg, Mode: 0o644, Size: 2},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte("hi")); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, st.URL()+"/v1/admin/templates/"+devstack.DevIssuer+"/default", &evil)
	req.Header.Set("Authorization", "Bearer "+st.AdminKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var we wire.Error
	_ = json.NewDecoder(resp.Body).Decode(&we)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || we.Code != wire.InvalidArgument {
		t.Fatalf("hostile tar: %d %+v", resp.StatusCode, we)
	}
	if after := countFiles(t, filepath.Join(st.Config().DataDir, "blobs", "templates")); after != before {
		t.Fatalf("the refused deploy stored something: %d objects before, %d after", before, after)
	}
	if _, err := os.Stat(filepath.Join(st.Config().DataDir, "escape.txt")); err == nil {
		t.Fatal("the hostile archive wrote outside")
	}
	// Without the admin key: unauthenticated.
	req, _ = http.NewRequestWithContext(ctx, http.MethodGet, st.URL()+"/v1/admin/templates/"+devstack.DevIssuer+"/default", nil)
	req.Header.Set("Authorization", "Bearer wrong")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("wrong admin key: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}

	// rm: new sandboxes start empty again.
	if out, code := cli("admin", "templates", "rm"); code != 0 {
		t.Fatalf("templates rm: %d %s", code, out)
	}
	if _, err := read("newbie-4", "README.md"); !warren.IsCode(err, wire.NotFound) {
		t.Fatalf("a new user after rm: %v", err)
	}
}

func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func countFiles(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			n++
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// The token's template claim picks the template a new sandbox starts from (issue #14 item 6): with two
// templates deployed, a new user whose token says "py" gets py's files, one whose token says nothing gets
// the default's; a token naming something that is not a template name is refused at connect, typed
// (unauthenticated, the claim named), and starts no sandbox.
func TestTokenChoosesTemplate(t *testing.T) {
	st := startStack(t)
	ctx := ctxT(t)
	deploy := func(name string, files map[string]string) {
		t.Helper()
		dir := t.TempDir()
		writeTree(t, dir, files)
		cmd := exec.Command(binary, "deploy", dir, "-name", name)
		cmd.Env = append(os.Environ(), "WARREN_URL="+st.URL(), "WARREN_DATA_DIR="+st.Config().DataDir)
		if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "version 1 ") {
			t.Fatalf("deploy %s: %v %s", name, err, out)
		}
	}
	deploy("default", map[string]string{"which.txt": "default\n"})
	deploy("py", map[string]string{"which.txt": "py\n", "main.py": "print(1)\n"})

	read := func(c *warren.Client, path string) (string, error) {
		b, err := c.Sandbox().ReadFile(ctx, path)
		return string(b), err
	}
	py := client(t, st, "wants-py", func(c *token.Claims) { c.Template = "py" })
	if got, err := read(py, "which.txt"); err != nil || got != "py\n" {
		t.Fatalf("new user with template py: %q %v", got, err)
	}
	if got, err := read(py, "main.py"); err != nil || got != "print(1)\n" {
		t.Fatalf("new user with template py, main.py: %q %v", got, err)
	}
	plain := client(t, st, "no-claim")
	if got, err := read(plain, "which.txt"); err != nil || got != "default\n" {
		t.Fatalf("new user without a template claim: %q %v", got, err)
	}
	if _, err := read(plain, "main.py"); !warren.IsCode(err, wire.NotFound) {
		t.Fatalf("py's file in the default sandbox: %v", err)
	}

	// Mint refuses a bad name, so the token is signed here by hand, as a buggy or hostile issuer would.
	for _, bad := range []string{"../py", "Py", "", strings.Repeat("p", 65)} {
		c, err := warren.New(st.URL(), signRaw(t, st.DevKey, map[string]any{
			"iss": devstack.DevIssuer, "sub": "bad-template", "exp": time.Now().Add(time.Hour).Unix(), "template": bad,
		}))
		if err != nil {
			t.Fatal(err)
		}
		_, err = read(c, "which.txt")
		if !warren.IsCode(err, wire.Unauthenticated) || !strings.Contains(err.Error(), "template") {
			t.Fatalf("template %q: %v, want unauthenticated naming the template claim", bad, err)
		}
	}
	// The refused user got no sandbox: a valid token of the same user starts a fresh one from default.
	if got, err := read(client(t, st, "bad-template"), "which.txt"); err != nil || got != "default\n" {
		t.Fatalf("the refused user's first valid connect: %q %v", got, err)
	}
}

// signRaw signs payload as an HS256 JWT with key, without the claim checks token.Mint makes.
func signRaw(t *testing.T, key secrets.Key, payload map[string]any) string {
	t.Helper()
	enc := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return base64.RawURLEncoding.EncodeToString(b)
	}
	signed := enc(map[string]string{"alg": "HS256", "typ": "JWT", "kid": key.ID}) + "." + enc(payload)
	mac := hmac.New(sha256.New, key.Secret)
	mac.Write([]byte(signed))
	return signed + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}
