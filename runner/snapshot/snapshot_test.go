package snapshot_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/blob"
	blobfs "github.com/warren-mesh/warren/internal/blob/fs"
	"github.com/warren-mesh/warren/runner/snapshot"
)

const prefix = "sandboxes/iss.user"

func newStore(t testing.TB) *blobfs.Store {
	t.Helper()
	s, err := blobfs.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// newSnapshotter returns a Snapshotter over dirs; a name → dir pair with dir "" gets a fresh temp dir.
func newSnapshotter(t testing.TB, store blob.Store, dirs map[string]string, opts ...func(*snapshot.Config)) *snapshot.Snapshotter {
	t.Helper()
	cfg := snapshot.Config{Store: store, Prefix: prefix, Dirs: dirs}
	for _, o := range opts {
		o(&cfg)
	}
	s, err := snapshot.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func write(t testing.TB, p, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil { // not reduced by the umask
		t.Fatal(err)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// tree describes every entry under dir: type, permissions, content hash, size and mtime, or target.
func tree(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := make(map[string]string)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		switch {
		case fi.IsDir():
			out[rel] = fmt.Sprintf("dir %o", fi.Mode().Perm())
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			out[rel] = "symlink -> " + target
		case fi.Mode().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(data)
			out[rel] = fmt.Sprintf("file %o %d %x mtime=%d", fi.Mode().Perm(), len(data), sum[:6], fi.ModTime().UnixNano())
		default:
			out[rel] = "special " + fi.Mode().Type().String()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameTree(t testing.TB, got, want map[string]string) {
	t.Helper()
	keys := slices.Sorted(maps.Keys(want))
	for k := range got {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		if got[k] != want[k] {
			t.Errorf("%s: got %q, want %q", k, got[k], want[k])
		}
	}
}

// makeTree fills a workspace with the kinds of entries a sandbox has.
func makeTree(t testing.TB, dir string) {
	t.Helper()
	write(t, filepath.Join(dir, "README.md"), "# project\n", 0o644)
	write(t, filepath.Join(dir, "bin/run.sh"), "#!/bin/sh\necho hi\n", 0o755)
	write(t, filepath.Join(dir, "secret.txt"), "only me", 0o600)
	write(t, filepath.Join(dir, "src/a/b/c/deep.go"), "package c\n", 0o644)
	write(t, filepath.Join(dir, "src/empty.txt"), "", 0o644)
	write(t, filepath.Join(dir, "src/dup1.txt"), "same content", 0o644)
	write(t, filepath.Join(dir, "src/dup2.txt"), "same content", 0o640)
	write(t, filepath.Join(dir, "ünïcode name.txt"), "utf-8 names", 0o644)
	big := make([]byte, 5<<20+123) // above the in-memory limit: hashed and uploaded as a stream
	for i := range big {
		big[i] = byte(i * 7 / 3)
	}
	write(t, filepath.Join(dir, "data/big.bin"), string(big), 0o644)
	must(t, os.MkdirAll(filepath.Join(dir, "empty/nested/dir"), 0o755))
	must(t, os.MkdirAll(filepath.Join(dir, "private"), 0o700))
	write(t, filepath.Join(dir, "readonly/file"), "in a read-only dir", 0o444)
	must(t, os.Chmod(filepath.Join(dir, "readonly"), 0o555))
	must(t, os.Symlink("README.md", filepath.Join(dir, "link-rel")))
	must(t, os.Symlink("src/a", filepath.Join(dir, "link-dir")))
	must(t, os.Symlink("/etc/passwd", filepath.Join(dir, "link-abs")))
	must(t, os.Symlink("../../outside", filepath.Join(dir, "src/link-out")))
	must(t, os.Symlink("does/not/exist", filepath.Join(dir, "link-dangling")))
	// Set a known mtime on one file to see it restored exactly.
	when := time.Date(2020, 1, 2, 3, 4, 5, 6000, time.UTC)
	must(t, os.Chtimes(filepath.Join(dir, "README.md"), when, when))
}

func gitTree(t testing.TB, dir string) bool {
	t.Helper()
	gitBin, err := exec.LookPath("git")
	if err != nil {
		t.Log("git not installed: no .git directory in the tree")
		return false
	}
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(gitBin, append([]string{"-C", dir, "-c", "user.name=T", "-c", "user.email=t@example.com",
			"-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false"}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	git("init", "-q")
	git("add", "-A")
	git("commit", "-q", "-m", "first")
	write(t, filepath.Join(dir, "README.md"), "# project, edited\n", 0o644)
	git("commit", "-q", "-am", "second")
	return true
}

func runGit(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

func TestRoundTrip(t *testing.T) {
	store := newStore(t)
	src := map[string]string{"workspace": t.TempDir(), "home": t.TempDir()}
	makeTree(t, src["workspace"])
	hasGit := gitTree(t, src["workspace"])
	write(t, filepath.Join(src["home"], ".claude/projects/p/session.jsonl"), `{"type":"user"}`+"\n", 0o600)
	must(t, syscall.Mkfifo(filepath.Join(src["workspace"], "fifo"), 0o644))

	s := newSnapshotter(t, store, src)
	m, st, err := s.Snapshot(t.Context(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if st.Skipped != 1 {
		t.Errorf("Skipped = %d, want 1 (the FIFO)", st.Skipped)
	}
	if m.Epoch != 1 || m.Seq != 1 || len(m.Dirs) != 2 || m.Dirs[0].Name != "home" {
		t.Errorf("manifest %d-%d with dirs %v", m.Epoch, m.Seq, m.Dirs)
	}
	if st.FilesUploaded >= st.Files {
		t.Errorf("uploaded %d blobs for %d files, want duplicates uploaded once", st.FilesUploaded, st.Files)
	}
	must(t, os.Remove(filepath.Join(src["workspace"], "fifo")))

	// A new runner elsewhere: fresh Snapshotter, empty (not even existing) directories.
	base := t.TempDir()
	dst := map[string]string{"workspace": filepath.Join(base, "ws"), "home": filepath.Join(base, "home")}
	r := newSnapshotter(t, store, dst)
	latest, ok, err := r.Latest(t.Context())
	if err != nil || !ok {
		t.Fatalf("Latest = %v, %v", ok, err)
	}
	rst, err := r.Restore(t.Context(), latest)
	if err != nil {
		t.Fatal(err)
	}
	for name := range src {
		sameTree(t, tree(t, dst[name]), tree(t, src[name]))
	}
	if rst.Files != st.Files || rst.Dirs != st.Dirs || rst.Symlinks != st.Symlinks || rst.Bytes != st.Bytes {
		t.Errorf("restore stats %+v, snapshot stats %+v", rst, st)
	}
	if hasGit {
		ws := dst["workspace"]
		if out := runGit(t, ws, "status", "--porcelain"); out != "" {
			t.Errorf("git status after restore:\n%s", out)
		}
		runGit(t, ws, "fsck", "--strict")
		if out := runGit(t, ws, "log", "--format=%s"); out != "second\nfirst\n" {
			t.Errorf("git log = %q", out)
		}
	}
}

// Only the changed file is uploaded; unchanged files are neither uploaded nor, once hashed, read again.
func TestIncremental(t *testing.T) {
	store := newStore(t)
	ws := t.TempDir()
	makeTree(t, ws)
	s := newSnapshotter(t, store, map[string]string{"workspace": ws})
	snapshot.SetRacyMargin(s, 0)
	_, st1, err := s.Snapshot(t.Context(), 1)
	if err != nil {
		t.Fatal(err)
	}

	write(t, filepath.Join(ws, "src/a/b/c/deep.go"), "package c // changed, and longer\n", 0o644)
	_, st2, err := s.Snapshot(t.Context(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if st2.FilesUploaded != 1 || st2.BytesUploaded != int64(len("package c // changed, and longer\n")) {
		t.Errorf("second snapshot uploaded %d files, %d bytes; want 1 file, the changed one", st2.FilesUploaded, st2.BytesUploaded)
	}
	if st2.FilesHashed != 1 {
		t.Errorf("second snapshot hashed %d files, want 1", st2.FilesHashed)
	}
	if st2.Files != st1.Files {
		t.Errorf("files %d then %d", st1.Files, st2.Files)
	}

	// A copy of existing content is not uploaded.
	write(t, filepath.Join(ws, "copy.bin"), "same content", 0o644)
	_, st3, err := s.Snapshot(t.Context(), 1)
	if err != nil || st3.FilesUploaded != 0 {
		t.Errorf("after adding a copy: uploaded %d, %v; want 0", st3.FilesUploaded, err)
	}

	// A runner that starts without history (no restore, no previous snapshot in memory) hashes
	// everything but finds every blob in the store.
	fresh := newSnapshotter(t, store, map[string]string{"workspace": ws})
	m, st4, err := fresh.Snapshot(t.Context(), 2)
	if err != nil {
		t.Fatal(err)
	}
	if st4.FilesUploaded != 0 || st4.FilesHashed != st4.Files {
		t.Errorf("fresh snapshotter: uploaded %d, hashed %d of %d; want 0 uploaded, all hashed", st4.FilesUploaded, st4.FilesHashed, st4.Files)
	}
	if m.Epoch != 2 || m.Seq != 1 {
		t.Errorf("manifest %d-%d, want 2-1", m.Epoch, m.Seq)
	}
}

// With the real margin, files hashed moments after they were written are hashed again next time: a
// same-size write within the same timestamp tick would otherwise go unseen.
func TestRacyClean(t *testing.T) {
	now := time.Unix(1000, 0)
	cases := []struct {
		name         string
		mtime, ctime int64
		want         bool
	}{
		{"old", now.Add(-time.Second).UnixNano() + 1, now.Add(-time.Second).UnixNano() + 1, true},
		{"ctime within the margin", now.Add(-time.Second).UnixNano(), now.Add(-10 * time.Millisecond).UnixNano(), false},
		{"mtime in the future", now.Add(time.Hour).UnixNano(), now.Add(-time.Second).UnixNano(), false},
		{"whole seconds, 1s old", now.Add(-time.Second).UnixNano(), now.Add(-time.Second).UnixNano(), false},
		{"whole seconds, 3s old", now.Add(-3 * time.Second).UnixNano(), now.Add(-3 * time.Second).UnixNano(), true},
	}
	for _, c := range cases {
		if got := snapshot.Trusted(c.mtime, c.ctime, now, 50*time.Millisecond); got != c.want {
			t.Errorf("%s: trusted = %v, want %v", c.name, got, c.want)
		}
	}

	store := newStore(t)
	ws := t.TempDir()
	write(t, filepath.Join(ws, "f"), "aaaa", 0o644)
	s := newSnapshotter(t, store, map[string]string{"workspace": ws})
	if _, _, err := s.Snapshot(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(ws, "f"), "bbbb", 0o644) // same size, likely the same timestamp tick
	m, _, err := s.Snapshot(t.Context(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("%x", sha256.Sum256([]byte("bbbb"))); m.Dirs[0].Entries[0].SHA256 != want {
		t.Fatal("a same-size rewrite right after a snapshot was missed")
	}
}

// Deletions and type changes in the source, and extra entries in the target, are all reflected.
func TestRestoreReflectsDeletions(t *testing.T) {
	store := newStore(t)
	src, dst := t.TempDir(), t.TempDir()
	makeTree(t, src)
	s := newSnapshotter(t, store, map[string]string{"workspace": src})
	if _, _, err := s.Snapshot(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	r := newSnapshotter(t, store, map[string]string{"workspace": dst})
	m, _, err := r.Latest(t.Context())
	must(t, err)
	if _, err := r.Restore(t.Context(), m); err != nil {
		t.Fatal(err)
	}

	must(t, os.Remove(filepath.Join(src, "secret.txt")))
	must(t, os.RemoveAll(filepath.Join(src, "src/a")))
	must(t, os.Remove(filepath.Join(src, "link-rel")))
	must(t, os.RemoveAll(filepath.Join(src, "empty/nested")))
	must(t, os.Remove(filepath.Join(src, "bin/run.sh")))
	must(t, os.Mkdir(filepath.Join(src, "bin/run.sh"), 0o755)) // file → dir
	must(t, os.Remove(filepath.Join(src, "link-dir")))
	write(t, filepath.Join(src, "link-dir"), "symlink → file", 0o644)
	must(t, os.Chmod(filepath.Join(src, "readonly"), 0o755))
	must(t, os.RemoveAll(filepath.Join(src, "readonly")))
	must(t, os.Symlink("README.md", filepath.Join(src, "readonly"))) // dir → symlink
	must(t, os.Remove(filepath.Join(src, "link-abs")))
	must(t, os.Symlink("/etc/hostname", filepath.Join(src, "link-abs"))) // new target
	must(t, os.Chmod(filepath.Join(src, "README.md"), 0o600))            // mode only

	// The target has things of its own, including a read-only tree.
	write(t, filepath.Join(dst, "extra.txt"), "not in any snapshot", 0o644)
	write(t, filepath.Join(dst, "extra/dir/f"), "x", 0o644)
	write(t, filepath.Join(dst, "ro/deep/f"), "x", 0o444)
	must(t, os.Chmod(filepath.Join(dst, "ro/deep"), 0o555))
	must(t, os.Chmod(filepath.Join(dst, "ro"), 0o555))

	if _, _, err := s.Snapshot(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	m, _, err = r.Latest(t.Context())
	must(t, err)
	st, err := r.Restore(t.Context(), m)
	if err != nil {
		t.Fatal(err)
	}
	sameTree(t, tree(t, dst), tree(t, src))
	if st.FilesDownloaded != 1 { // link-dir, now a file; all other files were already in place
		t.Errorf("downloaded %d files, want 1", st.FilesDownloaded)
	}
}

func TestExclude(t *testing.T) {
	store := newStore(t)
	src, dst := t.TempDir(), t.TempDir()
	write(t, filepath.Join(src, "main.go"), "package main", 0o644)
	write(t, filepath.Join(src, "node_modules/x/index.js"), "x", 0o644)
	write(t, filepath.Join(src, ".warren-upload-123"), "an upload in progress", 0o600)
	write(t, filepath.Join(dst, "node_modules/y/index.js"), "y", 0o644)
	exclude := func(c *snapshot.Config) {
		c.Exclude = func(name, p string) bool { return name == "workspace" && p == "node_modules" }
	}
	s := newSnapshotter(t, store, map[string]string{"workspace": src}, exclude)
	m, _, err := s.Snapshot(t.Context(), 1)
	must(t, err)
	if len(m.Dirs[0].Entries) != 1 || m.Dirs[0].Entries[0].Path != "main.go" {
		t.Fatalf("entries %+v, want only main.go", m.Dirs[0].Entries)
	}
	r := newSnapshotter(t, store, map[string]string{"workspace": dst}, exclude)
	_, err = r.Restore(t.Context(), m)
	must(t, err)
	if _, err := os.Stat(filepath.Join(dst, "node_modules/y/index.js")); err != nil {
		t.Errorf("excluded path removed by restore: %v", err)
	}
}

// A stale runner (older epoch) cannot make its snapshot latest, whether the newer epoch committed
// before it started or while it was uploading.
func TestFencing(t *testing.T) {
	store := newStore(t)
	ws := t.TempDir()
	write(t, filepath.Join(ws, "f"), "new owner", 0o644)
	newer := newSnapshotter(t, store, map[string]string{"workspace": ws})
	m2, _, err := newer.Snapshot(t.Context(), 2)
	must(t, err)

	staleWS := t.TempDir()
	write(t, filepath.Join(staleWS, "f"), "stale owner", 0o644)
	stale := newSnapshotter(t, store, map[string]string{"workspace": staleWS})
	if _, _, err := stale.Snapshot(t.Context(), 1); !errors.Is(err, snapshot.ErrFenced) {
		t.Fatalf("stale Snapshot = %v, want ErrFenced", err)
	}
	assertLatest(t, store, m2)

	// The newer owner commits while the stale one is between writing its manifest and committing it.
	store2 := newStore(t)
	newer = newSnapshotter(t, store2, map[string]string{"workspace": ws})
	var once sync.Once
	hooked := &hookStore{Store: store2, beforePutIf: func(key string) {
		if strings.Contains(key, "/manifests/1-") {
			once.Do(func() {
				m2, _, err = newer.Snapshot(context.Background(), 2)
			})
		}
	}}
	stale = newSnapshotter(t, hooked, map[string]string{"workspace": staleWS})
	if _, _, err := stale.Snapshot(t.Context(), 1); !errors.Is(err, snapshot.ErrFenced) {
		t.Fatalf("stale Snapshot racing a newer epoch = %v, want ErrFenced", err)
	}
	must(t, err)
	assertLatest(t, store2, m2)
	if ok, _ := store2.Exists(t.Context(), prefix+"/manifests/1-1.json"); ok {
		t.Error("the fenced manifest was left behind")
	}

	// The same epoch continues its sequence, also across a restart; a newer one starts at 1.
	for i, want := range []struct{ epoch, seq int64 }{{2, 2}, {2, 3}, {3, 1}} {
		m, _, err := newer.Snapshot(t.Context(), want.epoch)
		if err != nil || m.Epoch != want.epoch || m.Seq != want.seq {
			t.Fatalf("snapshot %d: %d-%d, %v; want %d-%d", i, m.Epoch, m.Seq, err, want.epoch, want.seq)
		}
	}
	restarted := newSnapshotter(t, store2, map[string]string{"workspace": ws})
	if m, _, err := restarted.Snapshot(t.Context(), 3); err != nil || m.Seq != 2 {
		t.Fatalf("after a restart in epoch 3: %d-%d, %v; want 3-2", m.Epoch, m.Seq, err)
	}
}

func assertLatest(t *testing.T, store blob.Store, want snapshot.Manifest) {
	t.Helper()
	s := newSnapshotter(t, store, map[string]string{"workspace": t.TempDir()})
	got, ok, err := s.Latest(t.Context())
	if err != nil || !ok || got.Epoch != want.Epoch || got.Seq != want.Seq {
		t.Fatalf("latest = %d-%d (%v, %v), want %d-%d", got.Epoch, got.Seq, ok, err, want.Epoch, want.Seq)
	}
	if got.Dirs[0].Entries[0].SHA256 != want.Dirs[0].Entries[0].SHA256 {
		t.Fatal("latest manifest does not hold the newer epoch's content")
	}
}

// Two Snapshotters of one epoch racing (which single ownership rules out, but must not corrupt
// anything): every snapshot gets its own manifest and commits; latest names one of them.
func TestSameEpochRace(t *testing.T) {
	store := newStore(t)
	var wg sync.WaitGroup
	errs := make(chan error, 10)
	seqs := make(chan int64, 10)
	for w := range 2 {
		ws := t.TempDir()
		write(t, filepath.Join(ws, "f"), fmt.Sprint("writer ", w), 0o644)
		s := newSnapshotter(t, store, map[string]string{"workspace": ws})
		wg.Go(func() {
			for range 5 {
				m, _, err := s.Snapshot(t.Context(), 7)
				errs <- err
				seqs <- m.Seq
			}
		})
	}
	wg.Wait()
	close(errs)
	close(seqs)
	for err := range errs {
		must(t, err)
	}
	seen := map[int64]bool{}
	for seq := range seqs {
		if seen[seq] {
			t.Errorf("seq %d used twice", seq)
		}
		seen[seq] = true
	}
	s := newSnapshotter(t, store, map[string]string{"workspace": t.TempDir()})
	if m, ok, err := s.Latest(t.Context()); err != nil || !ok || m.Epoch != 7 {
		t.Fatalf("latest %d-%d, %v, %v", m.Epoch, m.Seq, ok, err)
	}
}

// A file growing between its hash and its upload is read again; the stored blob always matches its
// name.
func TestFileChangesDuringUpload(t *testing.T) {
	store := newStore(t)
	ws := t.TempDir()
	big := strings.Repeat("0123456789abcdef", (5<<20)/16)
	write(t, filepath.Join(ws, "log"), big, 0o644)
	var once sync.Once
	hooked := &hookStore{Store: store, beforeStat: func(key string) {
		once.Do(func() {
			f, err := os.OpenFile(filepath.Join(ws, "log"), os.O_APPEND|os.O_WRONLY, 0)
			must(t, err)
			f.WriteString("appended while snapshotting\n")
			f.Close()
		})
	}}
	s := newSnapshotter(t, hooked, map[string]string{"workspace": ws})
	m, st, err := s.Snapshot(t.Context(), 1)
	must(t, err)
	if st.FilesUploaded != 1 || m.Dirs[0].Entries[0].Size != int64(len(big)+len("appended while snapshotting\n")) {
		t.Fatalf("uploaded %d, size %d", st.FilesUploaded, m.Dirs[0].Entries[0].Size)
	}
	dst := t.TempDir()
	r := newSnapshotter(t, store, map[string]string{"workspace": dst})
	_, err = r.Restore(t.Context(), m)
	must(t, err)
	sameTree(t, tree(t, dst), tree(t, ws))
}

func TestCorruption(t *testing.T) {
	store := newStore(t)
	ws := t.TempDir()
	write(t, filepath.Join(ws, "a.txt"), "the real content", 0o644)
	write(t, filepath.Join(ws, "b.txt"), "other content", 0o644)
	s := newSnapshotter(t, store, map[string]string{"workspace": ws})
	m, _, err := s.Snapshot(t.Context(), 1)
	must(t, err)
	sha := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	ctx := t.Context()

	t.Run("wrong blob content", func(t *testing.T) {
		key := prefix + "/blobs/" + sha("the real content")
		must(t, store.Put(ctx, key, strings.NewReader("tampered content"), 16))
		t.Cleanup(func() { must(t, store.Put(ctx, key, strings.NewReader("the real content"), 16)) })
		dst := t.TempDir()
		r := newSnapshotter(t, store, map[string]string{"workspace": dst})
		if _, err := r.Restore(ctx, m); !errors.Is(err, snapshot.ErrCorrupt) {
			t.Fatalf("Restore = %v, want ErrCorrupt", err)
		}
		nothingLeft(t, dst, "a.txt")
	})
	t.Run("missing blob", func(t *testing.T) {
		key := prefix + "/blobs/" + sha("other content")
		must(t, store.Delete(ctx, key))
		t.Cleanup(func() { must(t, store.Put(ctx, key, strings.NewReader("other content"), 13)) })
		r := newSnapshotter(t, store, map[string]string{"workspace": t.TempDir()})
		if _, err := r.Restore(ctx, m); !errors.Is(err, snapshot.ErrCorrupt) || !errors.Is(err, blob.ErrNotFound) {
			t.Fatalf("Restore = %v, want ErrCorrupt and ErrNotFound", err)
		}
	})
	t.Run("bad latest pointer", func(t *testing.T) {
		data, etag, err := store.Read(ctx, prefix+"/latest")
		must(t, err)
		t.Cleanup(func() { must(t, store.Put(ctx, prefix+"/latest", strings.NewReader(string(data)), int64(len(data)))) })
		for _, bad := range []string{
			`not json`,
			`{"epoch":1,"seq":1,"manifest":"elsewhere/manifests/1-1.json","time":"2024-01-01T00:00:00Z"}`,
			`{"epoch":1,"seq":1,"manifest":"` + prefix + `/manifests/1-1.json","time":"2024-01-01T00:00:00Z","x":1}`,
		} {
			etag, err = store.PutIf(ctx, prefix+"/latest", []byte(bad), etag)
			must(t, err)
			if _, _, err := s.Latest(ctx); !errors.Is(err, snapshot.ErrCorrupt) {
				t.Errorf("Latest with pointer %s = %v, want ErrCorrupt", bad, err)
			}
			// Nor can it be snapshotted over: a pointer that cannot be read might hold a newer epoch.
			if _, _, err := s.Snapshot(ctx, 5); !errors.Is(err, snapshot.ErrCorrupt) {
				t.Errorf("Snapshot with pointer %s = %v, want ErrCorrupt", bad, err)
			}
		}
	})
	t.Run("manifest of another version", func(t *testing.T) {
		key := prefix + "/manifests/1-1.json"
		data, _, err := store.Read(ctx, key)
		must(t, err)
		t.Cleanup(func() { must(t, store.Put(ctx, key, strings.NewReader(string(data)), int64(len(data)))) })
		bumped := strings.Replace(string(data), `"version":1`, `"version":2`, 1)
		must(t, store.Put(ctx, key, strings.NewReader(bumped), int64(len(bumped))))
		if _, _, err := s.Latest(ctx); !errors.Is(err, snapshot.ErrCorrupt) {
			t.Fatalf("Latest = %v, want ErrCorrupt", err)
		}
	})
}

// nothingLeft checks that a failed restore left neither the file at name nor a temporary file in dst.
func nothingLeft(t *testing.T, dst, name string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(dst, name)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s after a failed restore: %v", name, err)
	}
	if leftovers, _ := filepath.Glob(filepath.Join(dst, ".warren-restore-*")); len(leftovers) > 0 {
		t.Errorf("temporary files left: %v", leftovers)
	}
}

// Manifests and existing trees are hostile: nothing is written outside the directory, and no symlink
// is followed.
func TestHostile(t *testing.T) {
	store := newStore(t)
	ctx := t.Context()
	content := "payload"
	sum := sha256.Sum256([]byte(content))
	sha := hex.EncodeToString(sum[:])
	must(t, store.Put(ctx, prefix+"/blobs/"+sha, strings.NewReader(content), int64(len(content))))
	file := func(p string) snapshot.Entry {
		return snapshot.Entry{Path: p, Type: snapshot.TypeFile, Mode: 0o644, Size: int64(len(content)), SHA256: sha}
	}
	dir := func(p string) snapshot.Entry { return snapshot.Entry{Path: p, Type: snapshot.TypeDir, Mode: 0o755} }
	link := func(p, target string) snapshot.Entry {
		return snapshot.Entry{Path: p, Type: snapshot.TypeSymlink, Target: target}
	}

	hostile := map[string][]snapshot.Entry{
		"dotdot":              {file("../escape")},
		"dotdot inside":       {dir("a"), file("a/../../escape")},
		"absolute":            {file("/tmp/escape")},
		"not clean":           {dir("a"), file("a//b")},
		"dot":                 {file(".")},
		"empty":               {file("")},
		"nul":                 {file("a\x00b")},
		"through a symlink":   {link("l", ".."), file("l/escape")},
		"through a symlink 2": {link("l", "/tmp"), dir("l/sub"), file("l/sub/escape")},
		"through a file":      {file("f"), file("f/escape")},
		"parent missing":      {file("nodir/escape")},
		"duplicate":           {file("a"), dir("a")},
		"setuid":              {{Path: "x", Type: snapshot.TypeFile, Mode: 0o4755, Size: 7, SHA256: sha}},
		"bad hash":            {{Path: "x", Type: snapshot.TypeFile, Mode: 0o644, Size: 7, SHA256: "../../etc/passwd"}},
		"unknown type":        {{Path: "x", Type: "device"}},
		"symlink without":     {link("l", "")},
	}
	for name, entries := range hostile {
		t.Run(name, func(t *testing.T) {
			base := t.TempDir()
			ws := filepath.Join(base, "ws")
			must(t, os.Mkdir(ws, 0o755))
			m := snapshot.Manifest{Version: 1, Epoch: 1, Seq: 1, Dirs: []snapshot.Dir{{Name: "workspace", Entries: entries}}}
			r := newSnapshotter(t, store, map[string]string{"workspace": ws})
			if _, err := r.Restore(ctx, m); !errors.Is(err, snapshot.ErrCorrupt) {
				t.Fatalf("Restore = %v, want ErrCorrupt", err)
			}
			data, err := json.Marshal(m)
			must(t, err)
			if _, err := snapshot.ParseManifest(data); !errors.Is(err, snapshot.ErrCorrupt) {
				t.Fatalf("ParseManifest = %v, want ErrCorrupt", err)
			}
			if got := tree(t, base); len(got) != 1 {
				t.Fatalf("something was written: %v", got)
			}
		})
	}

	// A hostile existing tree: symlinks where the manifest has a directory and a file. Restore replaces
	// them; it does not write through them.
	t.Run("existing symlinks", func(t *testing.T) {
		base := t.TempDir()
		ws, outside := filepath.Join(base, "ws"), filepath.Join(base, "outside")
		must(t, os.Mkdir(ws, 0o755))
		write(t, filepath.Join(outside, "victim"), "keep me", 0o644)
		must(t, os.Symlink(outside, filepath.Join(ws, "src")))
		must(t, os.Symlink(filepath.Join(outside, "victim"), filepath.Join(ws, "f")))
		must(t, os.Symlink("../outside", filepath.Join(ws, "rel")))
		m := snapshot.Manifest{Version: 1, Epoch: 1, Seq: 1, Dirs: []snapshot.Dir{{Name: "workspace", Entries: []snapshot.Entry{
			dir("src"), file("src/victim"), file("f"), dir("rel"), file("rel/victim"), link("ln", outside),
		}}}}
		r := newSnapshotter(t, store, map[string]string{"workspace": ws})
		_, err := r.Restore(ctx, m)
		must(t, err)
		want := map[string]string{"victim": tree(t, outside)["victim"]}
		sameTree(t, tree(t, outside), want)
		if data, _ := os.ReadFile(filepath.Join(outside, "victim")); string(data) != "keep me" {
			t.Fatalf("the file outside now holds %q", data)
		}
		got := tree(t, ws)
		for _, p := range []string{"src", "rel"} {
			if !strings.HasPrefix(got[p], "dir ") {
				t.Errorf("%s is %q, want a directory", p, got[p])
			}
		}
		if !strings.HasPrefix(got["f"], "file ") || got["ln"] != "symlink -> "+outside {
			t.Errorf("tree %v", got)
		}
	})
}

func TestLatestNone(t *testing.T) {
	s := newSnapshotter(t, newStore(t), map[string]string{"workspace": t.TempDir()})
	if _, ok, err := s.Latest(t.Context()); ok || err != nil {
		t.Fatalf("Latest = %v, %v; want false, nil", ok, err)
	}
}

func TestNewValidates(t *testing.T) {
	store := newStore(t)
	dir := t.TempDir()
	cases := map[string]snapshot.Config{
		"no store":      {Prefix: prefix, Dirs: map[string]string{"w": dir}},
		"no prefix":     {Store: store, Dirs: map[string]string{"w": dir}},
		"bad prefix":    {Store: store, Prefix: "a//b", Dirs: map[string]string{"w": dir}},
		"slash prefix":  {Store: store, Prefix: "a/", Dirs: map[string]string{"w": dir}},
		"no dirs":       {Store: store, Prefix: prefix},
		"relative dir":  {Store: store, Prefix: prefix, Dirs: map[string]string{"w": "rel"}},
		"bad dir name":  {Store: store, Prefix: prefix, Dirs: map[string]string{"a/b": dir}},
		"concurrency<0": {Store: store, Prefix: prefix, Dirs: map[string]string{"w": dir}, Concurrency: -1},
	}
	for name, cfg := range cases {
		if _, err := snapshot.New(cfg); !errors.Is(err, snapshot.ErrConfig) {
			t.Errorf("%s: New = %v, want ErrConfig", name, err)
		}
	}
	if _, _, err := newSnapshotter(t, store, map[string]string{"w": dir}).Snapshot(t.Context(), -1); err == nil {
		t.Error("Snapshot at a negative epoch succeeded")
	}
}

// hookStore runs test code before some calls to the real store, to interleave another writer at an
// exact point.
type hookStore struct {
	blob.Store
	beforePutIf func(key string)
	beforeStat  func(key string)
}

func (h *hookStore) PutIf(ctx context.Context, key string, data []byte, ifMatch string) (string, error) {
	if h.beforePutIf != nil {
		h.beforePutIf(key)
	}
	return h.Store.PutIf(ctx, key, data, ifMatch)
}

func (h *hookStore) Stat(ctx context.Context, key string) (blob.Object, error) {
	if h.beforeStat != nil {
		h.beforeStat(key)
	}
	return h.Store.Stat(ctx, key)
}
