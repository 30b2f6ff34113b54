package devstack_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The npm package of the TypeScript SDK, as `npm publish` would upload it: npm pack (which runs prepack, the
// build without source maps) into a temporary directory, then the tarball's files and package.json read back.
// It holds the README, LICENSE (the repository's), CHANGELOG, examples and the compiled sources with
// typings, nothing of the tests; the examples type-check against the package; and the unpacked package
// loads in Node by its exports.
func TestTypeScriptSDKPackage(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs npm")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Fatalf("npm not found: run make sdk-js (%v)", err)
	}
	if _, err := os.Stat(filepath.Join(sdkJSDir, "node_modules", "typescript")); err != nil {
		t.Fatalf("the TypeScript SDK's npm packages are not installed (%v): run make sdk-js", err)
	}
	dest := t.TempDir()
	pack := exec.CommandContext(ctx, npm, "pack", "--json", "--pack-destination", dest)
	pack.Dir = sdkJSDir
	out, err := pack.Output()
	if err != nil {
		t.Fatalf("npm pack: %v\n%s", err, stderrOf(err))
	}
	var packed []struct {
		Filename string `json:"filename"`
	}
	if err := json.Unmarshal(out, &packed); err != nil || len(packed) != 1 {
		t.Fatalf("npm pack --json: %v\n%s", err, out)
	}
	files := untar(t, filepath.Join(dest, packed[0].Filename))

	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, want := range []string{"package.json", "README.md", "LICENSE", "CHANGELOG.md", "examples/agent.ts",
		"examples/mint-token.ts", "dist/src/index.js", "dist/src/index.d.ts", "dist/src/token.js", "dist/src/token.d.ts"} {
		if _, ok := files[want]; !ok {
			t.Errorf("the package has no %s; it holds %v", want, names)
		}
	}
	for _, n := range names {
		if strings.Contains(n, "test") || strings.HasSuffix(n, ".map") || strings.HasPrefix(n, "src/") || strings.Contains(n, "bench") {
			t.Errorf("the package holds %s: no tests, benchmarks, sources or source maps belong in it", n)
		}
		if strings.HasSuffix(n, ".js") && bytes.Contains(files[n], []byte("sourceMappingURL")) {
			t.Errorf("%s points at a source map the package does not hold", n)
		}
	}
	license, err := os.ReadFile("../../LICENSE")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(files["LICENSE"], license) || !bytes.Contains(license, []byte("Apache License\n                           Version 2.0")) {
		t.Error("the package's LICENSE is not the repository's Apache-2.0 LICENSE (copy LICENSE to sdk/js/LICENSE)")
	}
	checkPackageJSON(t, files["package.json"])

	// The examples type-check against the built package (resolved by its own name, as a user's would).
	tsc := exec.CommandContext(ctx, "node", filepath.Join("node_modules", "typescript", "bin", "tsc"), "-p", "examples")
	tsc.Dir = sdkJSDir
	if out, err := tsc.CombinedOutput(); err != nil {
		t.Errorf("the examples do not type-check: %v\n%s", err, out)
	}
	loadUnpacked(t, ctx, files)
}

func stderrOf(err error) []byte {
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		return ee.Stderr
	}
	return nil
}

// checkPackageJSON checks what npm and its users read: a public Apache-2.0 package with its repository,
// keywords, typings and both entry points.
func checkPackageJSON(t *testing.T, raw []byte) {
	t.Helper()
	var p struct {
		Name       string                                `json:"name"`
		Version    string                                `json:"version"`
		License    string                                `json:"license"`
		Private    bool                                  `json:"private"`
		Types      string                                `json:"types"`
		Keywords   []string                              `json:"keywords"`
		Exports    map[string]any                        `json:"exports"`
		Repository struct{ Type, URL, Directory string } `json:"repository"`
		Publish    struct {
			Access string `json:"access"`
		} `json:"publishConfig"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		t.Fatalf("package.json: %v", err)
	}
	switch {
	case p.Name != "@warren/sdk" || p.Version == "":
		t.Errorf("package.json: name %q version %q", p.Name, p.Version)
	case p.License != "Apache-2.0":
		t.Errorf("package.json: license %q, want Apache-2.0", p.License)
	case p.Private:
		t.Error("package.json: private: npm refuses to publish it")
	case p.Publish.Access != "public":
		t.Errorf("package.json: publishConfig.access %q: a scoped package is published restricted unless public", p.Publish.Access)
	case p.Repository.URL != "git+https://github.com/warren-mesh/warren.git" || p.Repository.Directory != "sdk/js":
		t.Errorf("package.json: repository %+v", p.Repository)
	case len(p.Keywords) == 0 || p.Types == "":
		t.Errorf("package.json: keywords %v types %q", p.Keywords, p.Types)
	case p.Exports["."] == nil || p.Exports["./token"] == nil:
		t.Errorf("package.json: exports %v, want . and ./token", p.Exports)
	}
}

// loadUnpacked lays the tarball out as node_modules/@warren/sdk of a fresh project and imports both entry
// points from it: a Client is made, a token minted, and bad arguments are WarrenErrors.
func loadUnpacked(t *testing.T, ctx context.Context, files map[string][]byte) {
	t.Helper()
	project := t.TempDir()
	for name, data := range files {
		p := filepath.Join(project, "node_modules", "@warren", "sdk", filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const script = `
import { Client, WarrenError } from "@warren/sdk";
import { mintToken } from "@warren/sdk/token";
const tok = mintToken("wsk_" + "A1".repeat(22), { iss: "acme", sub: "u", budget: { window: "lifetime" } });
const c = new Client("http://127.0.0.1:1", tok);
let refused = "";
try { new Client(undefined, tok); } catch (e) { refused = e instanceof WarrenError ? e.code : String(e); }
console.log(c.url, tok.split(".").length, refused);
`
	run := exec.CommandContext(ctx, "node", "--input-type=module", "-e", script)
	run.Dir = project
	out, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("node importing the unpacked package: %v\n%s", err, out)
	}
	if got, want := strings.TrimSpace(string(out)), "http://127.0.0.1:1 3 invalid_argument"; got != want {
		t.Errorf("the unpacked package printed %q, want %q", got, want)
	}
}

// untar reads a gzipped npm tarball: its regular files by path below package/.
func untar(t *testing.T, file string) map[string][]byte {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		name, ok := strings.CutPrefix(path.Clean(h.Name), "package/")
		if !ok || h.Typeflag != tar.TypeReg {
			t.Fatalf("tarball entry %q (type %c): want regular files under package/", h.Name, h.Typeflag)
		}
		if files[name], err = io.ReadAll(tr); err != nil {
			t.Fatal(err)
		}
	}
}
