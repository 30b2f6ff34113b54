package templates

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warren-mesh/warren/internal/wire"
)

// entry is one tar entry for tests.
type entry struct {
	name, body, link string
	typ              byte
	mode             int64
}

func makeTar(t testing.TB, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Linkname: e.link, Size: int64(len(e.body)), Format: tar.FormatPAX}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if h.Typeflag != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestUnpackTree(t *testing.T) {
	dir := t.TempDir()
	data := makeTar(t,
		entry{name: "./", typ: tar.TypeDir, mode: 0o755},
		entry{name: "./README.md", body: "hello\n"},
		entry{name: "src/", typ: tar.TypeDir, mode: 0o500},
		entry{name: "src/main.go", body: "package main\n", mode: 0o4755}, // setuid dropped
		entry{name: "deep/er/file", body: "implied parents"},
		entry{name: "src/link", typ: tar.TypeSymlink, link: "../README.md"},
	)
	files, size, err := Unpack(context.Background(), bytes.NewReader(data), dir, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if files != 3 || size != int64(len("hello\n")+len("package main\n")+len("implied parents")) {
		t.Errorf("files %d size %d", files, size)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "src/link")); err != nil || string(b) != "hello\n" {
		t.Errorf("through the link: %q %v", b, err)
	}
	fi, err := os.Stat(filepath.Join(dir, "src/main.go"))
	if err != nil || fi.Mode() != 0o755 {
		t.Errorf("main.go mode %v %v, want -rwxr-xr-x", fi.Mode(), err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "src")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("src mode %v %v, want the owner's rwx added to 0500", fi.Mode(), err)
	}
}

// TestUnpackRefusesAttacks tries what a hostile archive would: every one is refused with a typed error,
// and nothing is written outside the target.
func TestUnpackRefusesAttacks(t *testing.T) {
	cases := []struct {
		name    string
		entries []entry
		code    wire.Code
	}{
		{"absolute", []entry{{name: "/etc/passwd", body: "x"}}, wire.InvalidArgument},
		{"dotdot", []entry{{name: "../escape", body: "x"}}, wire.InvalidArgument},
		{"inner dotdot", []entry{{name: "a/../../escape", body: "x"}}, wire.InvalidArgument},
		{"unclean", []entry{{name: "a//b", body: "x"}}, wire.InvalidArgument},
		{"symlink absolute", []entry{{name: "l", typ: tar.TypeSymlink, link: "/etc"}}, wire.InvalidArgument},
		{"symlink escape", []entry{{name: "a/l", typ: tar.TypeSymlink, link: "../../x"}}, wire.InvalidArgument},
		{"write through symlink", []entry{
			{name: "l", typ: tar.TypeSymlink, link: "."},
			{name: "l/file", body: "x"},
		}, wire.InvalidArgument},
		{"file as parent", []entry{{name: "f", body: "x"}, {name: "f/g", body: "y"}}, wire.InvalidArgument},
		{"duplicate", []entry{{name: "f", body: "x"}, {name: "./f", body: "y"}}, wire.InvalidArgument},
		{"hard link", []entry{{name: "f", body: "x"}, {name: "h", typ: tar.TypeLink, link: "f"}}, wire.InvalidArgument},
		{"char device", []entry{{name: "null", typ: tar.TypeChar}}, wire.InvalidArgument},
		{"block device", []entry{{name: "sda", typ: tar.TypeBlock}}, wire.InvalidArgument},
		{"fifo", []entry{{name: "p", typ: tar.TypeFifo}}, wire.InvalidArgument},
		{"root not a dir", []entry{{name: "./", typ: tar.TypeSymlink, link: "x"}}, wire.InvalidArgument},
		{"invalid UTF-8", []entry{{name: "a\xffb", body: "x"}}, wire.InvalidArgument},
		{"too many files", []entry{{name: "a"}, {name: "b"}, {name: "c"}, {name: "d"}}, wire.PayloadTooLarge},
		{"too large", []entry{{name: "a", body: strings.Repeat("x", 600)}, {name: "b", body: strings.Repeat("y", 600)}}, wire.PayloadTooLarge},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			parent := t.TempDir()
			dir := filepath.Join(parent, "tree")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			_, _, err := Unpack(context.Background(), bytes.NewReader(makeTar(t, c.entries...)), dir, Limits{MaxFiles: 3, MaxBytes: 1000})
			if err == nil {
				t.Fatal("accepted")
			}
			if got := wire.CodeOf(err); got != c.code {
				t.Errorf("code %s, want %s: %v", got, c.code, err)
			}
			if !errors.Is(err, ErrBadArchive) && !errors.Is(err, ErrTooLarge) {
				t.Errorf("not ErrBadArchive/ErrTooLarge: %v", err)
			}
			ents, _ := os.ReadDir(parent)
			if len(ents) != 1 {
				t.Errorf("something was written beside the tree: %v", ents)
			}
		})
	}
}

func TestUnpackGarbage(t *testing.T) {
	_, _, err := Unpack(context.Background(), strings.NewReader(strings.Repeat("not a tar ", 100)), t.TempDir(), Limits{})
	if wire.CodeOf(err) != wire.InvalidArgument {
		t.Fatalf("got %v", err)
	}
}

// FuzzUnpack feeds arbitrary bytes as an archive: Unpack never panics, never writes outside its directory
// (a sibling directory stays empty), and what it accepts holds only regular files, directories and
// symlinks whose targets stay inside.
func FuzzUnpack(f *testing.F) {
	f.Add(makeTar(f, entry{name: "a/b", body: "x"}, entry{name: "l", typ: tar.TypeSymlink, link: "a/b"}))
	f.Add(makeTar(f, entry{name: "../x", body: "x"}))
	f.Add(makeTar(f, entry{name: "l", typ: tar.TypeSymlink, link: "."}, entry{name: "l/x", body: "x"}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		parent := t.TempDir()
		dir, sibling := filepath.Join(parent, "tree"), filepath.Join(parent, "sibling")
		for _, d := range []string{dir, sibling} {
			if err := os.Mkdir(d, 0o700); err != nil {
				t.Fatal(err)
			}
		}
		_, _, err := Unpack(context.Background(), bytes.NewReader(data), dir, Limits{MaxFiles: 50, MaxBytes: 1 << 16})
		if ents, _ := os.ReadDir(sibling); len(ents) > 0 {
			t.Fatalf("wrote outside: %v", ents)
		}
		if ents, _ := os.ReadDir(parent); len(ents) != 2 {
			t.Fatalf("wrote beside the tree: %v", ents)
		}
		if err != nil {
			if c := wire.CodeOf(err); c != wire.InvalidArgument && c != wire.PayloadTooLarge {
				t.Fatalf("untyped refusal %s: %v", c, err)
			}
			return
		}
		err = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			switch d.Type() {
			case 0, os.ModeDir:
			case os.ModeSymlink:
				target, err := os.Readlink(p)
				if err != nil {
					return err
				}
				rel, _ := filepath.Rel(dir, filepath.Join(filepath.Dir(p), target))
				if filepath.IsAbs(target) || rel == ".." || strings.HasPrefix(rel, "../") {
					t.Errorf("symlink %s → %s leaves the tree", p, target)
				}
			default:
				t.Errorf("%s is a %v", p, d.Type())
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}
