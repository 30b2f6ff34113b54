// Package snapshot persists a sandbox's directories (the workspace, the agent's home with its transcripts) to
// a blob.Store and restores them, as docs/ARCHITECTURE.md#snapshots describes: a snapshot is a manifest plus
// content-addressed blobs, written after every completed turn and before sleep, and restored when a runner
// starts, in any region.
//
// Layout under Config.Prefix:
//
//	blobs/<sha256>                 file contents, written once, shared by all snapshots
//	manifests/<epoch>-<seq>.json   one Manifest per snapshot, created once (create-only PutIf)
//	latest                         {epoch, seq, manifest, time, region}: the committed snapshot
//
// Regions (docs/ARCHITECTURE.md#regions): each region has its own store, and a runner writes only to its
// own region's (Config.Store), recording the region in its manifests and latest pointer. To resume,
// Latest reads the latest pointer of every region's store (Config.Regions) and takes the newest by
// (epoch, seq); a store that cannot be read is a *RegionUnavailableError naming the region, never a
// silent empty or older restore (LatestFor skips it only when the previous epoch's snapshot, provably the
// newest, was read elsewhere). Restore fetches the blobs from the store of the manifest's region, and
// the next snapshot uploads into the own store whatever it lacks, so a region's manifests only ever name
// its own blobs: garbage collection stays within one store, and no region's snapshots depend on another's
// bucket. Snapshots written without a region (before regions, or in a single-region deployment) are read
// as the region of the store that holds them.
//
// Fencing (docs/ARCHITECTURE.md#fencing): a snapshot becomes latest only through a compare-and-set of latest
// (Read, then PutIf with the ETag read) that refuses when latest already holds a newer epoch, so a stale
// runner's snapshot never becomes latest; it gets ErrFenced and should stop. Across regions the commit
// also refuses when another region's latest is of a newer epoch, as read just before it (best effort) or
// seen before (by Latest); and since Latest takes the newest epoch of all regions, a stale runner's
// commit in its own region, of an older epoch, is never resumed from once the owner has committed.
//
// Only what changed is uploaded: a blob already referenced by the previous snapshot (or already in the
// store) is not sent again, and a file whose size, mtime, ctime, inode and device are unchanged since
// this Snapshotter last hashed it is not even read again (unless it had been modified just before that
// hash, within the file system's timestamp granularity: see racyMargin).
//
// The directories belong to the sandbox, whose processes are hostile as far as the runner is concerned,
// and manifests come from object storage: every path is handled through os.Root, symlinks are recorded
// and recreated but never followed, and manifests are validated before use (ParseManifest).
package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warren-mesh/warren/internal/blob"
	"github.com/warren-mesh/warren/internal/regions"
)

// Config configures a Snapshotter. It is passed by value and validated by New.
type Config struct {
	// Store holds blobs, manifests and the latest pointer (required): the store of the runner's own
	// region, the only one this Snapshotter writes to.
	Store blob.Store
	// Region is the name of the runner's own region, whose store Store is: 1 to 32 of [a-z0-9-], not
	// starting or ending with '-'. Manifests and latest pointers record it. Empty: a single-region
	// deployment, nothing recorded (as before regions), and Regions must be empty.
	Region string
	// Regions are the other regions' stores by region name (not Region); nil in a single-region
	// deployment. Latest reads every region's latest pointer and takes the newest, Restore fetches the
	// blobs from the store of the manifest's region, and a snapshot's commit is refused when another
	// region's latest is of a newer epoch (docs/ARCHITECTURE.md#regions). At most MaxRegions in all.
	Regions map[string]blob.Store
	// RegionCheckTimeout bounds the read of the other regions' latest pointers before each commit
	// (default DefaultRegionCheckTimeout). That check is best effort: a region that does not answer in
	// time is logged and skipped, so a region's outage does not stop the others from persisting.
	RegionCheckTimeout time.Duration
	// Prefix is the key prefix of this sandbox's snapshots, e.g. "sandboxes/<sandboxID>" (required; a
	// valid blob key without a trailing slash).
	Prefix string
	// Dirs maps a name (1 to 64 bytes of [A-Za-z0-9._-]) to the absolute host directory snapshotted
	// under it, e.g. "workspace" → /…/workspace, "home" → /…/home (at least one).
	Dirs map[string]string
	// Exclude, if set, leaves out an entry (and, for a directory, everything below it) by its Dirs name
	// and slash-separated path relative to that directory. Restore leaves excluded paths alone.
	Exclude func(name, relPath string) bool
	// Logger; nil discards.
	Logger *slog.Logger
	// Now is the clock for manifest times and durations; nil means time.Now.
	Now func() time.Time
	// Concurrency bounds parallel hashing, uploads and deletions (default DefaultConcurrency).
	Concurrency int
	// FetchConcurrency bounds Restore's parallel downloads, whole blobs or ranges of large ones (default
	// DefaultFetchConcurrency). They mostly wait on the store, so they run wider than Concurrency.
	FetchConcurrency int

	// Garbage collection (Collect). Retention is how many of the newest snapshots are kept besides those
	// younger than Grace (default DefaultRetention, at least 1). Grace is the age below which no manifest
	// or blob is collected (default DefaultGrace); a snapshot must write its manifest within Grace/2 of
	// its start and renews a stored blob older than Grace/2 that it reuses. GCEvery spaces CollectIfDue
	// (default DefaultGCEvery); MaxDeletes bounds the deletions of one Collect (default DefaultMaxDeletes).
	Retention  int
	Grace      time.Duration
	GCEvery    time.Duration
	MaxDeletes int

	// StoredBytesLimit, if set, is asked at every Snapshot for the cap on the bytes the prefix may hold
	// (every object under it, retained snapshots and not yet collected garbage included); <= 0 is no cap.
	// A snapshot that would go past it fails with ErrStoredBytesQuota before the upload that would.
	StoredBytesLimit func() int64
}

// DefaultConcurrency is Config.Concurrency's default.
const DefaultConcurrency = 8

// DefaultFetchConcurrency is Config.FetchConcurrency's default.
const DefaultFetchConcurrency = 32

// DefaultRegionCheckTimeout is Config.RegionCheckTimeout's default.
const DefaultRegionCheckTimeout = 5 * time.Second

// MaxRegions bounds the regions of a Config, its own included.
const MaxRegions = 64

// commitAttempts bounds the read-compare-put loop on latest when writers of the same epoch race.
const commitAttempts = 5

// Stats describes one Snapshot or Restore.
type Stats struct {
	// Files, Dirs and Symlinks count the entries of the manifest written or restored; Bytes is the total
	// size of its files.
	Files    int
	Dirs     int
	Symlinks int
	Bytes    int64
	// Skipped counts what Snapshot left out: sockets, FIFOs, devices, unreadable entries and names that
	// are not valid UTF-8. Each is logged.
	Skipped int
	// FilesHashed counts files Snapshot read to hash (the others were known unchanged).
	FilesHashed int
	// FilesUploaded and BytesUploaded count blobs Snapshot sent to the store.
	FilesUploaded int
	BytesUploaded int64
	// FilesDownloaded and BytesDownloaded count blobs Restore fetched (files already present with the
	// right content are not fetched).
	FilesDownloaded int
	BytesDownloaded int64
	Duration        time.Duration
}

// Snapshotter takes and restores snapshots of one sandbox. Its methods may be called concurrently; they
// run one at a time. Use one Snapshotter per runner: two runners of the same epoch writing snapshots is
// exactly what the single-ownership guarantee rules out, and the fence cannot tell them apart.
type Snapshotter struct {
	cfg   Config
	names []string // sorted keys of cfg.Dirs
	// regions are the stores Latest reads: the own region first, then the others by name.
	regions []region

	racy      time.Duration // racyMargin; shorter in tests
	rangeSize int64         // rangeSize; smaller in tests

	mu sync.Mutex
	// cache maps a file to its identity and hash when this Snapshotter last hashed it.
	cache map[cacheKey]cached
	// known holds the hashes of the last snapshot committed or restored, whose blobs are in the store
	// (latest names it, so Collect keeps them).
	known map[string]struct{}
	// lastGC is when Collect last ran (zero: never).
	lastGC time.Time
	// Until distrustUntil (by Now), a stored blob written before distrustBefore (by the store's clock) is
	// written again rather than reused: an older epoch's reclaim may be deleting it (Fence).
	distrustBefore, distrustUntil time.Time
	// stored is the bytes under the prefix as last measured plus what was written since; -1 unknown.
	stored atomic.Int64
	// seen is the newest latest pointer read from another region (by Latest or a commit's check): no
	// snapshot of an older epoch commits, even when that region no longer answers.
	seenMu sync.Mutex
	seen   regionPointer
}

// region is one region's store.
type region struct {
	name  string // "" for the own region of a single-region deployment
	store blob.Store
}

// regionPointer is a latest pointer and the region it was read from.
type regionPointer struct {
	region string
	p      pointer
	found  bool
}

// newer reports whether a is a newer snapshot than b (by epoch, then seq); a missing one is never newer.
func (a regionPointer) newer(b regionPointer) bool {
	if !a.found || !b.found {
		return a.found && !b.found
	}
	if a.p.Epoch != b.p.Epoch {
		return a.p.Epoch > b.p.Epoch
	}
	return a.p.Seq > b.p.Seq
}

// New validates cfg and returns a Snapshotter. It does no I/O.
func New(cfg Config) (*Snapshotter, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	if cfg.FetchConcurrency == 0 {
		cfg.FetchConcurrency = DefaultFetchConcurrency
	}
	if cfg.Retention == 0 {
		cfg.Retention = DefaultRetention
	}
	if cfg.Grace == 0 {
		cfg.Grace = DefaultGrace
	}
	if cfg.GCEvery == 0 {
		cfg.GCEvery = DefaultGCEvery
	}
	if cfg.MaxDeletes == 0 {
		cfg.MaxDeletes = DefaultMaxDeletes
	}
	if cfg.RegionCheckTimeout == 0 {
		cfg.RegionCheckTimeout = DefaultRegionCheckTimeout
	}
	var errs []string
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Sprintf(format, args...))
		}
	}
	check(cfg.Store != nil, "store is required")
	check(validPrefix(cfg.Prefix), "prefix %q is not a valid blob key", cfg.Prefix)
	check(len(cfg.Dirs) > 0, "at least one dir is required")
	check(cfg.Concurrency > 0 && cfg.FetchConcurrency > 0, "concurrency must be positive")
	check(cfg.Retention > 0, "retention must be positive")
	check(cfg.Grace > 0 && cfg.GCEvery > 0, "grace and gc interval must be positive")
	check(cfg.MaxDeletes > 0, "max deletes must be positive")
	check(cfg.RegionCheckTimeout > 0, "region check timeout must be positive")
	check(cfg.Region == "" || regions.ValidRegion(cfg.Region), "region %q is not 1 to 32 of [a-z0-9-]", cfg.Region)
	check(cfg.Region != "" || len(cfg.Regions) == 0, "other regions' stores need the own region's name")
	check(len(cfg.Regions) < MaxRegions, "more than %d regions", MaxRegions)
	for name, store := range cfg.Regions {
		check(regions.ValidRegion(name), "region %q is not 1 to 32 of [a-z0-9-]", name)
		check(name != cfg.Region, "region %q is the own region: its store is Store", name)
		check(store != nil, "region %q has no store", name)
	}
	names := make([]string, 0, len(cfg.Dirs))
	for name, dir := range cfg.Dirs {
		check(checkDirName(name) == nil, "dir name %q must be 1 to 64 bytes of [A-Za-z0-9._-]", name)
		check(filepath.IsAbs(dir), "dir %q: %q is not an absolute path", name, dir)
		names = append(names, name)
	}
	slices.Sort(names)
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrConfig, strings.Join(errs, "; "))
	}
	dirs := make(map[string]string, len(cfg.Dirs))
	for name, dir := range cfg.Dirs {
		dirs[name] = filepath.Clean(dir)
	}
	cfg.Dirs = dirs
	s := &Snapshotter{cfg: cfg, names: names, racy: racyMargin, rangeSize: rangeSize}
	s.regions = []region{{cfg.Region, cfg.Store}}
	for _, name := range slices.Sorted(maps.Keys(cfg.Regions)) {
		s.regions = append(s.regions, region{name, cfg.Regions[name]})
	}
	s.stored.Store(-1)
	return s, nil
}

// validPrefix accepts a blob key (see package blob) that leaves room for the suffixes added to it.
func validPrefix(p string) bool {
	if p == "" || len(p) > 512 {
		return false
	}
	for seg := range strings.SplitSeq(p, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
		for i := 0; i < len(seg); i++ {
			c := seg[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' ||
				c == '-') {
				return false
			}
		}
	}
	return true
}

// Snapshot records every configured directory, uploads the contents not yet in the store, writes the
// manifest and commits it as latest, fenced by epoch: if latest holds a newer epoch, before or after the
// upload, nothing of this snapshot becomes latest and the error is ErrFenced. A snapshot of the same or
// an older epoch is replaced.
//
// Files changing while they are read are read again; the manifest always describes blobs whose content
// matches their hash, though not necessarily one instant of the whole tree.
//
// Under Config.StoredBytesLimit, a snapshot that would take the stored bytes past the limit first
// reclaims (reclaim.go): every manifest but the latest and the blobs no kept snapshot names go at once,
// whatever their age. It then runs again, admitted if what the store keeps once it is committed (its own
// blobs and manifest, and what it cannot free: snapshots in progress elsewhere, other objects) fits the
// limit; the previous snapshot's blobs it no longer names are reclaimed right after the commit. A
// snapshot that does not fit even then fails with ErrStoredBytesQuota, the previous one stays latest and
// restorable, and what the refused attempts uploaded is reclaimed.
func (s *Snapshotter) Snapshot(ctx context.Context, epoch int64) (Manifest, Stats, error) {
	if epoch < 0 {
		return Manifest{}, Stats{}, fmt.Errorf("snapshot: negative epoch %d", epoch)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var limit int64
	if s.cfg.StoredBytesLimit != nil {
		limit = s.cfg.StoredBytesLimit()
	}
	m, st, up, err := s.snapshotOnce(ctx, epoch, limit, nil)
	if limit <= 0 || err != nil && !errors.Is(err, ErrStoredBytesQuota) {
		return m, st, err
	}
	if err != nil {
		protect := make(map[string]struct{}, len(s.known)+len(up.known))
		maps.Copy(protect, s.known)
		maps.Copy(protect, up.known) // what the refused attempt found or uploaded: it is needed again
		rc, rerr := s.reclaim(ctx, epoch, protect)
		if rerr != nil {
			return Manifest{}, st, fmt.Errorf("snapshot at epoch %d: over the stored-bytes limit: %w", epoch, rerr)
		}
		var up2 *uploads
		m, st, up2, err = s.snapshotOnce(ctx, epoch, limit, &rc)
		if errors.Is(err, ErrStoredBytesQuota) {
			s.reclaimRefused(ctx, epoch, up, up2)
		}
		if err != nil {
			return Manifest{}, st, err
		}
	}
	if s.stored.Load() > limit {
		s.reclaimAfter(ctx, epoch, "committed") // the previous snapshot's blobs this one no longer names
	}
	return m, st, nil
}

// reclaimAfter reclaims after a snapshot at epoch, keeping the latest snapshot's blobs; a failure is
// logged (the next snapshot over the limit tries again).
func (s *Snapshotter) reclaimAfter(ctx context.Context, epoch int64, why string) {
	if _, err := s.reclaim(ctx, epoch, s.known); err != nil {
		s.cfg.Logger.Warn("snapshot: reclaim under the stored-bytes limit failed", "after", why, "epoch", epoch, "err", err)
	}
}

// refusedRetries bounds the reclaims after a refused snapshot that wait for the store's clock to pass
// the refused attempts' own uploads; refusedWait is the first wait, four times longer each time (20 ms covers a
// file system's coarse timestamps, the last ones an S3 server's one-second precision).
const (
	refusedRetries = 4
	refusedWait    = 20 * time.Millisecond
)

// reclaimRefused reclaims what the refused attempts (ups) uploaded. A reclaim spares the blobs written
// since its fence, to the store's precision, as they may be a newer runner's; the refused attempts'
// uploads finished before it but may share the fence's tick (a second on S3). While one of them is
// spared, it waits for the store's clock to move on and reclaims again, a bounded number of times; what
// still stays is left to the next reclaim, which counts it in the stored bytes meanwhile.
func (s *Snapshotter) reclaimRefused(ctx context.Context, epoch int64, ups ...*uploads) {
	own := make(map[string]struct{})
	for _, up := range ups {
		if up == nil {
			continue
		}
		up.mu.Lock()
		maps.Copy(own, up.put)
		up.mu.Unlock()
	}
	wait := refusedWait
	for try := 0; ; try++ {
		rc, err := s.reclaim(ctx, epoch, s.known)
		if err != nil {
			s.cfg.Logger.Warn("snapshot: reclaim under the stored-bytes limit failed", "after", "refused", "epoch", epoch, "err", err)
			return
		}
		left := 0
		for k := range rc.spared {
			if _, ok := own[k]; ok {
				left++
			}
		}
		if left == 0 {
			return
		}
		if try == refusedRetries {
			s.cfg.Logger.Warn("snapshot: blobs of a refused snapshot left for the next reclaim", "epoch", epoch, "blobs", left)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait *= 4
	}
}

// snapshotOnce is one attempt of Snapshot, with s.mu held. Under a limit (> 0) it is checked against
// the stored bytes before the snapshot, or, after a reclaim (rc), against what the store keeps once the
// snapshot is committed. It returns its uploads, whose known blobs are in the store.
func (s *Snapshotter) snapshotOnce(ctx context.Context, epoch, limit int64, rc *reclaimed) (Manifest, Stats, *uploads, error) {
	start := s.cfg.Now()
	up := &uploads{known: maps.Clone(s.known), inflight: make(map[string]chan struct{}),
		reuseAfter: start.Add(-s.cfg.Grace / 2), limit: limit}
	if up.known == nil {
		up.known = make(map[string]struct{})
	}
	if start.Before(s.distrustUntil) && s.distrustBefore.After(up.reuseAfter) {
		up.reuseAfter = s.distrustBefore
	}
	if limit > 0 && s.stored.Load() < 0 {
		if err := s.measure(ctx); err != nil {
			return Manifest{}, Stats{}, up, fmt.Errorf("snapshot at epoch %d: %w", epoch, err)
		}
	}
	up.stored = s.stored.Load()
	if rc != nil {
		up.projected, up.pinned, up.charged = true, rc.pinnedBlobs, make(map[string]struct{})
		up.base = rc.pinned
	}

	// Refuse early, before any upload, when already fenced; the commit checks again.
	latest, _, found, err := s.readLatest(ctx)
	if err != nil {
		return Manifest{}, Stats{}, up, fmt.Errorf("snapshot: %w", err)
	}
	if found && latest.Epoch > epoch {
		return Manifest{}, Stats{}, up, fmt.Errorf("snapshot at epoch %d: %w: latest is %d-%d", epoch, ErrFenced, latest.Epoch, latest.Seq)
	}
	if err := s.seenFence(epoch); err != nil {
		return Manifest{}, Stats{}, up, fmt.Errorf("snapshot at epoch %d: %w", epoch, err)
	}
	seq := int64(1)
	if found && latest.Epoch == epoch {
		seq = latest.Seq + 1
	}

	m, hashes, st, err := s.collect(ctx, up)
	if err != nil {
		return Manifest{}, st, up, fmt.Errorf("snapshot at epoch %d: %w", epoch, err)
	}
	m.Epoch, m.Seq, m.Time, m.Region = epoch, seq, s.cfg.Now().UTC(), s.cfg.Region
	// Collect may delete a blob this snapshot relies on once Grace/2 has passed since it started; the
	// manifest, which protects them, must exist before then.
	if took := s.cfg.Now().Sub(start); took > s.cfg.Grace/2 {
		return Manifest{}, st, up, fmt.Errorf("snapshot at epoch %d: took %v, more than half the gc grace period %v: %w", epoch, took, s.cfg.Grace, ErrTooSlow)
	}

	key, size, err := s.writeManifest(ctx, &m, up)
	if err != nil {
		return Manifest{}, st, up, fmt.Errorf("snapshot at epoch %d: %w", epoch, err)
	}
	grown, err := s.commit(ctx, m, key)
	if err != nil {
		if errors.Is(err, ErrFenced) {
			// Nothing points at the manifest; remove it so only committed manifests remain. Its blobs
			// stay: they are shared and harmless.
			if derr := s.cfg.Store.Delete(context.WithoutCancel(ctx), key); derr != nil {
				s.cfg.Logger.Warn("snapshot: removing fenced manifest", "key", key, "err", derr)
			}
		}
		return Manifest{}, st, up, fmt.Errorf("snapshot %d-%d: %w", m.Epoch, m.Seq, err)
	}
	s.known = hashes // latest names them now
	s.checkRenewed(ctx, up)
	if up.stored >= 0 {
		s.stored.Store(up.stored + up.added.Load() + size + grown)
	}
	st.Duration = s.cfg.Now().Sub(start)
	s.cfg.Logger.Info("snapshot committed", "epoch", m.Epoch, "seq", m.Seq, "files", st.Files,
		"dirs", st.Dirs, "symlinks", st.Symlinks, "bytes", st.Bytes, "files_hashed", st.FilesHashed,
		"files_uploaded", st.FilesUploaded, "bytes_uploaded", st.BytesUploaded, "skipped", st.Skipped,
		"duration", st.Duration)
	return m, st, up, nil
}

// writeManifest stores m create-only, taking the next seq if its key is already taken (by a concurrent
// writer of the same epoch), so a manifest object is never overwritten.
// It returns the key and the manifest's size; a manifest that would take the stored bytes past up's
// limit is not written.
func (s *Snapshotter) writeManifest(ctx context.Context, m *Manifest, up *uploads) (string, int64, error) {
	for range 16 {
		data, err := m.Marshal()
		if err != nil {
			return "", 0, err
		}
		if err := up.fits(int64(len(data))); err != nil {
			return "", 0, err
		}
		key := manifestKey(s.cfg.Prefix, m.Epoch, m.Seq)
		_, err = s.cfg.Store.PutIf(ctx, key, data, "")
		if err == nil {
			return key, int64(len(data)), nil
		}
		if !errors.Is(err, blob.ErrPrecondition) {
			return "", 0, fmt.Errorf("write manifest: %w", err)
		}
		m.Seq++
	}
	return "", 0, fmt.Errorf("write manifest: every seq up to %d-%d is taken", m.Epoch, m.Seq)
}

// commit points latest at the manifest with a compare-and-set, refusing with ErrFenced when latest
// holds a newer epoch, or the fence does (fence.go), or another region's latest does (checkRegions). A lost race (ErrPrecondition) is
// retried from the read. It returns by how many bytes latest grew.
func (s *Snapshotter) commit(ctx context.Context, m Manifest, key string) (int64, error) {
	data, err := json.Marshal(pointer{Epoch: m.Epoch, Seq: m.Seq, Manifest: key, Time: m.Time, Region: s.cfg.Region})
	if err != nil {
		return 0, err
	}
	if err := s.checkRegions(ctx, m.Epoch); err != nil {
		return 0, err
	}
	// After the manifest is written and before latest moves: a reclaim that raised the fence after this
	// read lists the manifest, and one that raised it before is seen here.
	if err := s.checkFence(ctx, m.Epoch); err != nil {
		return 0, err
	}
	for range commitAttempts {
		latest, etag, found, err := s.readLatest(ctx)
		if err != nil {
			return 0, err
		}
		if found && latest.Epoch > m.Epoch {
			return 0, fmt.Errorf("%w: latest is %d-%d", ErrFenced, latest.Epoch, latest.Seq)
		}
		_, err = s.cfg.Store.PutIf(ctx, latestKey(s.cfg.Prefix), data, etag)
		if err == nil {
			return int64(len(data) - latest.size), nil
		}
		if !errors.Is(err, blob.ErrPrecondition) {
			return 0, fmt.Errorf("commit latest: %w", err)
		}
		s.cfg.Logger.Debug("snapshot: latest changed during commit, retrying", "epoch", m.Epoch, "seq", m.Seq)
	}
	return 0, fmt.Errorf("commit latest: changed by other writers %d times in a row: %w", commitAttempts, blob.ErrPrecondition)
}

// readLatest reads the own region's latest pointer; etag is "" when there is none.
func (s *Snapshotter) readLatest(ctx context.Context) (p pointer, etag string, found bool, err error) {
	r := s.regions[0]
	data, etag, err := r.store.Read(ctx, latestKey(s.cfg.Prefix))
	p, found, err = s.parseLatest(ctx, r, data, err)
	return p, etag, found, err
}

// readLatestIn reads a region's latest pointer for Latest and the commit's check, which need no ETag:
// through Get, so that no more than maxPointerSize (plus one byte) of a hostile object is read.
func (s *Snapshotter) readLatestIn(ctx context.Context, r region) (pointer, bool, error) {
	rc, err := r.store.Get(ctx, latestKey(s.cfg.Prefix))
	var data []byte
	if err == nil {
		data, err = io.ReadAll(io.LimitReader(rc, maxPointerSize+1))
		rc.Close()
	}
	return s.parseLatest(ctx, r, data, err)
}

// parseLatest interprets the outcome of reading a region's latest pointer. A store that fails is a
// *RegionUnavailableError.
func (s *Snapshotter) parseLatest(ctx context.Context, r region, data []byte, err error) (pointer, bool, error) {
	if errors.Is(err, blob.ErrNotFound) {
		return pointer{}, false, nil
	}
	if err != nil {
		return pointer{}, false, fmt.Errorf("read latest: %w", unavailable(ctx, r.name, err))
	}
	p, err := parsePointer(data, s.cfg.Prefix, r.name)
	if err != nil {
		if r.name != "" {
			err = fmt.Errorf("region %s: %w", r.name, err)
		}
		return pointer{}, false, err
	}
	return p, true, nil
}

// readAll reads the latest pointers of rs concurrently; errs[i] is region i's error.
func (s *Snapshotter) readAll(ctx context.Context, rs []region) ([]regionPointer, []error) {
	ps := make([]regionPointer, len(rs))
	errs := make([]error, len(rs))
	var wg sync.WaitGroup
	for i, r := range rs {
		wg.Go(func() {
			p, found, err := s.readLatestIn(ctx, r)
			ps[i], errs[i] = regionPointer{region: r.name, p: p, found: found}, err
		})
	}
	wg.Wait()
	return ps, errs
}

// Latest returns the newest committed snapshot's manifest, validated; false when there is none yet. With
// other regions configured it reads every region's latest pointer and takes the newest by (epoch, seq),
// the own region first on a tie; a region whose store cannot be read fails it with a
// *RegionUnavailableError naming the region, because that region may hold the newest snapshot. The
// manifest's Region says where it (and its blobs) were found; Restore fetches from there.
func (s *Snapshotter) Latest(ctx context.Context) (Manifest, bool, error) {
	return s.latest(ctx, -1)
}

// LatestFor is Latest for the runner of epoch (which resumes from it): a region whose store cannot be read
// is skipped, with a warning, when another region's latest is of epoch-1. That snapshot is then provably
// the newest: epochs grow by one per claim, the runner of epoch-1 wrote only to its own region's store
// (the one read), and a snapshot of epoch or later would come from a claim after this runner's, which
// its lease rules out (docs/ARCHITECTURE.md#leases). So one region's outage stops only the resumes whose
// newest snapshot may be there, not every resume of every region. Otherwise it is Latest.
func (s *Snapshotter) LatestFor(ctx context.Context, epoch int64) (Manifest, bool, error) {
	return s.latest(ctx, epoch)
}

// latest is Latest, or LatestFor epoch when epoch > 0.
func (s *Snapshotter) latest(ctx context.Context, epoch int64) (Manifest, bool, error) {
	ps, errs := s.readAll(ctx, s.regions)
	if err := errors.Join(errs...); err != nil && !s.provablyNewest(ctx, ps, errs, epoch) {
		return Manifest{}, false, err
	}
	best := 0
	for i := range ps {
		if errs[i] == nil && (errs[best] != nil || ps[i].newer(ps[best])) {
			best = i
		}
	}
	s.remember(ps[1:])
	if !ps[best].found {
		return Manifest{}, false, nil
	}
	r, p := s.regions[best], ps[best].p
	where := ""
	if r.name != "" {
		where = " in region " + r.name
	}
	m, err := s.readManifestFrom(ctx, r, p.Manifest)
	if errors.Is(err, blob.ErrNotFound) {
		return Manifest{}, false, fmt.Errorf("%w: latest%s names missing manifest %s: %w", ErrCorrupt, where, p.Manifest, err)
	}
	if err != nil {
		return Manifest{}, false, err
	}
	if m.Epoch != p.Epoch || m.Seq != p.Seq {
		return Manifest{}, false, fmt.Errorf("%w: manifest %s%s holds snapshot %d-%d", ErrCorrupt, p.Manifest, where, m.Epoch, m.Seq)
	}
	if m.Region != "" && m.Region != r.name {
		return Manifest{}, false, fmt.Errorf("%w: manifest %s%s says region %q", ErrCorrupt, p.Manifest, where, m.Region)
	}
	m.Region = r.name
	return m, true, nil
}

// provablyNewest reports whether, for the runner of epoch, the regions that failed with errs may be
// skipped (see LatestFor): each failed as unavailable, and a region read holds a snapshot of epoch-1.
func (s *Snapshotter) provablyNewest(ctx context.Context, ps []regionPointer, errs []error, epoch int64) bool {
	if epoch < 1 || errs[0] != nil {
		return false // the own region's store must answer: the runner's snapshots go there
	}
	proof := -1
	for i, err := range errs {
		var ru *RegionUnavailableError
		switch {
		case err != nil && !errors.As(err, &ru):
			return false
		case err == nil && ps[i].found && ps[i].p.Epoch == epoch-1:
			proof = i
		}
	}
	if proof < 0 || ctx.Err() != nil {
		return false
	}
	for i, err := range errs {
		if err != nil {
			s.cfg.Logger.Warn("snapshot: a region's store cannot be read; resuming without it, since the previous epoch's snapshot is newer than anything it can hold",
				"region", s.regions[i].name, "epoch", epoch, "newest_region", s.regions[proof].name,
				"newest", fmt.Sprintf("%d-%d", ps[proof].p.Epoch, ps[proof].p.Seq), "err", err)
		}
	}
	return true
}

// remember keeps the newest of ps (other regions' pointers) as seen.
func (s *Snapshotter) remember(ps []regionPointer) {
	s.seenMu.Lock()
	defer s.seenMu.Unlock()
	for _, p := range ps {
		if p.newer(s.seen) {
			s.seen = p
		}
	}
}

// seenFence refuses a snapshot at epoch when another region was seen holding a newer one.
func (s *Snapshotter) seenFence(epoch int64) error {
	s.seenMu.Lock()
	seen := s.seen
	s.seenMu.Unlock()
	if seen.found && seen.p.Epoch > epoch {
		return fmt.Errorf("%w: latest in region %s is %d-%d", ErrFenced, seen.region, seen.p.Epoch, seen.p.Seq)
	}
	return nil
}

// checkRegions reads the other regions' latest pointers (within Config.RegionCheckTimeout) and refuses a
// commit at epoch with ErrFenced when one is newer, or was seen newer before. A region that cannot be read
// is logged and skipped: the resume (Latest) is what must not miss a region; this check only stops a
// stale runner sooner, and a region's outage must not stop the others from persisting. A stale runner's
// commit that gets through is of an older epoch than the owner's, so Latest never prefers it once the
// owner has committed.
func (s *Snapshotter) checkRegions(ctx context.Context, epoch int64) error {
	if len(s.regions) > 1 {
		cctx, cancel := context.WithTimeout(ctx, s.cfg.RegionCheckTimeout)
		ps, errs := s.readAll(cctx, s.regions[1:])
		cancel()
		if err := ctx.Err(); err != nil {
			return err
		}
		var read []regionPointer
		for i, err := range errs {
			if err != nil {
				s.cfg.Logger.Warn("snapshot: another region's latest could not be read before the commit; committing without it",
					"region", s.regions[i+1].name, "err", err)
				continue
			}
			read = append(read, ps[i])
		}
		s.remember(read)
	}
	return s.seenFence(epoch)
}
