package fs_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/warren-mesh/warren/internal/blob"
	"github.com/warren-mesh/warren/internal/blob/blobtest"
	"github.com/warren-mesh/warren/internal/blob/fs"
)

func open(t *testing.T) *fs.Store {
	t.Helper()
	s, err := fs.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestContract(t *testing.T) {
	blobtest.Run(t, func(t *testing.T) blob.Store { return open(t) })
}

// Two Stores on one directory, as two processes would have: every call goes to the other one than the
// previous call, so each write is seen, compared against and raced through a different Store.
func TestContractTwoStoresOneDir(t *testing.T) {
	blobtest.Run(t, func(t *testing.T) blob.Store {
		dir := t.TempDir()
		a, err := fs.New(dir)
		if err != nil {
			t.Fatal(err)
		}
		b, err := fs.New(dir)
		if err != nil {
			t.Fatal(err)
		}
		return &alternating{stores: [2]blob.Store{a, b}}
	})
}

type alternating struct {
	stores [2]blob.Store
	n      atomic.Uint64
}

func (a *alternating) next() blob.Store { return a.stores[a.n.Add(1)%2] }

func (a *alternating) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	return a.next().Put(ctx, key, r, size)
}
func (a *alternating) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	return a.next().Get(ctx, key)
}
func (a *alternating) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	return a.next().GetRange(ctx, key, off, n)
}
func (a *alternating) Exists(ctx context.Context, key string) (bool, error) {
	return a.next().Exists(ctx, key)
}
func (a *alternating) Read(ctx context.Context, key string) ([]byte, string, error) {
	return a.next().Read(ctx, key)
}
func (a *alternating) PutIf(ctx context.Context, key string, data []byte, ifMatch string) (string, error) {
	return a.next().PutIf(ctx, key, data, ifMatch)
}
func (a *alternating) Delete(ctx context.Context, key string) error { return a.next().Delete(ctx, key) }
func (a *alternating) Stat(ctx context.Context, key string) (blob.Object, error) {
	return a.next().Stat(ctx, key)
}
func (a *alternating) List(ctx context.Context, prefix string) iter.Seq2[blob.Object, error] {
	return a.next().List(ctx, prefix)
}

// Several processes incrementing one counter with Read/PutIf lose no update: the flock makes PutIf a
// compare-and-set across processes, not only across goroutines.
func TestPutIfAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	const procs, increments = 4, 25
	s := open(t)
	if _, err := s.PutIf(t.Context(), "counter", []byte("0"), ""); err != nil {
		t.Fatal(err)
	}
	cmds := make([]*exec.Cmd, procs)
	for i := range cmds {
		cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestHelperIncrement$", "-test.count=1")
		cmd.Env = append(os.Environ(), "BLOBFS_HELPER_DIR="+s.Dir(), "BLOBFS_HELPER_N="+strconv.Itoa(increments))
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[i] = cmd
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("process %d: %v", i, err)
		}
	}
	data, _, err := s.Read(t.Context(), "counter")
	if err != nil {
		t.Fatal(err)
	}
	if string(data) != strconv.Itoa(procs*increments) {
		t.Fatalf("counter = %s, want %d", data, procs*increments)
	}
}

// TestHelperIncrement is the child process of TestPutIfAcrossProcesses; on its own it does nothing.
func TestHelperIncrement(t *testing.T) {
	dir := os.Getenv("BLOBFS_HELPER_DIR")
	if dir == "" {
		t.Skip("helper process for TestPutIfAcrossProcesses")
	}
	n, _ := strconv.Atoi(os.Getenv("BLOBFS_HELPER_N"))
	s, err := fs.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		if err := blobtest.Increment(t.Context(), s, "counter"); err != nil {
			t.Fatal(err)
		}
	}
}

// Objects are plain files a person can find; failed writes leave no temporary files behind.
func TestLayout(t *testing.T) {
	s := open(t)
	ctx := t.Context()
	if err := s.Put(ctx, "sandboxes/u1/latest", strings.NewReader("{}"), 2); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "sandboxes/u1/latest/x", strings.NewReader("nested"), 6); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "sandboxes/u1/bad", strings.NewReader("short"), 99); err == nil {
		t.Fatal("short Put succeeded")
	}
	if _, err := s.PutIf(ctx, "sandboxes/u1/latest", []byte("x"), ""); !errors.Is(err, blob.ErrPrecondition) {
		t.Fatalf("PutIf = %v, want ErrPrecondition", err)
	}
	var files []string
	err := filepath.WalkDir(s.Dir(), func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(s.Dir(), p)
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"#lock", "sandboxes/u1/latest/x#", "sandboxes/u1/latest#"}
	if fmt.Sprint(files) != fmt.Sprint(want) {
		t.Fatalf("files under the store: %q, want %q", files, want)
	}
	data, err := os.ReadFile(filepath.Join(s.Dir(), "sandboxes/u1/latest#"))
	if err != nil || string(data) != "{}" {
		t.Fatalf("object file = %q, %v", data, err)
	}
}

func TestNewErrors(t *testing.T) {
	f := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.New(f); err == nil {
		t.Fatal("New on a regular file succeeded")
	}
	if _, err := fs.New(filepath.Join(f, "sub")); err == nil {
		t.Fatal("New below a regular file succeeded")
	}
}

// A 256-byte segment is a valid port key but longer than a file name may be here: refused as invalid
// rather than failing later with ENAMETOOLONG.
func TestLongSegment(t *testing.T) {
	s := open(t)
	k := strings.Repeat("a", 255)
	if err := s.Put(t.Context(), k, strings.NewReader("x"), 1); !errors.Is(err, blob.ErrInvalidKey) {
		t.Fatalf("Put = %v, want ErrInvalidKey", err)
	}
	k = strings.Repeat("a", 254)
	if err := s.Put(t.Context(), k, strings.NewReader("x"), 1); err != nil {
		t.Fatalf("Put with a 254-byte segment: %v", err)
	}
}
