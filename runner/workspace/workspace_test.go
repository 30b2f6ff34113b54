package workspace

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/warren-mesh/warren/internal/wire"
)

// newRoot returns an open workspace in a temp dir, beside a directory "outside" holding secret.txt.
func newRoot(t testing.TB) (w *Root, dir, outside string) {
	t.Helper()
	base := t.TempDir()
	dir = filepath.Join(base, "ws")
	outside = filepath.Join(base, "outside")
	for _, d := range []string{dir, outside} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(outside, "secret.txt"), []byte("s3cret"), 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w, dir, outside
}

func assertCode(t testing.TB, err error, code wire.Code, sentinel error) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %s", code)
	}
	if c := wire.CodeOf(err); c != code {
		t.Fatalf("code = %s, want %s (err %v)", c, code, err)
	}
	if sentinel != nil && !errors.Is(err, sentinel) {
		t.Fatalf("errors.Is(%v, %v) = false", err, sentinel)
	}
}

func TestClassifyEscape(t *testing.T) {
	w, dir, outside := newRoot(t)
	if err := os.Symlink(outside, filepath.Join(dir, "out")); err != nil {
		t.Fatal(err)
	}
	_, err := w.root.Open("out/secret.txt")
	if err == nil {
		t.Fatal("os.Root followed a symlink out of the root")
	}
	if !isEscape(err) {
		t.Fatalf("isEscape(%v) = false: os.Root's escape error text changed; update escapeMessage", err)
	}
}

func TestWriteReadListRemove(t *testing.T) {
	w, dir, _ := newRoot(t)
	wr, err := w.Write("a/b/c.txt", strings.NewReader("hello"), WriteOptions{Parents: true, MaxSize: 100})
	if err != nil || !wr.Created || wr.Size != 5 || wr.Path != "a/b/c.txt" {
		t.Fatalf("Write = %+v, %v", wr, err)
	}
	if err := os.Chmod(filepath.Join(dir, "a/b/c.txt"), 0o600); err != nil {
		t.Fatal(err)
	}
	wr, err = w.Write("./a/b/c.txt", strings.NewReader("hello, again"), WriteOptions{MaxSize: 100})
	if err != nil || wr.Created || wr.Size != 12 {
		t.Fatalf("overwrite = %+v, %v", wr, err)
	}
	fi, err := os.Stat(filepath.Join(dir, "a/b/c.txt"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("replaced file mode = %v, %v; want 0600 kept", fi.Mode(), err)
	}

	f, size, err := w.Open("a/b/c.txt")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(f)
	f.Close()
	if string(b) != "hello, again" || size != 12 {
		t.Fatalf("read %q (size %d)", b, size)
	}

	if _, err := w.Write("z.txt", strings.NewReader("z"), WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	l, err := w.List("")
	if err != nil {
		t.Fatal(err)
	}
	if l.Path != "." || len(l.Entries) != 2 || l.Entries[0].Name != "a" || l.Entries[0].Type != "dir" ||
		l.Entries[1].Name != "z.txt" || l.Entries[1].Type != "file" || l.Entries[1].Path != "z.txt" {
		t.Fatalf("List = %+v", l)
	}
	l, err = w.List("a/b")
	if err != nil || len(l.Entries) != 1 || l.Entries[0].Path != "a/b/c.txt" || l.Entries[0].Size != 12 {
		t.Fatalf("List(a/b) = %+v, %v", l, err)
	}

	assertCode(t, w.Remove("a", false), wire.Conflict, ErrIsDir)
	assertCode(t, w.Remove(".", true), wire.PermissionDenied, ErrRoot)
	assertCode(t, w.Remove("nope", false), wire.NotFound, ErrNotFound)
	if err := w.Remove("z.txt", false); err != nil {
		t.Fatal(err)
	}
	if err := w.Remove("a", true); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("workspace not empty after removes: %v", ents)
	}
}

func TestWriteTooLargeLeavesNothing(t *testing.T) {
	w, dir, _ := newRoot(t)
	_, err := w.Write("d/big.bin", bytes.NewReader(make([]byte, 1025)), WriteOptions{Parents: true, MaxSize: 1024})
	assertCode(t, err, wire.PayloadTooLarge, ErrTooLarge)
	ents, _ := os.ReadDir(filepath.Join(dir, "d"))
	if len(ents) != 0 {
		t.Fatalf("left behind: %v", ents)
	}
	if _, err := w.Write("d/ok.bin", bytes.NewReader(make([]byte, 1024)), WriteOptions{MaxSize: 1024}); err != nil {
		t.Fatalf("write at exactly the cap: %v", err)
	}
}

func TestWriteErrors(t *testing.T) {
	w, dir, _ := newRoot(t)
	if err := os.Mkdir(filepath.Join(dir, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := w.Write("missing/x", strings.NewReader("x"), WriteOptions{})
	assertCode(t, err, wire.NotFound, ErrNotFound)
	_, err = w.Write("d", strings.NewReader("x"), WriteOptions{})
	assertCode(t, err, wire.Conflict, ErrIsDir)
	_, err = w.Write(".", strings.NewReader("x"), WriteOptions{})
	assertCode(t, err, wire.InvalidArgument, ErrRoot)
}

func TestOpenRefusesNonFiles(t *testing.T) {
	w, dir, _ := newRoot(t)
	if err := os.Mkdir(filepath.Join(dir, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err := w.Open("d")
	assertCode(t, err, wire.InvalidArgument, ErrIsDir)
	_, _, err = w.Open("fifo") // must not block
	assertCode(t, err, wire.InvalidArgument, ErrInvalidPath)
	_, _, err = w.Open("nope")
	assertCode(t, err, wire.NotFound, ErrNotFound)
	_, err = w.List("fifo")
	assertCode(t, err, wire.InvalidArgument, ErrInvalidPath)
	_, err = w.Dir("fifo")
	assertCode(t, err, wire.InvalidArgument, ErrInvalidPath)
}

func TestEscapes(t *testing.T) {
	w, dir, outside := newRoot(t)
	for name, target := range map[string]string{
		"out":    outside, // absolute symlink to a sibling directory
		"up":     "..",    // relative symlink to the parent
		"etc":    "/etc",  // absolute symlink to a system directory
		"secret": "../outside/secret.txt",
		"inside": "d", // stays inside: allowed
	} {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path string
		code wire.Code
	}{
		{"../outside/secret.txt", wire.PermissionDenied},
		{"a/../../outside/secret.txt", wire.PermissionDenied},
		{"/etc/passwd", wire.PermissionDenied},
		{"out/secret.txt", wire.PermissionDenied},
		{"up/outside/secret.txt", wire.PermissionDenied},
		{"etc/passwd", wire.PermissionDenied},
		{"secret", wire.PermissionDenied},
		{"a\x00b", wire.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			_, _, err := w.Open(tt.path)
			assertCode(t, err, tt.code, nil)
			_, err = w.List(tt.path)
			assertCode(t, err, tt.code, nil)
			_, err = w.Write(tt.path+"/x", strings.NewReader("pwned"), WriteOptions{Parents: true})
			assertCode(t, err, tt.code, nil)
			_, err = w.Dir(tt.path)
			assertCode(t, err, tt.code, nil)
		})
	}
	t.Run("write through symlinked dir", func(t *testing.T) {
		_, err := w.Write("out/new.txt", strings.NewReader("pwned"), WriteOptions{Parents: true})
		assertCode(t, err, wire.PermissionDenied, ErrEscapes)
		if _, err := os.Stat(filepath.Join(outside, "new.txt")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("file written outside the workspace: %v", err)
		}
	})
	t.Run("remove symlink removes the link only", func(t *testing.T) {
		if err := w.Remove("out", false); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(outside, "secret.txt")); err != nil {
			t.Fatalf("target touched: %v", err)
		}
	})
	t.Run("symlink inside is followed", func(t *testing.T) {
		if _, err := w.Write("inside/f", strings.NewReader("ok"), WriteOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(dir, "d", "f")); err != nil {
			t.Fatal(err)
		}
	})
}
