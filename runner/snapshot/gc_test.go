package snapshot_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/blob"
	blobs3 "github.com/warren-mesh/warren/internal/blob/s3"
	"github.com/warren-mesh/warren/internal/testenv"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner/snapshot"
)

// backend is a blob store for a test and the directory its bytes end up in on disk.
type backend struct {
	store blob.Store
	disk  string
}

// eachBackend runs fn on the fs store and on S3 (a real versitygw; skipped under -short).
func eachBackend(t *testing.T, fn func(t *testing.T, b backend)) {
	t.Run("fs", func(t *testing.T) {
		s := newStore(t)
		fn(t, backend{store: s, disk: s.Dir()})
	})
	t.Run("s3", func(t *testing.T) {
		if testing.Short() {
			t.Skip("starts versitygw")
		}
		srv := testenv.StartS3(t)
		bucket := srv.CreateBucket(t)
		s, err := blobs3.New(t.Context(), blobs3.Config{
			Endpoint: srv.Endpoint(), Region: srv.Region(), Bucket: bucket,
			AccessKey: srv.AccessKey(), SecretKey: srv.SecretKey(), PathStyle: true,
		})
		must(t, err)
		fn(t, backend{store: s, disk: filepath.Join(srv.DataDir(), bucket)})
	})
}

// offsetClock is time.Now moved forward by what the test says, to age the store's objects.
type offsetClock struct{ d atomic.Int64 }

func (c *offsetClock) Now() time.Time          { return time.Now().Add(time.Duration(c.d.Load())) }
func (c *offsetClock) Advance(d time.Duration) { c.d.Add(int64(d)) }

// storedBytes sums the sizes List gives under the prefix.
func storedBytes(t testing.TB, s blob.Store) int64 {
	t.Helper()
	var n int64
	for o, err := range s.List(context.Background(), prefix+"/") {
		must(t, err)
		n += o.Size
	}
	return n
}

// diskBytes sums the sizes of the regular files under dir: what the store really occupies.
func diskBytes(t testing.TB, dir string) int64 {
	t.Helper()
	var n int64
	must(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			n += fi.Size()
		}
		return nil
	}))
	return n
}

// fenceBytes is the size of the fence object a reclaim writes (0 when there is none).
func fenceBytes(t testing.TB, s blob.Store) int64 {
	t.Helper()
	o, err := s.Stat(context.Background(), prefix+"/fence")
	if errors.Is(err, blob.ErrNotFound) {
		return 0
	}
	must(t, err)
	return o.Size
}

func keysUnder(t testing.TB, s blob.Store, p string) []string {
	t.Helper()
	var ks []string
	for o, err := range s.List(context.Background(), prefix+"/"+p) {
		must(t, err)
		ks = append(ks, strings.TrimPrefix(o.Key, prefix+"/"+p))
	}
	return ks
}

func writeRandom(t testing.TB, p string, size int, seed uint64) {
	t.Helper()
	f, err := os.Create(p)
	must(t, err)
	_, err = io.Copy(f, io.LimitReader(rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)}), int64(size)))
	must(t, err)
	must(t, f.Close())
}

// restoresTo checks that the latest snapshot restores, every blob present and right, to want's tree.
func restoresTo(t *testing.T, store blob.Store, want string) {
	t.Helper()
	r := newSnapshotter(t, store, map[string]string{"workspace": t.TempDir()})
	m, ok, err := r.Latest(t.Context())
	if err != nil || !ok {
		t.Fatalf("latest: %v, %v", ok, err)
	}
	dst := t.TempDir()
	r = newSnapshotter(t, store, map[string]string{"workspace": dst})
	if _, err := r.Restore(t.Context(), m); err != nil {
		t.Fatalf("restore %d-%d: %v", m.Epoch, m.Seq, err)
	}
	sameTree(t, tree(t, dst), tree(t, want))
}

// The review's finding: 60 MB written and deleted stayed in the store for good. Now, once the snapshot
// without them is the only one retained and the blobs are older than the grace period, Collect removes
// them and the store shrinks back to the size of what is left.
func TestGCReclaimsDeletedFiles(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		ws := t.TempDir()
		write(t, filepath.Join(ws, "keep.txt"), "small file that stays", 0o644)
		clock := &offsetClock{}
		s := newSnapshotter(t, b.store, map[string]string{"workspace": ws}, func(c *snapshot.Config) {
			c.Now, c.Retention = clock.Now, 1
		})
		_, _, err := s.Snapshot(ctx, 1)
		must(t, err)
		empty := diskBytes(t, b.disk)

		for i := range 6 {
			writeRandom(t, filepath.Join(ws, fmt.Sprintf("big%d", i)), 10<<20, uint64(i+1))
		}
		_, _, err = s.Snapshot(ctx, 1)
		must(t, err)
		withBig := diskBytes(t, b.disk)

		for i := range 6 {
			must(t, os.Remove(filepath.Join(ws, fmt.Sprintf("big%d", i))))
		}
		_, _, err = s.Snapshot(ctx, 1)
		must(t, err)
		afterDelete := diskBytes(t, b.disk)

		// Within the grace period nothing goes, retention or not.
		st, err := s.Collect(ctx)
		must(t, err)
		if st.BlobsDeleted != 0 || st.ManifestsDeleted != 0 {
			t.Fatalf("young objects collected: %+v", st)
		}
		clock.Advance(snapshot.DefaultGrace + time.Minute)
		st, err = s.Collect(ctx)
		must(t, err)
		afterGC := diskBytes(t, b.disk)
		t.Logf("%s store on disk: %d bytes empty, %d with 60 MiB, %d after deleting it and snapshotting, %d after gc (%+v)",
			t.Name(), empty, withBig, afterDelete, afterGC, st)

		if afterDelete < withBig || withBig-empty < 60<<20 {
			t.Fatalf("the store did not hold the 60 MiB: %d → %d → %d", empty, withBig, afterDelete)
		}
		if st.BlobsDeleted != 6 || st.BytesDeleted < 60<<20 || st.ManifestsDeleted != 2 {
			t.Fatalf("gc = %+v, want the 6 blobs (60 MiB) and the 2 older manifests", st)
		}
		if afterGC > empty+64<<10 {
			t.Fatalf("store is %d bytes after gc, %d before the 60 MiB: did not shrink back", afterGC, empty)
		}
		if got, want := s.StoredBytes(), storedBytes(t, b.store); got != want || st.StoredBytes != want {
			t.Fatalf("StoredBytes = %d, gc says %d, the store holds %d", got, st.StoredBytes, want)
		}
		restoresTo(t, b.store, ws)
	})
}

// Retention keeps the newest snapshots (and their blobs) restorable; older ones go with the blobs only they
// named, once past the grace period.
func TestGCRetention(t *testing.T) {
	ctx := t.Context()
	store := newStore(t)
	ws := t.TempDir()
	clock := &offsetClock{}
	s := newSnapshotter(t, store, map[string]string{"workspace": ws}, func(c *snapshot.Config) {
		c.Now, c.Retention = clock.Now, 3
	})
	var manifests []snapshot.Manifest
	trees := make([]map[string]string, 7)
	for i := range 7 {
		os.RemoveAll(filepath.Join(ws, fmt.Sprintf("f%d", i-1)))
		write(t, filepath.Join(ws, fmt.Sprintf("f%d", i)), fmt.Sprintf("version %d", i), 0o644)
		write(t, filepath.Join(ws, "shared"), "in every snapshot", 0o644)
		m, _, err := s.Snapshot(ctx, 1)
		must(t, err)
		manifests = append(manifests, m)
		trees[i] = tree(t, ws)
	}
	clock.Advance(snapshot.DefaultGrace + time.Minute)
	st, err := s.Collect(ctx)
	must(t, err)
	if st.ManifestsDeleted != 4 || st.BlobsDeleted != 4 || st.ManifestsKept != 3 {
		t.Fatalf("gc = %+v, want 4 manifests and their 4 own blobs gone, 3 kept", st)
	}
	if got := keysUnder(t, store, "manifests/"); len(got) != 3 || strings.Join(got, " ") != "1-5.json 1-6.json 1-7.json" {
		t.Fatalf("manifests left: %v", got)
	}
	if got := keysUnder(t, store, "blobs/"); len(got) != 4 { // f4, f5, f6 and shared
		t.Fatalf("blobs left: %v", got)
	}
	for i := 4; i < 7; i++ {
		dst := t.TempDir()
		r := newSnapshotter(t, store, map[string]string{"workspace": dst})
		_, err := r.Restore(ctx, manifests[i])
		must(t, err)
		sameTree(t, tree(t, dst), trees[i])
	}
	// A second run finds nothing more to do.
	st, err = s.Collect(ctx)
	must(t, err)
	if st.ManifestsDeleted+st.BlobsDeleted != 0 {
		t.Fatalf("second gc = %+v", st)
	}
}

// A snapshot and a collection interleaved at the worst point: the snapshot has uploaded its new blobs and
// found an old one it needs again, but not yet written its manifest, when Collect (of another
// Snapshotter, as a stale runner's would be) lists and sweeps. Nothing the snapshot uses is collected,
// and it restores whole afterwards.
func TestGCDuringSnapshot(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		const grace = 3 * time.Second
		ws := t.TempDir()
		write(t, filepath.Join(ws, "old.txt"), "content that comes back", 0o644)
		gc := newSnapshotter(t, b.store, map[string]string{"workspace": t.TempDir()}, func(c *snapshot.Config) {
			c.Retention, c.Grace = 1, grace
		})
		var gcStats snapshot.GCStats
		var gcErr error
		hooked := &hookStore{Store: b.store, beforePutIf: func(key string) {
			if strings.HasSuffix(key, "/manifests/1-3.json") {
				gcStats, gcErr = gc.Collect(ctx)
			}
		}}
		s := newSnapshotter(t, hooked, map[string]string{"workspace": ws}, func(c *snapshot.Config) {
			c.Retention, c.Grace = 1, grace
		})
		_, _, err := s.Snapshot(ctx, 1)
		must(t, err)
		must(t, os.Remove(filepath.Join(ws, "old.txt")))
		write(t, filepath.Join(ws, "other.txt"), "something else", 0o644)
		_, _, err = s.Snapshot(ctx, 1) // 1-2: old.txt's blob is now named by no retained snapshot
		must(t, err)
		time.Sleep(grace + 1500*time.Millisecond) // old.txt's blob and manifest 1-1 are past the grace period

		write(t, filepath.Join(ws, "old.txt"), "content that comes back", 0o644) // the old blob is needed again
		write(t, filepath.Join(ws, "new.txt"), "brand new content", 0o644)
		_, st, err := s.Snapshot(ctx, 1) // 1-3, with gc run just before its manifest is written
		must(t, err)
		must(t, gcErr)
		if gcStats.ManifestsDeleted != 1 {
			t.Fatalf("gc during the snapshot = %+v, want manifest 1-1 collected", gcStats)
		}
		if gcStats.BlobsDeleted != 0 {
			t.Fatalf("gc during the snapshot deleted %d blobs the snapshot uses", gcStats.BlobsDeleted)
		}
		if st.FilesUploaded != 2 {
			t.Fatalf("uploaded %d files, want 2: new.txt, and old.txt's old blob written again", st.FilesUploaded)
		}
		restoresTo(t, b.store, ws)

		// Once nothing names other.txt's blob and it is old, it goes; the rest stays restorable.
		must(t, os.Remove(filepath.Join(ws, "other.txt")))
		_, _, err = s.Snapshot(ctx, 1)
		must(t, err)
		time.Sleep(grace + 1500*time.Millisecond)
		st2, err := gc.Collect(ctx)
		must(t, err)
		if st2.BlobsDeleted != 1 {
			t.Fatalf("gc = %+v, want other.txt's blob collected", st2)
		}
		restoresTo(t, b.store, ws)
	})
}

// Snapshots of content that keeps coming back, with a collector running all the while on a short grace
// period: every committed snapshot restores whole.
func TestGCRacesSnapshots(t *testing.T) {
	ctx := t.Context()
	store := newStore(t)
	const grace = 600 * time.Millisecond
	opts := func(c *snapshot.Config) { c.Retention, c.Grace = 1, grace }
	gc := newSnapshotter(t, store, map[string]string{"workspace": t.TempDir()}, opts)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var collected atomic.Int64
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			st, err := gc.Collect(ctx)
			if err != nil {
				t.Errorf("gc: %v", err)
				return
			}
			collected.Add(int64(st.BlobsDeleted))
			time.Sleep(5 * time.Millisecond)
		}
	})
	ws := t.TempDir()
	s := newSnapshotter(t, store, map[string]string{"workspace": ws}, opts)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 40 {
		for f := range 4 {
			p := filepath.Join(ws, fmt.Sprintf("f%d", f))
			if rng.IntN(3) == 0 {
				os.Remove(p)
			} else {
				write(t, p, fmt.Sprintf("content %d", rng.IntN(6)), 0o644) // few contents: they come back
			}
		}
		// A snapshot slower than half the grace period (a loaded machine) is refused by design, and
		// the next one tries again; what matters is that every committed one restores whole.
		var err error
		for try := 0; try < 5; try++ {
			if _, _, err = s.Snapshot(ctx, 1); !errors.Is(err, snapshot.ErrTooSlow) {
				break
			}
		}
		if err != nil {
			t.Fatalf("snapshot %d: %v", i, err)
		}
		restoresTo(t, store, ws)
		time.Sleep(time.Duration(rng.IntN(200)) * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if collected.Load() == 0 {
		t.Fatal("the collector never collected anything: the test did not exercise it")
	}
	t.Logf("%d blobs collected while 40 snapshots ran", collected.Load())
}

// A snapshot that would take the stored bytes past the limit fails with resource_exhausted before
// uploading, and the previous snapshot stays latest and restorable.
func TestStoredBytesQuota(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		ws := t.TempDir()
		var limit atomic.Int64
		limit.Store(3 << 20)
		s := newSnapshotter(t, b.store, map[string]string{"workspace": ws}, func(c *snapshot.Config) {
			c.StoredBytesLimit = limit.Load
		})
		writeRandom(t, filepath.Join(ws, "one"), 1<<20, 1)
		m1, _, err := s.Snapshot(ctx, 1)
		must(t, err)
		before := storedBytes(t, b.store)
		if s.StoredBytes() != before {
			t.Fatalf("StoredBytes = %d, the store holds %d", s.StoredBytes(), before)
		}
		want := tree(t, ws)

		writeRandom(t, filepath.Join(ws, "big"), 3<<20, 2)
		_, _, err = s.Snapshot(ctx, 1)
		if !errors.Is(err, snapshot.ErrStoredBytesQuota) || wire.CodeOf(err) != wire.ResourceExhausted {
			t.Fatalf("snapshot over the limit: %v, want resource_exhausted", err)
		}
		var we *wire.Error
		if !errors.As(err, &we) || we.Details["limit_bytes"] != int64(3<<20) {
			t.Fatalf("error details: %+v", we)
		}
		if after := storedBytes(t, b.store) - fenceBytes(t, b.store); after != before {
			t.Fatalf("the refused snapshot stored %d bytes", after-before)
		}
		latest, ok, err := s.Latest(ctx)
		if err != nil || !ok || latest.Seq != m1.Seq {
			t.Fatalf("latest after the refusal: %d-%d, %v, %v; want %d-%d", latest.Epoch, latest.Seq, ok, err, m1.Epoch, m1.Seq)
		}
		ws2 := t.TempDir()
		r := newSnapshotter(t, b.store, map[string]string{"workspace": ws2})
		_, err = r.Restore(ctx, latest)
		must(t, err)
		sameTree(t, tree(t, ws2), want)

		// Under the limit again, snapshots work; a limit of 0 or -1 is no cap.
		must(t, os.Remove(filepath.Join(ws, "big")))
		writeRandom(t, filepath.Join(ws, "small"), 100<<10, 3)
		_, _, err = s.Snapshot(ctx, 1)
		must(t, err)
		for _, l := range []int64{0, -1} {
			limit.Store(l)
			writeRandom(t, filepath.Join(ws, fmt.Sprintf("big%d", -l)), 3<<20, uint64(4-l))
			_, _, err = s.Snapshot(ctx, 1)
			must(t, err)
		}
		if got := storedBytes(t, b.store); s.StoredBytes() != got {
			t.Fatalf("StoredBytes = %d, the store holds %d", s.StoredBytes(), got)
		}
	})
}

// A kept manifest that cannot be read stops the collection before anything is deleted.
func TestGCStopsOnCorruptManifest(t *testing.T) {
	ctx := t.Context()
	store := newStore(t)
	ws := t.TempDir()
	clock := &offsetClock{}
	s := newSnapshotter(t, store, map[string]string{"workspace": ws}, func(c *snapshot.Config) {
		c.Now, c.Retention = clock.Now, 1
	})
	write(t, filepath.Join(ws, "a"), "a", 0o644)
	_, _, err := s.Snapshot(ctx, 1)
	must(t, err)
	must(t, os.Remove(filepath.Join(ws, "a")))
	_, _, err = s.Snapshot(ctx, 1)
	must(t, err)
	must(t, store.Put(ctx, prefix+"/manifests/1-2.json", strings.NewReader("{not json"), 9))
	clock.Advance(snapshot.DefaultGrace + time.Minute)
	before := storedBytes(t, store)
	if _, err := s.Collect(ctx); !errors.Is(err, snapshot.ErrCorrupt) {
		t.Fatalf("gc with a corrupt kept manifest: %v, want ErrCorrupt", err)
	}
	if after := storedBytes(t, store); after != before {
		t.Fatalf("gc deleted %d bytes before failing", before-after)
	}
}

// Objects under the prefix that are not snapshot objects are counted and left alone.
func TestGCLeavesForeignObjects(t *testing.T) {
	ctx := t.Context()
	store := newStore(t)
	clock := &offsetClock{}
	s := newSnapshotter(t, store, map[string]string{"workspace": t.TempDir()}, func(c *snapshot.Config) {
		c.Now = clock.Now
	})
	_, _, err := s.Snapshot(ctx, 1)
	must(t, err)
	sum := sha256.Sum256([]byte("x"))
	for _, k := range []string{"blobs/not-a-hash", "manifests/01-1.json", "manifests/x.json", "other", "blobs/" + strings.ToUpper(hex.EncodeToString(sum[:]))} {
		must(t, store.Put(ctx, prefix+"/"+k, strings.NewReader("x"), 1))
	}
	clock.Advance(snapshot.DefaultGrace + time.Minute)
	st, err := s.Collect(ctx)
	must(t, err)
	if st.BlobsDeleted+st.ManifestsDeleted != 0 || st.StoredBytes != storedBytes(t, store) {
		t.Fatalf("gc = %+v", st)
	}
}

// Collect and CollectIfDue honour their context and interval.
func TestCollectIfDue(t *testing.T) {
	store := newStore(t)
	clock := &offsetClock{}
	s := newSnapshotter(t, store, map[string]string{"workspace": t.TempDir()}, func(c *snapshot.Config) {
		c.Now, c.GCEvery = clock.Now, time.Minute
	})
	if _, ran, err := s.CollectIfDue(t.Context()); !ran || err != nil {
		t.Fatalf("first CollectIfDue: ran %v, %v", ran, err)
	}
	if _, ran, _ := s.CollectIfDue(t.Context()); ran {
		t.Fatal("ran again within the interval")
	}
	clock.Advance(time.Minute)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, ran, err := s.CollectIfDue(ctx); !ran || !errors.Is(err, context.Canceled) {
		t.Fatalf("CollectIfDue with a cancelled context: ran %v, %v", ran, err)
	}
}

// The last gap: a Collect that listed before a snapshot renewed an old blob, and looked at it again just
// before, deletes it after the renewal. The snapshot finds it gone after its commit and uploads it again.
func TestRenewedBlobDeletedBeforeCommit(t *testing.T) {
	ctx := t.Context()
	store := newStore(t)
	ws := t.TempDir()
	clock := &offsetClock{}
	sum := sha256.Sum256([]byte("comes back"))
	key := prefix + "/blobs/" + hex.EncodeToString(sum[:])
	deleted := false
	hooked := &hookStore{Store: store, beforePutIf: func(k string) {
		if k == prefix+"/latest" && !deleted && clock.d.Load() != 0 {
			deleted = true
			must(t, store.Delete(ctx, key))
		}
	}}
	s := newSnapshotter(t, hooked, map[string]string{"workspace": ws}, func(c *snapshot.Config) { c.Now = clock.Now })
	write(t, filepath.Join(ws, "f"), "comes back", 0o644)
	_, _, err := s.Snapshot(ctx, 1)
	must(t, err)
	must(t, os.Remove(filepath.Join(ws, "f")))
	_, _, err = s.Snapshot(ctx, 1)
	must(t, err)
	clock.Advance(snapshot.DefaultGrace) // the blob is old now: reusing it means renewing it
	write(t, filepath.Join(ws, "f"), "comes back", 0o644)
	_, st, err := s.Snapshot(ctx, 1)
	must(t, err)
	if !deleted || st.FilesUploaded != 1 {
		t.Fatalf("deleted %v, uploaded %d: the blob was not renewed", deleted, st.FilesUploaded)
	}
	if ok, err := store.Exists(ctx, key); !ok || err != nil {
		t.Fatalf("the renewed blob deleted before the commit is missing after it: %v, %v", ok, err)
	}
	restoresTo(t, store, ws)
}

// FuzzParseManifestName: a listed key (untrusted) is taken for a manifest only in the one canonical form
// manifestKey writes, so Collect orders and keeps exactly the manifests Snapshot wrote.
func FuzzParseManifestName(f *testing.F) {
	for _, s := range []string{"1-1.json", "0-12.json", "01-1.json", "1-0.json", "-1-1.json", "1--1.json", "+1-1.json",
		"9223372036854775807-1.json", "9223372036854775808-1.json", "1-1.json.tmp", "1-1", "a-b.json", "1_0-1.json"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		epoch, seq, ok := snapshot.ParseManifestName(name)
		if !ok {
			return
		}
		if epoch < 0 || seq < 1 || fmt.Sprintf("%d-%d.json", epoch, seq) != name {
			t.Fatalf("%q parsed as %d-%d", name, epoch, seq)
		}
	})
}
