package snapshot_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/blob"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner/snapshot"
)

// storePassedSecond waits until the store's clock is in a later second than every object under p: S3
// times objects to the second, and a reclaim spares what was written in the second of its fence (a
// newer runner may be writing it again), so a test that wants garbage collected at once lets that
// second pass first. The fs store, timing to the nanosecond, passes at once.
func storePassedSecond(t testing.TB, s blob.Store, p string) {
	t.Helper()
	var newest time.Time
	for o, err := range s.List(t.Context(), p+"/") {
		must(t, err)
		if o.Modified.After(newest) {
			newest = o.Modified
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		must(t, s.Put(t.Context(), "probe/clock", strings.NewReader("x"), 1))
		o, err := s.Stat(t.Context(), "probe/clock")
		must(t, err)
		if o.Modified.After(newest) { // S3 times to the second: a later second
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the store's clock did not pass %v", newest)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// withinLimit checks that the store holds at most limit bytes under the prefix and that the Snapshotter
// measured it right.
func withinLimit(t testing.TB, s *snapshot.Snapshotter, store blob.Store, limit int64) {
	t.Helper()
	got := storedBytes(t, store)
	if got > limit {
		t.Fatalf("the store holds %d bytes under the prefix, over the limit of %d", got, limit)
	}
	if s.StoredBytes() != got {
		t.Fatalf("StoredBytes = %d, the store holds %d", s.StoredBytes(), got)
	}
}

// Issue #21 item 8: what the user deletes stops counting against max_stored_bytes at once. Before, the
// older snapshots (retained five deep, or for an hour) kept the deleted files' blobs, and a snapshot that
// needed the room was refused until a collection an hour later; and once the latest snapshot itself held
// the cap, no snapshot of a workspace whose files were replaced ever fitted again.
func TestStoredBytesReclaimedAtOnce(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		const limit = 4 << 20
		ws := t.TempDir()
		write(t, filepath.Join(ws, "keep.txt"), "small file that stays", 0o644)
		s := newSnapshotter(t, b.store, map[string]string{"workspace": ws}, func(c *snapshot.Config) {
			c.StoredBytesLimit = func() int64 { return limit }
		})
		writeRandom(t, filepath.Join(ws, "a"), 3<<20, 1)
		_, _, err := s.Snapshot(ctx, 1)
		must(t, err)

		// Deleted, then a snapshot that fits: the older one keeps a's blob (retention and grace).
		must(t, os.Remove(filepath.Join(ws, "a")))
		_, _, err = s.Snapshot(ctx, 1)
		must(t, err)
		if got := storedBytes(t, b.store); got < 3<<20 {
			t.Fatalf("the store holds %d bytes: a's blob went without pressure", got)
		}

		// A new 3 MiB file needs the room a's blob takes: the snapshot reclaims it first.
		writeRandom(t, filepath.Join(ws, "b"), 3<<20, 2)
		storePassedSecond(t, b.store, prefix)
		_, _, err = s.Snapshot(ctx, 1)
		if err != nil {
			t.Fatalf("snapshot after deleting a: %v", err)
		}
		withinLimit(t, s, b.store, limit)
		restoresTo(t, b.store, ws)

		// The latest snapshot holds the cap; its file replaced by another of the same size in one go.
		must(t, os.Remove(filepath.Join(ws, "b")))
		writeRandom(t, filepath.Join(ws, "c"), 3<<20, 3)
		storePassedSecond(t, b.store, prefix)
		m, _, err := s.Snapshot(ctx, 1)
		if err != nil {
			t.Fatalf("snapshot after replacing b: %v", err)
		}
		withinLimit(t, s, b.store, limit)
		restoresTo(t, b.store, ws)
		if ms := keysUnder(t, b.store, "manifests/"); len(ms) != 1 || ms[0] != fmt.Sprintf("%d-%d.json", m.Epoch, m.Seq) {
			t.Fatalf("manifests left: %v, want only the latest", ms)
		}
	})
}

// Over the limit even after reclaiming: refused with resource_exhausted; the previous snapshot stays
// latest and restorable, and nothing the refused attempts uploaded stays in the store.
func TestStoredBytesRefusedAfterReclaim(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		const limit = 3 << 20
		ws := t.TempDir()
		s := newSnapshotter(t, b.store, map[string]string{"workspace": ws}, func(c *snapshot.Config) {
			c.StoredBytesLimit = func() int64 { return limit }
		})
		writeRandom(t, filepath.Join(ws, "one"), 1<<20, 1)
		m1, _, err := s.Snapshot(ctx, 1)
		must(t, err)
		want := tree(t, ws)
		blobsBefore := keysUnder(t, b.store, "blobs/")

		// 1 + 1.5 + 1.5 MiB: the first 1.5 MiB fits the store and is uploaded before the second is refused.
		writeRandom(t, filepath.Join(ws, "big1"), 3<<19, 2)
		writeRandom(t, filepath.Join(ws, "big2"), 3<<19, 3)
		_, _, err = s.Snapshot(ctx, 1)
		if !errors.Is(err, snapshot.ErrStoredBytesQuota) || wire.CodeOf(err) != wire.ResourceExhausted {
			t.Fatalf("snapshot over the limit: %v, want resource_exhausted", err)
		}
		latest, ok, err := s.Latest(ctx)
		if err != nil || !ok || latest.Epoch != m1.Epoch || latest.Seq != m1.Seq {
			t.Fatalf("latest after the refusal: %d-%d, %v, %v; want %d-%d", latest.Epoch, latest.Seq, ok, err, m1.Epoch, m1.Seq)
		}
		ws2 := t.TempDir()
		_, err = newSnapshotter(t, b.store, map[string]string{"workspace": ws2}).Restore(ctx, latest)
		must(t, err)
		sameTree(t, tree(t, ws2), want)
		if got := keysUnder(t, b.store, "blobs/"); !slices.Equal(sorted(got), sorted(blobsBefore)) {
			t.Fatalf("blobs after the refusal: %v, want the previous snapshot's %v", got, blobsBefore)
		}
		withinLimit(t, s, b.store, limit)
	})
}

func sorted(s []string) []string { s = slices.Clone(s); slices.Sort(s); return s }

// callHook is a store that runs fn just before its at-th call (counting from 0), once: a seeded point
// at which another runner acts, synchronously, so the interleaving is exact and replayable.
type callHook struct {
	blob.Store
	n    atomic.Int64
	at   int64
	fn   func()
	once sync.Once
	mu   sync.Mutex
	ops  []string // "op key" of each call
}

func (h *callHook) tick(op, key string) {
	h.mu.Lock()
	h.ops = append(h.ops, op+" "+key)
	h.mu.Unlock()
	if h.n.Add(1)-1 == h.at && h.fn != nil {
		h.once.Do(h.fn)
	}
}

func (h *callHook) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	h.tick("Put", key)
	return h.Store.Put(ctx, key, r, size)
}

func (h *callHook) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	h.tick("Get", key)
	return h.Store.Get(ctx, key)
}

func (h *callHook) Read(ctx context.Context, key string) ([]byte, string, error) {
	h.tick("Read", key)
	return h.Store.Read(ctx, key)
}

func (h *callHook) PutIf(ctx context.Context, key string, data []byte, ifMatch string) (string, error) {
	h.tick("PutIf", key)
	return h.Store.PutIf(ctx, key, data, ifMatch)
}

func (h *callHook) Delete(ctx context.Context, key string) error {
	h.tick("Delete", key)
	return h.Store.Delete(ctx, key)
}

func (h *callHook) Stat(ctx context.Context, key string) (blob.Object, error) {
	h.tick("Stat", key)
	return h.Store.Stat(ctx, key)
}

func (h *callHook) List(ctx context.Context, p string) iter.Seq2[blob.Object, error] {
	h.tick("List", p)
	return h.Store.List(ctx, p)
}

// everyManifestRestores restores every manifest under p: each blob it names is there and right.
func everyManifestRestores(t *testing.T, store blob.Store, p string) int {
	t.Helper()
	n := 0
	for o, err := range store.List(t.Context(), p+"/manifests/") {
		must(t, err)
		data, _, err := store.Read(t.Context(), o.Key)
		must(t, err)
		m, err := snapshot.ParseManifest(data)
		must(t, err)
		r := newSnapshotter(t, store, map[string]string{"workspace": t.TempDir()}, func(c *snapshot.Config) { c.Prefix = p })
		if _, err := r.Restore(t.Context(), m); err != nil {
			t.Fatalf("manifest %s no longer restores: %v", o.Key, err)
		}
		n++
	}
	return n
}

// A reclaim deletes garbage whatever its age, so it must spare what a snapshot running elsewhere relies
// on: here the other runner needs again a blob that is garbage (young, so it would reuse it as it is).
// The races: the other runner, of an older epoch (a stale one) or a newer one (which fences first),
// takes its whole snapshot at one call of the runner reclaiming, or the reclaiming runner's whole
// snapshot runs at one call of the other's: on the fs store at every call, on S3 at calls a seeded
// generator picks. Whatever the point, every manifest left restores whole, and each side commits, is
// fenced, or (the owner) is refused because the other's snapshot in progress holds g's blob.
func TestReclaimRacesSnapshots(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		rng := rand.New(rand.NewPCG(21, 8))
		outcomes := map[string]int{}
		run := 0
		for _, newer := range []bool{false, true} {
			for _, hostIsOwner := range []bool{true, false} {
				p := func() string { run++; return fmt.Sprintf("sandboxes/race%d", run) }
				ops, o := raceOnce(t, b.store, p(), newer, hostIsOwner, -1) // the host's calls
				outcomes[o]++
				calls := int64(len(ops))
				for at := range calls + 1 {
					if newer && hostIsOwner && at < calls && strings.HasPrefix(ops[at], "Delete ") && strings.Contains(ops[at], "/blobs/") {
						// Known limit: a newer runner's fence, restore and whole snapshot within one
						// deletion of a reclaim already under way, after its look at the blob (the
						// store has no conditional delete). A newer runner is claimed only once the
						// old one's lease has lapsed, when it no longer reclaims.
						continue
					}
					if b.disk != "" && strings.HasSuffix(t.Name(), "s3") && rng.IntN(int(calls)) >= 4 {
						continue // about four points a race on S3
					}
					_, o := raceOnce(t, b.store, p(), newer, hostIsOwner, at)
					outcomes[o]++
				}
			}
		}
		t.Logf("%d races, outcomes (owner/other): %v", run, outcomes)
		for _, want := range []string{"committed/committed", "committed/fenced", "fenced/committed"} {
			if outcomes[want] == 0 {
				t.Errorf("no race ended %s: %v", want, outcomes)
			}
		}
	})
}

// raceOnce sets up garbage under p, then runs the owner's snapshot (epoch 2, over the limit, so it
// reclaims) and the other runner's (epoch 1, or 3 after Fence), one inside the other just before call at
// of the host's store (-1: one after the other), and checks what is left. It returns the host's calls
// and the outcome of each side.
func raceOnce(t *testing.T, store blob.Store, p string, newer, hostIsOwner bool, at int64) ([]string, string) {
	t.Helper()
	ctx := t.Context()
	const limit = 300 << 10
	opts := func(c *snapshot.Config) {
		c.Prefix = p
		c.StoredBytesLimit = func() int64 { return limit }
	}
	// Epoch 1 stored g, then a snapshot without it: g's blob is young garbage.
	ws1 := t.TempDir()
	writeRandom(t, filepath.Join(ws1, "g"), 100<<10, 7)
	old := newSnapshotter(t, store, map[string]string{"workspace": ws1}, opts)
	_, _, err := old.Snapshot(ctx, 1)
	must(t, err)
	must(t, os.Remove(filepath.Join(ws1, "g")))
	_, _, err = old.Snapshot(ctx, 1)
	must(t, err)
	storePassedSecond(t, store, p)

	// The owner's 250 KiB do not fit beside g: it reclaims g's blob.
	ownerHook, otherHook := &callHook{Store: store, at: -1}, &callHook{Store: store, at: -1}
	wsOwner := t.TempDir()
	writeRandom(t, filepath.Join(wsOwner, "b"), 250<<10, 8)
	owner := newSnapshotter(t, ownerHook, map[string]string{"workspace": wsOwner}, opts)

	// The other runner needs g again, plus a small new file.
	wsOther := t.TempDir()
	writeRandom(t, filepath.Join(wsOther, "g"), 100<<10, 7)
	write(t, filepath.Join(wsOther, "c"), fmt.Sprintf("new in %s", p), 0o644)
	other, otherEpoch := newSnapshotter(t, otherHook, map[string]string{"workspace": wsOther}, opts), int64(1)
	if newer {
		otherEpoch = 3
	}
	var ownerErr, otherErr error
	runOwner := func() { _, _, ownerErr = owner.Snapshot(ctx, 2) }
	runOther := func() {
		if newer {
			if otherErr = other.Fence(ctx, otherEpoch); otherErr != nil {
				return
			}
		}
		_, _, otherErr = other.Snapshot(ctx, otherEpoch)
	}
	host, first, second := ownerHook, runOwner, runOther
	if !hostIsOwner {
		host, first, second = otherHook, runOther, runOwner
	}
	host.at, host.fn = at, second
	first()
	host.once.Do(second) // at past the host's last call: after it

	outcome := func(err error) string {
		switch {
		case err == nil:
			return "committed"
		case errors.Is(err, snapshot.ErrFenced):
			return "fenced"
		case errors.Is(err, snapshot.ErrStoredBytesQuota):
			return "refused" // the other's manifest, written, pinned g's blob
		default:
			t.Fatalf("%s (newer %v, host is owner %v, at %d): %v", p, newer, hostIsOwner, at, err)
			return ""
		}
	}
	everyManifestRestores(t, store, p)
	return host.ops, outcome(ownerErr) + "/" + outcome(otherErr)
}

// The fence object comes from the store: whatever it holds, parsing returns a non-negative epoch or
// ErrCorrupt, never panics.
func FuzzParseFence(f *testing.F) {
	f.Add([]byte(`{"epoch":3,"time":"2026-01-02T03:04:05Z"}`))
	f.Add([]byte(`{"epoch":-1,"time":"2026-01-02T03:04:05Z"}`))
	f.Add([]byte(`{"epoch":1}{}`))
	f.Add([]byte(`{"epoch":1,"other":2}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		epoch, err := snapshot.ParseFence(data)
		if err != nil {
			if !errors.Is(err, snapshot.ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		if epoch < 0 || len(data) > 256 {
			t.Fatalf("accepted epoch %d from %d bytes", epoch, len(data))
		}
	})
}
