package snapshot_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/blob"
	blobs3 "github.com/warren-mesh/warren/internal/blob/s3"
	"github.com/warren-mesh/warren/internal/testenv"
	"github.com/warren-mesh/warren/runner/snapshot"
)

// testRangeSize is the range size of the tests: blobs of more than 2 KiB are fetched in ranges.
const testRangeSize = 1 << 10

// randomFile writes n random bytes (of seed) to p.
func randomFile(t testing.TB, p string, n int, seed byte) []byte {
	t.Helper()
	data := make([]byte, n)
	rand.NewChaCha8([32]byte{seed}).Read(data)
	must(t, os.MkdirAll(filepath.Dir(p), 0o755))
	must(t, os.WriteFile(p, data, 0o640))
	return data
}

// rangedSizes are file sizes around the range boundaries: fetched whole up to two ranges, else in
// ranges, the last one short or full.
var rangedSizes = []int{0, 1, testRangeSize, 2 * testRangeSize, 2*testRangeSize + 1, 5 * testRangeSize, 7*testRangeSize + 3, 64*testRangeSize + 100}

// Large blobs are fetched in parallel ranges, from the directory store and from S3 (versitygw), and
// restore byte for byte, with their modes and mtimes; restoring again over the result fetches nothing.
func TestRestoreInRanges(t *testing.T) {
	stores := map[string]func(t *testing.T) blob.Store{
		"fs": func(t *testing.T) blob.Store { return newStore(t) },
		"s3": func(t *testing.T) blob.Store {
			if testing.Short() {
				t.Skip("starts versitygw")
			}
			srv := testenv.StartS3(t)
			s, err := blobs3.New(t.Context(), blobs3.Config{Endpoint: srv.Endpoint(), Region: srv.Region(),
				Bucket: srv.CreateBucket(t), PathStyle: true, AccessKey: srv.AccessKey(), SecretKey: srv.SecretKey()})
			must(t, err)
			return s
		},
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			store := open(t)
			ws := t.TempDir()
			for i, n := range rangedSizes {
				randomFile(t, filepath.Join(ws, fmt.Sprintf("d%d/f%d", i%3, n)), n, byte(i))
			}
			m, _, err := newSnapshotter(t, store, map[string]string{"workspace": ws}).Snapshot(t.Context(), 1)
			must(t, err)

			dst := t.TempDir()
			counted := &rangeCounter{Store: store}
			r := newSnapshotter(t, counted, map[string]string{"workspace": dst}, func(c *snapshot.Config) { c.FetchConcurrency = 5 })
			snapshot.SetRangeSize(r, testRangeSize)
			st, err := r.Restore(t.Context(), m)
			must(t, err)
			sameTree(t, tree(t, dst), tree(t, ws))
			if want := len(rangedSizes) - 1; st.FilesDownloaded != want {
				t.Errorf("downloaded %d files, want %d (all but the empty one)", st.FilesDownloaded, want)
			}
			if got, want := counted.n.Load(), int64(3+5+8+65); got != want {
				t.Errorf("%d ranged GETs, want %d", got, want)
			}
			st, err = r.Restore(t.Context(), m)
			must(t, err)
			if st.FilesDownloaded != 0 {
				t.Errorf("restoring over the same tree downloaded %d files", st.FilesDownloaded)
			}
		})
	}
}

// rangeCounter counts GetRange calls.
type rangeCounter struct {
	blob.Store
	n atomic.Int64
}

func (c *rangeCounter) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	c.n.Add(1)
	return c.Store.GetRange(ctx, key, off, n)
}

// A blob fetched in ranges is checked against its hash like any other: a blob tampered with in one
// range, cut short or missing fails the restore with ErrCorrupt, and neither it nor a temporary file is
// left in the directory.
func TestRestoreRangedCorruption(t *testing.T) {
	store := newStore(t)
	ws := t.TempDir()
	data := randomFile(t, filepath.Join(ws, "big.db"), 10*testRangeSize+17, 1)
	m, _, err := newSnapshotter(t, store, map[string]string{"workspace": ws}).Snapshot(t.Context(), 1)
	must(t, err)
	key := prefix + "/blobs/" + m.Dirs[0].Entries[0].SHA256
	ctx := t.Context()

	tampered := bytes.Clone(data)
	tampered[4*testRangeSize+5] ^= 1
	for _, c := range []struct {
		name    string
		content []byte // nil: deleted
	}{
		{"one byte of a middle range changed", tampered},
		{"cut short", data[:len(data)-1]},
		{"cut to the first range", data[:testRangeSize]},
		{"missing", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.content == nil {
				must(t, store.Delete(ctx, key))
			} else {
				must(t, store.Put(ctx, key, bytes.NewReader(c.content), int64(len(c.content))))
			}
			t.Cleanup(func() { must(t, store.Put(ctx, key, bytes.NewReader(data), int64(len(data)))) })
			dst := t.TempDir()
			r := newSnapshotter(t, store, map[string]string{"workspace": dst})
			snapshot.SetRangeSize(r, testRangeSize)
			if _, err := r.Restore(ctx, m); !errors.Is(err, snapshot.ErrCorrupt) {
				t.Fatalf("Restore = %v, want ErrCorrupt", err)
			}
			nothingLeft(t, dst, "big.db")
		})
	}
}

// The snapshot after a restore reads no file Restore wrote or found in place (their hashes are known),
// only those written since: a turn after a resume costs what any turn does, not a read of the whole tree.
func TestSnapshotAfterRestoreReadsOnlyChanges(t *testing.T) {
	store := newStore(t)
	ws := t.TempDir()
	makeTree(t, ws)
	randomFile(t, filepath.Join(ws, "big.db"), 10*testRangeSize, 1)
	m, st0, err := newSnapshotter(t, store, map[string]string{"workspace": ws}).Snapshot(t.Context(), 1)
	must(t, err)

	dst := t.TempDir()
	r := newSnapshotter(t, store, map[string]string{"workspace": dst})
	snapshot.SetRangeSize(r, testRangeSize)
	snapshot.SetRacyMargin(r, 0)
	_, err = r.Restore(t.Context(), m)
	must(t, err)
	_, st, err := r.Snapshot(t.Context(), 2)
	must(t, err)
	if st.FilesHashed != 0 || st.Files != st0.Files {
		t.Errorf("snapshot after a restore hashed %d of %d files, want none", st.FilesHashed, st.Files)
	}

	// With the real margin, a same-size rewrite right after the restore, its mtime put back, is seen.
	dst = t.TempDir()
	r = newSnapshotter(t, store, map[string]string{"workspace": dst})
	_, err = r.Restore(t.Context(), m)
	must(t, err)
	p := filepath.Join(dst, "big.db")
	fi, err := os.Stat(p)
	must(t, err)
	changed := randomFile(t, p, 10*testRangeSize, 2)
	must(t, os.Chtimes(p, time.Time{}, fi.ModTime()))
	m2, _, err := r.Snapshot(t.Context(), 2)
	must(t, err)
	for _, e := range m2.Dirs[0].Entries {
		if e.Path == "big.db" && e.SHA256 != fmt.Sprintf("%x", sha256.Sum256(changed)) {
			t.Fatal("a rewrite right after the restore was missed")
		}
	}
}
