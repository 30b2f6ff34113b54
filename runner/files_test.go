package runner_test

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner"
)

func filesPath(p string, extra ...string) string {
	q := url.Values{"path": {p}}
	for i := 0; i+1 < len(extra); i += 2 {
		q.Set(extra[i], extra[i+1])
	}
	return "/v1/sandbox/files?" + q.Encode()
}

func TestFilesRoundTrip(t *testing.T) {
	h := startRunner(t)

	resp := h.do(t, http.MethodPut, filesPath("a/b/c.txt"), strings.NewReader("hello"))
	var fw wire.FileWritten
	decode(t, resp, http.StatusCreated, &fw)
	if fw.Path != "a/b/c.txt" || fw.Size != 5 {
		t.Fatalf("PUT = %+v", fw)
	}
	resp = h.do(t, http.MethodPut, filesPath("a/b/c.txt"), strings.NewReader("hello, world"))
	decode(t, resp, http.StatusOK, &fw)
	if fw.Size != 12 {
		t.Fatalf("overwrite = %+v", fw)
	}

	resp = h.do(t, http.MethodGet, filesPath("a/b/c.txt"), nil)
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || string(b) != "hello, world" ||
		resp.Header.Get("Content-Type") != "application/octet-stream" || resp.ContentLength != 12 {
		t.Fatalf("GET: %d %q %q len %d", resp.StatusCode, b, resp.Header.Get("Content-Type"), resp.ContentLength)
	}

	// The sandbox sees what the API wrote, and the API sees what the sandbox wrote.
	if res := h.exec(t, wire.ExecRequest{Command: "cat a/b/c.txt; echo from-sandbox > a/z.txt"}); res.Stdout != "hello, world" {
		t.Fatalf("sandbox read %q", res.Stdout)
	}
	resp = h.do(t, http.MethodPut, filesPath("a/0.txt"), strings.NewReader(""))
	decode(t, resp, http.StatusCreated, nil)

	resp = h.do(t, http.MethodGet, "/v1/sandbox/files/list?path=a", nil)
	var l wire.FileList
	decode(t, resp, http.StatusOK, &l)
	var names []string
	for _, e := range l.Entries {
		names = append(names, e.Name+":"+e.Type+":"+e.Path)
	}
	if l.Path != "a" || strings.Join(names, ",") != "0.txt:file:a/0.txt,b:dir:a/b,z.txt:file:a/z.txt" {
		t.Fatalf("list = %+v", l)
	}
	resp = h.do(t, http.MethodGet, "/v1/sandbox/files/list", nil)
	decode(t, resp, http.StatusOK, &l)
	if l.Path != "." || len(l.Entries) != 1 || l.Entries[0].Name != "a" || l.Entries[0].ModTime == "" || l.Entries[0].Mode == "" {
		t.Fatalf("list root = %+v", l)
	}

	wantError(t, h.do(t, http.MethodGet, filesPath("a"), nil), wire.InvalidArgument)
	wantError(t, h.do(t, http.MethodGet, filesPath("nope.txt"), nil), wire.NotFound)
	wantError(t, h.do(t, http.MethodGet, "/v1/sandbox/files", nil), wire.InvalidArgument)
	wantError(t, h.do(t, http.MethodGet, "/v1/sandbox/files/list?path=a/0.txt", nil), wire.InvalidArgument)
	wantError(t, h.do(t, http.MethodGet, "/v1/sandbox/files/list?path=nope", nil), wire.NotFound)
	wantError(t, h.do(t, http.MethodPut, filesPath("a"), strings.NewReader("x")), wire.Conflict)
	wantError(t, h.do(t, http.MethodPut, filesPath("new/x.txt", "parents", "false"), strings.NewReader("x")), wire.NotFound)
	wantError(t, h.do(t, http.MethodPut, filesPath("x", "parents", "maybe"), strings.NewReader("x")), wire.InvalidArgument)

	wantError(t, h.do(t, http.MethodDelete, filesPath("a"), nil), wire.Conflict)
	wantError(t, h.do(t, http.MethodDelete, filesPath("."), nil), wire.PermissionDenied)
	wantError(t, h.do(t, http.MethodDelete, filesPath("", "recursive", "true"), nil), wire.PermissionDenied)
	if resp := h.do(t, http.MethodDelete, filesPath("a/b/c.txt"), nil); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE file: %d", resp.StatusCode)
	}
	wantError(t, h.do(t, http.MethodGet, filesPath("a/b/c.txt"), nil), wire.NotFound)
	wantError(t, h.do(t, http.MethodDelete, filesPath("a/b/c.txt"), nil), wire.NotFound)
	if resp := h.do(t, http.MethodDelete, filesPath("a", "recursive", "true"), nil); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE dir: %d", resp.StatusCode)
	}
	if ents, _ := os.ReadDir(h.ws); len(ents) != 0 {
		t.Fatalf("workspace not empty: %v", ents)
	}
}

func TestFilesLarge(t *testing.T) {
	h := startRunner(t, func(c *runner.Config) { c.MaxFileSize = 24 << 20 })
	data := make([]byte, 20<<20)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	// io.MultiReader hides the length, so the body is sent chunked and streamed through.
	resp := h.do(t, http.MethodPut, filesPath("big/blob.bin"), io.MultiReader(bytes.NewReader(data)))
	var fw wire.FileWritten
	decode(t, resp, http.StatusCreated, &fw)
	if fw.Size != int64(len(data)) {
		t.Fatalf("PUT size %d", fw.Size)
	}
	resp = h.do(t, http.MethodGet, filesPath("big/blob.bin"), nil)
	if resp.ContentLength != int64(len(data)) {
		t.Fatalf("Content-Length %d", resp.ContentLength)
	}
	hash := sha256.New()
	if _, err := io.Copy(hash, resp.Body); err != nil {
		t.Fatal(err)
	}
	if want := sha256.Sum256(data); !bytes.Equal(hash.Sum(nil), want[:]) {
		t.Fatal("downloaded bytes differ")
	}

	t.Run("over the cap leaves nothing behind", func(t *testing.T) {
		over := make([]byte, 25<<20)
		for name, body := range map[string]io.Reader{
			"chunked":        io.MultiReader(bytes.NewReader(over)),
			"content-length": bytes.NewReader(over),
		} {
			t.Run(name, func(t *testing.T) {
				resp := h.do(t, http.MethodPut, filesPath("big/over.bin"), body)
				wantError(t, resp, wire.PayloadTooLarge)
				ents, _ := os.ReadDir(filepath.Join(h.ws, "big"))
				if len(ents) != 1 || ents[0].Name() != "blob.bin" {
					t.Fatalf("left behind: %v", ents)
				}
			})
		}
	})
}

func TestFilesPathEscapes(t *testing.T) {
	h := startRunner(t)
	outside := filepath.Join(h.base, "outside")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{
		"etc":    "/etc",                // symlink to a system directory
		"outdir": outside,               // symlink to a host directory beside the workspace
		"up":     "..",                  // relative symlink climbing out
		"pw":     "/etc/passwd",         // symlink to a file outside
		"bob":    "../../bob/workspace", // another user's workspace
	} {
		if err := os.Symlink(target, filepath.Join(h.ws, name)); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		path string
		code wire.Code
	}{
		{"../x", wire.PermissionDenied},
		{"a/../../x", wire.PermissionDenied},
		{"/etc/passwd", wire.PermissionDenied},
		{"etc/passwd", wire.PermissionDenied},
		{"pw", wire.PermissionDenied},
		{"outdir/f", wire.PermissionDenied},
		{"up/workspace/x", wire.PermissionDenied},
		{"bob/secret.txt", wire.PermissionDenied},
		{"a\x00b", wire.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			wantError(t, h.do(t, http.MethodGet, filesPath(tt.path), nil), tt.code)
			wantError(t, h.do(t, http.MethodGet, "/v1/sandbox/files/list?path="+url.QueryEscape(tt.path), nil), tt.code)
			if tt.path != "pw" { // PUT on a symlink replaces the link itself, which is allowed
				wantError(t, h.do(t, http.MethodPut, filesPath(tt.path), strings.NewReader("pwned")), tt.code)
			}
			wantError(t, h.do(t, http.MethodPut, filesPath(tt.path+"/sub"), strings.NewReader("pwned")), tt.code)
		})
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Fatalf("written outside the workspace: %v", ents)
	}
	t.Run("deleting a symlink removes only the link", func(t *testing.T) {
		if resp := h.do(t, http.MethodDelete, filesPath("bob"), nil); resp.StatusCode != http.StatusNoContent {
			t.Fatalf("DELETE: %d", resp.StatusCode)
		}
		if _, err := os.Stat(filepath.Join(h.other, "secret.txt")); err != nil {
			t.Fatal(err)
		}
	})
}
