package snapshot_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/blob"
	blobs3 "github.com/warren-mesh/warren/internal/blob/s3"
	"github.com/warren-mesh/warren/internal/testenv"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner/snapshot"
)

// regionsEnv is two regions, "a" and "b", each with its own S3 server (a real versitygw) and bucket, as
// issue #10 has them.
type regionsEnv struct {
	srv   map[string]*testenv.S3Server
	store map[string]blob.Store
}

func startRegions(t testing.TB) regionsEnv {
	t.Helper()
	if testing.Short() {
		t.Skip("starts two versitygw servers")
	}
	env := regionsEnv{srv: map[string]*testenv.S3Server{}, store: map[string]blob.Store{}}
	for _, name := range []string{"a", "b"} {
		srv := testenv.StartS3(t)
		bucket := srv.CreateBucket(t)
		s, err := blobs3.New(t.Context(), blobs3.Config{
			Endpoint: srv.Endpoint(), Region: srv.Region(), Bucket: bucket, PathStyle: true,
			AccessKey: srv.AccessKey(), SecretKey: srv.SecretKey(),
			// A stopped server fails fast.
			Timeout: 5 * time.Second, MaxAttempts: 1,
		})
		must(t, err)
		env.srv[name], env.store[name] = srv, s
	}
	return env
}

// snapshotter is a runner's Snapshotter in region own: it writes to own's store and reads every region's.
func (e regionsEnv) snapshotter(t testing.TB, own string, dirs map[string]string, opts ...func(*snapshot.Config)) *snapshot.Snapshotter {
	t.Helper()
	return newSnapshotter(t, e.store[own], dirs, append([]func(*snapshot.Config){inRegion(own, e.store)}, opts...)...)
}

// inRegion configures a Snapshotter of region own among stores.
func inRegion(own string, stores map[string]blob.Store) func(*snapshot.Config) {
	return func(c *snapshot.Config) {
		c.Region = own
		c.Regions = maps.Clone(stores)
		delete(c.Regions, own)
	}
}

// listing is every object under the sandbox's prefix with its size and modification time.
func listing(t testing.TB, s blob.Store) map[string]string {
	t.Helper()
	out := map[string]string{}
	for o, err := range s.List(context.Background(), prefix+"/") {
		must(t, err)
		out[o.Key] = fmt.Sprint(o.Modified, " ", o.Size)
	}
	return out
}

func sameListing(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	if !maps.Equal(got, want) {
		t.Errorf("%s: the store changed:\n got %v\nwant %v", what, got, want)
	}
}

// allBlobsIn checks that every blob m names is in s.
func allBlobsIn(t *testing.T, s blob.Store, m snapshot.Manifest) {
	t.Helper()
	for _, d := range m.Dirs {
		for _, e := range d.Entries {
			if e.Type != snapshot.TypeFile {
				continue
			}
			if ok, err := s.Exists(t.Context(), prefix+"/blobs/"+e.SHA256); err != nil || !ok {
				t.Errorf("blob of %s/%s is not in the store: %v, %v", d.Name, e.Path, ok, err)
			}
		}
	}
}

func rawObject(t testing.TB, s blob.Store, key string) []byte {
	t.Helper()
	data, _, err := s.Read(context.Background(), key)
	must(t, err)
	return data
}

// wantLatest checks that s's Latest is snapshot epoch-seq of region, and returns it.
func wantLatest(t *testing.T, s *snapshot.Snapshotter, epoch, seq int64, region string) snapshot.Manifest {
	t.Helper()
	m, ok, err := s.Latest(t.Context())
	if err != nil || !ok || m.Epoch != epoch || m.Seq != seq || m.Region != region {
		t.Fatalf("Latest = %d-%d of region %q, %v, %v; want %d-%d of region %q", m.Epoch, m.Seq, m.Region, ok, err, epoch, seq, region)
	}
	return m
}

// resume is what a runner does on start: Latest, then Restore.
func resume(t *testing.T, s *snapshot.Snapshotter) snapshot.Manifest {
	t.Helper()
	m, _, err := s.Latest(t.Context())
	must(t, err)
	_, err = s.Restore(t.Context(), m)
	must(t, err)
	return m
}

func freshDirs(t testing.TB) map[string]string {
	return map[string]string{"workspace": t.TempDir(), "home": t.TempDir()}
}

// A sandbox snapshotted in region a resumes in region b with its files intact, and b's snapshots then go
// to b's store alone, complete (every blob they name is in b) and marked b's; a later resume in a gets
// b's newer state.
func TestCrossRegionResume(t *testing.T) {
	env := startRegions(t)
	ctx := t.Context()

	dirsA := freshDirs(t)
	makeTree(t, dirsA["workspace"])
	write(t, filepath.Join(dirsA["home"], ".claude/projects/p/s1.jsonl"), `{"turn":1}`+"\n", 0o600)
	a1 := env.snapshotter(t, "a", dirsA)
	m1, _, err := a1.Snapshot(ctx, 1)
	must(t, err)
	if m1.Region != "a" {
		t.Fatalf("manifest of region a says region %q", m1.Region)
	}
	if !bytes.Contains(rawObject(t, env.store["a"], prefix+"/latest"), []byte(`"region":"a"`)) {
		t.Error("a's latest pointer does not record its region")
	}
	if ks := keysUnder(t, env.store["b"], ""); len(ks) != 0 {
		t.Fatalf("a's snapshot wrote to b's store: %v", ks)
	}
	inA := listing(t, env.store["a"])

	// Resume in b (epoch 2).
	dirsB := freshDirs(t)
	b2 := env.snapshotter(t, "b", dirsB)
	start := time.Now()
	m := wantLatest(t, b2, 1, 1, "a")
	st, err := b2.Restore(ctx, m)
	must(t, err)
	t.Logf("cross-region resume of %d files, %d bytes (%d downloaded): %v", st.Files, st.Bytes, st.BytesDownloaded, time.Since(start))
	sameTree(t, tree(t, dirsB["workspace"]), tree(t, dirsA["workspace"]))
	sameTree(t, tree(t, dirsB["home"]), tree(t, dirsA["home"]))

	write(t, filepath.Join(dirsB["workspace"], "README.md"), "# edited in b\n", 0o644)
	write(t, filepath.Join(dirsB["home"], ".claude/projects/p/s1.jsonl"), `{"turn":1}`+"\n"+`{"turn":2}`+"\n", 0o600)
	m2, st, err := b2.Snapshot(ctx, 2)
	must(t, err)
	if m2.Region != "b" || m2.Epoch != 2 || m2.Seq != 1 {
		t.Fatalf("b's snapshot is %d-%d of region %q, want 2-1 of b", m2.Epoch, m2.Seq, m2.Region)
	}
	// Everything went into b's store, not only what changed: b's snapshots stand on their own.
	if st.FilesUploaded == 0 || st.BytesUploaded < st.Bytes-int64(len("# edited in b\n"))-100 {
		t.Errorf("b's first snapshot uploaded %d files, %d bytes of %d: want all of them in b", st.FilesUploaded, st.BytesUploaded, st.Bytes)
	}
	allBlobsIn(t, env.store["b"], m2)
	sameListing(t, "a after b's snapshot", listing(t, env.store["a"]), inA)
	if !bytes.Contains(rawObject(t, env.store["b"], prefix+"/manifests/2-1.json"), []byte(`"region":"b"`)) {
		t.Error("b's manifest does not record its region")
	}
	// The next snapshot in b is incremental again.
	write(t, filepath.Join(dirsB["workspace"], "new.txt"), "from b", 0o644)
	m3, st, err := b2.Snapshot(ctx, 2)
	must(t, err)
	if m3.Seq != 2 || st.FilesUploaded != 1 {
		t.Errorf("b's second snapshot: %d-%d uploading %d files; want 2-2 uploading 1", m3.Epoch, m3.Seq, st.FilesUploaded)
	}
	inB := listing(t, env.store["b"])

	// Back to a (epoch 3): it resumes from b's newer snapshot and writes to a alone.
	dirsA3 := freshDirs(t)
	a3 := env.snapshotter(t, "a", dirsA3)
	if m := resume(t, a3); m.Epoch != 2 || m.Seq != 2 || m.Region != "b" {
		t.Fatalf("resumed in a from %d-%d of region %q, want 2-2 of region b", m.Epoch, m.Seq, m.Region)
	}
	sameTree(t, tree(t, dirsA3["workspace"]), tree(t, dirsB["workspace"]))
	sameTree(t, tree(t, dirsA3["home"]), tree(t, dirsB["home"]))
	m4, _, err := a3.Snapshot(ctx, 3)
	must(t, err)
	if m4.Region != "a" || m4.Epoch != 3 {
		t.Fatalf("a's snapshot is %d-%d of region %q", m4.Epoch, m4.Seq, m4.Region)
	}
	allBlobsIn(t, env.store["a"], m4)
	sameListing(t, "b after a's snapshot", listing(t, env.store["b"]), inB)
	wantLatest(t, b2, 3, 1, "a")
}

// A region whose store does not answer fails the resume with a *RegionUnavailableError naming it (wire
// code unavailable), before anything in the workspace is touched: that region may hold the newest state.
// A download failing in the middle names the region too. Commits in the other region go on. LatestFor
// skips a region that does not answer only when the previous epoch's snapshot was found elsewhere.
func TestRegionUnavailable(t *testing.T) {
	env := startRegions(t)
	ctx := t.Context()
	dirsA := freshDirs(t)
	makeTree(t, dirsA["workspace"])
	_, _, err := env.snapshotter(t, "a", dirsA).Snapshot(ctx, 1)
	must(t, err)
	b2 := env.snapshotter(t, "b", freshDirs(t))
	resume(t, b2)
	_, _, err = b2.Snapshot(ctx, 2)
	must(t, err)

	// b, holding the newest snapshot, is down: a must not resume from its own older one, nor from nothing.
	env.srv["b"].Stop(t)
	dirs := freshDirs(t)
	write(t, filepath.Join(dirs["workspace"], "mine.txt"), "already here", 0o644)
	before := tree(t, dirs["workspace"])
	a3 := env.snapshotter(t, "a", dirs)
	_, ok, err := a3.Latest(ctx)
	var ru *snapshot.RegionUnavailableError
	if !errors.As(err, &ru) || ru.Region != "b" || ok {
		t.Fatalf("Latest with b down = %v, %v; want a RegionUnavailableError of region b", ok, err)
	}
	if !errors.Is(err, blob.ErrUnavailable) || !strings.Contains(err.Error(), "region b") {
		t.Errorf("error %q does not wrap blob.ErrUnavailable or name the region", err)
	}
	if code := wire.CodeOf(err); code != wire.Unavailable {
		t.Errorf("wire code %s, want unavailable", code)
	}
	if pub, _ := wire.Public(err); pub.Details["region"] != "b" || !strings.Contains(pub.Message, "region b") {
		t.Errorf("public error %+v does not name the region", pub)
	}
	sameTree(t, tree(t, dirs["workspace"]), before)

	// b answers again: a resumes from it. Then b fails in the middle of the download.
	env.srv["b"].Start(t)
	m := wantLatest(t, a3, 2, 1, "b")
	env.srv["b"].Stop(t)
	if _, err := a3.Restore(ctx, m); !errors.As(err, &ru) || ru.Region != "b" {
		t.Fatalf("Restore from a stopped region = %v, want a RegionUnavailableError of region b", err)
	}

	// A runner of a newer epoch in a commits while b is down: the check of b before the commit is best
	// effort, so a's outage of b does not stop a from persisting.
	env.srv["b"].Start(t)
	a3 = env.snapshotter(t, "a", dirs)
	resume(t, a3)
	env.srv["b"].Stop(t)
	m3, _, err := a3.Snapshot(ctx, 3)
	if err != nil || m3.Epoch != 3 || m3.Region != "a" {
		t.Fatalf("Snapshot in a with b down = %d-%d, %v; want 3-1 in a", m3.Epoch, m3.Seq, err)
	}
	env.srv["b"].Start(t)
	wantLatest(t, b2, 3, 1, "a")

	// LatestFor: with b down, the runner of epoch 4 in a resumes from a's 3-1, which b cannot beat (only
	// epoch 3 wrote epoch 3, in a); the runner of epoch 5 cannot know that (epoch 4 may have written to b),
	// nor can Latest; and a runner in b does not start without its own store.
	env.srv["b"].Stop(t)
	if m, ok, err := a3.LatestFor(ctx, 4); err != nil || !ok || m.Epoch != 3 || m.Region != "a" {
		t.Fatalf("LatestFor(4) with b down = %d-%d of %q, %v, %v; want a's 3-1", m.Epoch, m.Seq, m.Region, ok, err)
	}
	for _, epoch := range []int64{5, 3, 0, -1} {
		if _, _, err := a3.LatestFor(ctx, epoch); !errors.As(err, &ru) || ru.Region != "b" {
			t.Errorf("LatestFor(%d) with b down = %v, want a RegionUnavailableError of region b", epoch, err)
		}
	}
	if _, _, err := a3.Latest(ctx); !errors.As(err, &ru) || ru.Region != "b" {
		t.Errorf("Latest with b down = %v, want a RegionUnavailableError of region b", err)
	}
	if _, _, err := b2.LatestFor(ctx, 4); !errors.As(err, &ru) || ru.Region != "b" {
		t.Errorf("LatestFor(4) in b with b down = %v, want a RegionUnavailableError of region b", err)
	}
}

// A stale runner in region a (epoch 1) cannot commit once the owner of epoch 2 in region b has: its
// commit reads b's latest and is refused, and its manifest is removed. A Snapshotter that saw b's newer
// epoch (by that check or by Latest) refuses even while b is down, before uploading anything. One that
// never saw it commits in a with b down (the check is best effort), but that snapshot, of an older
// epoch, is never the one resumed from.
func TestCrossRegionFencing(t *testing.T) {
	env := startRegions(t)
	ctx := t.Context()
	dirsA := freshDirs(t)
	write(t, filepath.Join(dirsA["workspace"], "f"), "epoch 1", 0o644)
	stale := env.snapshotter(t, "a", dirsA)
	_, _, err := stale.Snapshot(ctx, 1)
	must(t, err)

	dirsB := freshDirs(t)
	owner := env.snapshotter(t, "b", dirsB)
	resume(t, owner)
	write(t, filepath.Join(dirsB["workspace"], "f"), "epoch 2", 0o644)
	m2, _, err := owner.Snapshot(ctx, 2)
	must(t, err)

	write(t, filepath.Join(dirsA["workspace"], "f"), "stale write", 0o644)
	_, _, err = stale.Snapshot(ctx, 1)
	if !errors.Is(err, snapshot.ErrFenced) || !strings.Contains(err.Error(), "region b") {
		t.Fatalf("stale Snapshot in a = %v, want ErrFenced naming region b", err)
	}
	if ok, _ := env.store["a"].Exists(ctx, prefix+"/manifests/1-2.json"); ok {
		t.Error("the fenced manifest was left in a")
	}
	aOnly := newSnapshotter(t, env.store["a"], map[string]string{"workspace": t.TempDir()}, func(c *snapshot.Config) { c.Region = "a" })
	wantLatest(t, aOnly, 1, 1, "a")

	// b down: the stale runner remembers b's epoch and is refused still. Another one of epoch 1 that
	// never saw b cannot read it and commits in a (the check is best effort); with b back, the resume
	// still takes b's epoch 2.
	env.srv["b"].Stop(t)
	if _, _, err := stale.Snapshot(ctx, 1); !errors.Is(err, snapshot.ErrFenced) {
		t.Fatalf("stale Snapshot with b down = %v, want ErrFenced (b's epoch 2 was seen)", err)
	}
	if _, _, err := env.snapshotter(t, "a", dirsA).Snapshot(ctx, 1); err != nil {
		t.Fatalf("Snapshot at epoch 1 with b down, b never seen = %v; want it committed in a", err)
	}
	env.srv["b"].Start(t)
	rdirs := freshDirs(t)
	resumer := env.snapshotter(t, "a", rdirs)
	wantLatest(t, resumer, m2.Epoch, m2.Seq, "b")

	// A Snapshotter that has seen b's epoch 2 refuses epoch 1 with b down, before uploading anything.
	env.srv["b"].Stop(t)
	before := listing(t, env.store["a"])
	write(t, filepath.Join(rdirs["workspace"], "g"), "never uploaded", 0o644)
	if _, _, err := resumer.Snapshot(ctx, 1); !errors.Is(err, snapshot.ErrFenced) || !strings.Contains(err.Error(), "region b") {
		t.Fatalf("Snapshot at epoch 1 after seeing b's epoch 2 = %v, want ErrFenced naming region b", err)
	}
	sameListing(t, "a after a refused snapshot", listing(t, env.store["a"]), before)
}

// Garbage collection in one region never deletes what another region's live snapshot needs: a region's
// manifests name only its own blobs, and Collect works within its own store. With every object past the
// grace period and a retention of 1, collecting in b and then in a (and again in b) leaves both regions'
// latest snapshots restorable, and neither region's Collect touches the other's store.
func TestGCAcrossRegions(t *testing.T) {
	env := startRegions(t)
	ctx := t.Context()
	clock := &offsetClock{}
	opts := func(c *snapshot.Config) { c.Now, c.Retention = clock.Now, 1 }

	dirsA := freshDirs(t)
	makeTree(t, dirsA["workspace"])
	a1 := env.snapshotter(t, "a", dirsA, opts)
	_, _, err := a1.Snapshot(ctx, 1)
	must(t, err)
	writeRandom(t, filepath.Join(dirsA["workspace"], "only-in-a-1.bin"), 100_000, 1)
	_, _, err = a1.Snapshot(ctx, 1)
	must(t, err)
	must(t, os.Remove(filepath.Join(dirsA["workspace"], "only-in-a-1.bin")))
	writeRandom(t, filepath.Join(dirsA["workspace"], "in-a-latest.bin"), 100_000, 2)
	mA, _, err := a1.Snapshot(ctx, 1) // a's latest: 1-3
	must(t, err)

	dirsB := freshDirs(t)
	b2 := env.snapshotter(t, "b", dirsB, opts)
	resume(t, b2)
	must(t, os.Remove(filepath.Join(dirsB["workspace"], "data/big.bin")))
	_, _, err = b2.Snapshot(ctx, 2)
	must(t, err)
	writeRandom(t, filepath.Join(dirsB["workspace"], "in-b-latest.bin"), 100_000, 3)
	mB, _, err := b2.Snapshot(ctx, 2) // b's latest: 2-2, without big.bin, which a's latest has
	must(t, err)

	clock.Advance(2 * snapshot.DefaultGrace)
	inA := listing(t, env.store["a"])
	st, err := b2.Collect(ctx)
	must(t, err)
	if st.ManifestsDeleted != 1 {
		t.Errorf("b's Collect deleted %d manifests, want 1 (2-1)", st.ManifestsDeleted)
	}
	sameListing(t, "a after b's Collect", listing(t, env.store["a"]), inA)

	inB := listing(t, env.store["b"])
	st, err = a1.Collect(ctx)
	must(t, err)
	if st.ManifestsDeleted != 2 || st.BlobsDeleted != 1 {
		t.Errorf("a's Collect deleted %d manifests and %d blobs, want 2 and 1 (only-in-a-1.bin)", st.ManifestsDeleted, st.BlobsDeleted)
	}
	sameListing(t, "b after a's Collect", listing(t, env.store["b"]), inB)

	// Both latest snapshots restore from their own stores, every blob present and right.
	for region, want := range map[string]struct {
		m    snapshot.Manifest
		dirs map[string]string
	}{"a": {mA, dirsA}, "b": {mB, dirsB}} {
		allBlobsIn(t, env.store[region], want.m)
		dst := t.TempDir()
		only := newSnapshotter(t, env.store[region], map[string]string{"workspace": dst}, func(c *snapshot.Config) { c.Region = region })
		wantLatest(t, only, want.m.Epoch, want.m.Seq, region)
		resume(t, only)
		sameTree(t, tree(t, dst), tree(t, want.dirs["workspace"]))
	}
}

// Snapshots written before regions (no region in the pointer or manifest) are read as the region of the
// store holding them, from that region and from another; a pointer or manifest claiming another region
// than its store's is corrupt, as is a region in a single-region deployment's store.
func TestLegacyAndMismatchedRegions(t *testing.T) {
	ctx := t.Context()
	storeA, storeB := newStore(t), newStore(t)
	stores := map[string]blob.Store{"a": storeA, "b": storeB}
	ws := t.TempDir()
	makeTree(t, ws)
	m, _, err := newSnapshotter(t, storeA, map[string]string{"workspace": ws}).Snapshot(ctx, 1)
	must(t, err)
	if m.Region != "" || bytes.Contains(rawObject(t, storeA, prefix+"/latest"), []byte("region")) ||
		bytes.Contains(rawObject(t, storeA, prefix+"/manifests/1-1.json"), []byte("region")) {
		t.Fatal("a single-region snapshot records a region")
	}
	for _, own := range []string{"a", "b"} {
		dst := t.TempDir()
		s := newSnapshotter(t, stores[own], map[string]string{"workspace": dst}, inRegion(own, stores))
		wantLatest(t, s, 1, 1, "a")
		resume(t, s)
		sameTree(t, tree(t, dst), tree(t, ws))
	}

	latestB := rawObject(t, storeA, prefix+"/latest")
	manifest := rawObject(t, storeA, prefix+"/manifests/1-1.json")
	put := func(s blob.Store, key string, data []byte) {
		t.Helper()
		must(t, s.Put(ctx, key, bytes.NewReader(data), int64(len(data))))
	}
	withRegion := func(data []byte, region string) []byte {
		return bytes.Replace(data, []byte(`"epoch":1,`), []byte(`"epoch":1,"region":"`+region+`",`), 1)
	}
	cases := map[string]func(){
		"pointer of another region": func() {
			put(storeB, prefix+"/latest", withRegion(latestB, "a"))
			put(storeB, prefix+"/manifests/1-1.json", manifest)
		},
		"manifest of another region": func() {
			put(storeB, prefix+"/latest", latestB)
			put(storeB, prefix+"/manifests/1-1.json", bytes.Replace(manifest, []byte(`"seq":1,`), []byte(`"seq":1,"region":"a",`), 1))
		},
		"invalid region in pointer": func() {
			put(storeB, prefix+"/latest", withRegion(latestB, "B"))
			put(storeB, prefix+"/manifests/1-1.json", manifest)
		},
	}
	for name, setup := range cases {
		setup()
		s := newSnapshotter(t, storeB, map[string]string{"workspace": t.TempDir()}, inRegion("b", stores))
		if _, _, err := s.Latest(ctx); !errors.Is(err, snapshot.ErrCorrupt) || !strings.Contains(err.Error(), "region b") {
			t.Errorf("%s: Latest = %v, want ErrCorrupt naming region b", name, err)
		}
	}
	put(storeB, prefix+"/latest", withRegion(latestB, "b"))
	single := newSnapshotter(t, storeB, map[string]string{"workspace": t.TempDir()})
	if _, _, err := single.Latest(ctx); !errors.Is(err, snapshot.ErrCorrupt) {
		t.Errorf("single-region Latest of a pointer with a region = %v, want ErrCorrupt", err)
	}
	if _, err := single.Restore(ctx, snapshot.Manifest{Version: snapshot.ManifestVersion, Epoch: 1, Seq: 1, Region: "x"}); !errors.Is(err, snapshot.ErrConfig) {
		t.Errorf("Restore of a manifest of an unknown region = %v, want ErrConfig", err)
	}
}

func TestNewValidatesRegions(t *testing.T) {
	store := newStore(t)
	dirs := map[string]string{"w": t.TempDir()}
	base := snapshot.Config{Store: store, Prefix: prefix, Dirs: dirs}
	many := map[string]blob.Store{}
	for i := range snapshot.MaxRegions {
		many[strings.Repeat("r", 1+i%30)+string(rune('a'+i/30))] = store
	}
	cases := map[string]func(*snapshot.Config){
		"bad own region":        func(c *snapshot.Config) { c.Region = "Eu-West" },
		"own region too long":   func(c *snapshot.Config) { c.Region = strings.Repeat("a", 33) },
		"own region dash":       func(c *snapshot.Config) { c.Region = "-a" },
		"others without own":    func(c *snapshot.Config) { c.Regions = map[string]blob.Store{"b": store} },
		"own among others":      func(c *snapshot.Config) { c.Region, c.Regions = "a", map[string]blob.Store{"a": store} },
		"bad other region":      func(c *snapshot.Config) { c.Region, c.Regions = "a", map[string]blob.Store{"b/c": store} },
		"nil other store":       func(c *snapshot.Config) { c.Region, c.Regions = "a", map[string]blob.Store{"b": nil} },
		"too many regions":      func(c *snapshot.Config) { c.Region, c.Regions = "a", many },
		"negative check period": func(c *snapshot.Config) { c.RegionCheckTimeout = -time.Second },
	}
	for name, mod := range cases {
		cfg := base
		mod(&cfg)
		if _, err := snapshot.New(cfg); !errors.Is(err, snapshot.ErrConfig) {
			t.Errorf("%s: New = %v, want ErrConfig", name, err)
		}
	}
	cfg := base
	cfg.Region, cfg.Regions = "eu-west-1", map[string]blob.Store{"us-east-1": store}
	if _, err := snapshot.New(cfg); err != nil {
		t.Errorf("New with two regions: %v", err)
	}
}

// FuzzParsePointer: the latest pointer, read from object storage, fails only with ErrCorrupt, and what
// it accepts names the manifest its epoch and seq imply, in the store's own region.
func FuzzParsePointer(f *testing.F) {
	f.Add([]byte(`{"epoch":2,"seq":1,"manifest":"`+prefix+`/manifests/2-1.json","time":"2025-01-01T00:00:00Z","region":"eu-1"}`), "eu-1")
	f.Add([]byte(`{"epoch":2,"seq":1,"manifest":"`+prefix+`/manifests/2-1.json","time":"2025-01-01T00:00:00Z"}`), "")
	f.Add([]byte(`{"epoch":2,"seq":1,"manifest":"`+prefix+`/manifests/2-1.json","time":"2025-01-01T00:00:00Z","region":"b"}`), "a")
	f.Add([]byte(`{"epoch":0,"seq":1,"manifest":"x","region":""}`), "a")
	f.Fuzz(func(t *testing.T, data []byte, region string) {
		epoch, seq, got, err := snapshot.ParsePointer(data, prefix, region)
		if err != nil {
			if !errors.Is(err, snapshot.ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		if epoch < 0 || seq < 1 || got != "" && got != region || len(data) > 4<<10 {
			t.Fatalf("accepted %d-%d of region %q from the store of %q (%d bytes)", epoch, seq, got, region, len(data))
		}
	})
}
