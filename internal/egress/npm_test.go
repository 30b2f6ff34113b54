package egress

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha1"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// tarball is an npm package's tarball: package/package.json and package/index.js.
func tarball(t *testing.T, name, version string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for file, body := range map[string]string{
		"package/package.json": `{"name":"` + name + `","version":"` + version + `","main":"index.js"}`,
		"package/index.js":     "module.exports = 'hello from the registry';\n",
	} {
		if err := tw.WriteHeader(&tar.Header{Name: file, Mode: 0o644, Size: int64(len(body))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestGatewayNpmInstallWithInjectedToken: npm, run in the sandbox's namespace with an .npmrc holding only
// the placeholder as its registry token and the sandbox's CA, installs a package from a registry that
// requires the token; the token appears nowhere in the sandbox's home (npm's cache included).
func TestGatewayNpmInstallWithInjectedToken(t *testing.T) {
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Fatalf("npm not installed: %v", err)
	}
	l, internetCA, sandboxCA := newInjectingLab(t, `{"mode":"allowlist","allow":[{"domain":"allowed.test","ports":[9443]}]}`)
	const registry = "https://allowed.test:9443/"
	tgz := tarball(t, "hello-pkg", "1.0.0")
	sha := sha512.Sum512(tgz)
	sum := sha1.Sum(tgz)
	meta, err := json.Marshal(map[string]any{
		"name":      "hello-pkg",
		"dist-tags": map[string]string{"latest": "1.0.0"},
		"versions": map[string]any{"1.0.0": map[string]any{
			"name": "hello-pkg", "version": "1.0.0",
			"dist": map[string]string{
				"tarball":   registry + "hello-pkg/-/hello-pkg-1.0.0.tgz",
				"integrity": "sha512-" + base64.StdEncoding.EncodeToString(sha[:]),
				"shasum":    hex.EncodeToString(sum[:]),
			},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello-pkg", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(meta)
	})
	mux.HandleFunc("GET /hello-pkg/-/hello-pkg-1.0.0.tgz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(tgz)
	})
	l.serveWithToken(t, internetCA, mux)

	home, caFile := l.sandboxHome(t, sandboxCA)
	app := filepath.Join(home, "app")
	files := map[string]string{
		filepath.Join(home, ".npmrc"):      "registry=" + registry + "\n//allowed.test:9443/:_authToken=" + placeholder + "\ncafile=" + caFile + "\n",
		filepath.Join(app, "package.json"): `{"name":"app","version":"1.0.0","private":true}`,
	}
	for path, body := range files {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	install := exec.Command("ip", "netns", "exec", filepath.Base(l.sandbox), npm, "install", "--no-audit", "--no-fund", "--no-update-notifier", "hello-pkg")
	install.Dir = app
	install.Env = []string{"HOME=" + home, "PATH=" + filepath.Dir(npm) + ":/usr/bin:/bin", "npm_config_cache=" + filepath.Join(home, ".npm")}
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("npm install in the sandbox: %v: %s", err, out)
	}
	if b, err := os.ReadFile(filepath.Join(app, "node_modules", "hello-pkg", "index.js")); err != nil || !bytes.Contains(b, []byte("hello from the registry")) {
		t.Fatalf("installed index.js: %q, %v", b, err)
	}
	l.sink.wait(t, "brokered install", func(r Record) bool { return r.Verdict == Injected && r.Name == "allowed.test" })
	holdsNoSecret(t, home)
}
