// Package snapshot persists a sandbox's directories (the workspace, the agent's home with its transcripts) to
// a blob.Store and restores them, as docs/ARCHITECTURE.md#snapshots describes: a snapshot is a manifest plus
// content-addressed blobs, written after every completed turn and before sleep, and restored when a runner
// starts, in any region.
//
// Layout under Config.Prefix:
//
//	blobs/<sha256>                 file contents, written once, shared by all snapshots
//	manifests/<epoch>-<seq>.json   one Manifest per snapshot, created once (create-only PutIf)
//	latest                         {epoch, seq, manifest, time}: the committed snapshot
//
// Fencing (docs/ARCHITECTURE.md#fencing): a snapshot becomes latest only through a compare-and-set of latest
// (Read, then PutIf with the ETag read) that refuses when latest already holds a newer epoch, so a stale
// runner's snapshot never becomes latest; it gets ErrFenced and should stop.
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
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warren-mesh/warren/internal/blob"
)

// Config configures a Snapshotter. It is passed by value and validated by New.
type Config struct {
	// Store holds blobs, manifests and the latest pointer (required).
	Store blob.Store
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
	// Concurrency bounds parallel hashing, uploads, downloads and deletions (default 8).
	Concurrency int

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

	racy time.Duration // racyMargin; shorter in tests

	mu sync.Mutex
	// cache maps a file to its identity and hash when this Snapshotter last hashed it.
	cache map[cacheKey]cached
	// known holds the hashes of the last snapshot committed or restored, whose blobs are in the store
	// (latest names it, so Collect keeps them).
	known map[string]struct{}
	// lastGC is when Collect last ran (zero: never).
	lastGC time.Time
	// stored is the bytes under the prefix as last measured plus what was written since; -1 unknown.
	stored atomic.Int64
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
	var errs []string
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Sprintf(format, args...))
		}
	}
	check(cfg.Store != nil, "store is required")
	check(validPrefix(cfg.Prefix), "prefix %q is not a valid blob key", cfg.Prefix)
	check(len(cfg.Dirs) > 0, "at least one dir is required")
	check(cfg.Concurrency > 0, "concurrency must be positive")
	check(cfg.Retention > 0, "retention must be positive")
	check(cfg.Grace > 0 && cfg.GCEvery > 0, "grace and gc interval must be positive")
	check(cfg.MaxDeletes > 0, "max deletes must be positive")
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
	s := &Snapshotter{cfg: cfg, names: names, racy: racyMargin}
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
func (s *Snapshotter) Snapshot(ctx context.Context, epoch int64) (Manifest, Stats, error) {
	if epoch < 0 {
		return Manifest{}, Stats{}, fmt.Errorf("snapshot: negative epoch %d", epoch)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	start := s.cfg.Now()

	// Refuse early, before any upload, when already fenced; the commit checks again.
	latest, _, found, err := s.readLatest(ctx)
	if err != nil {
		return Manifest{}, Stats{}, fmt.Errorf("snapshot: %w", err)
	}
	if found && latest.Epoch > epoch {
		return Manifest{}, Stats{}, fmt.Errorf("snapshot at epoch %d: %w: latest is %d-%d", epoch, ErrFenced, latest.Epoch, latest.Seq)
	}
	seq := int64(1)
	if found && latest.Epoch == epoch {
		seq = latest.Seq + 1
	}

	up := &uploads{known: maps.Clone(s.known), inflight: make(map[string]chan struct{}),
		reuseAfter: start.Add(-s.cfg.Grace / 2)}
	if up.known == nil {
		up.known = make(map[string]struct{})
	}
	if s.cfg.StoredBytesLimit != nil {
		if up.limit = s.cfg.StoredBytesLimit(); up.limit > 0 && s.stored.Load() < 0 {
			if err := s.measure(ctx); err != nil {
				return Manifest{}, Stats{}, fmt.Errorf("snapshot at epoch %d: %w", epoch, err)
			}
		}
	}
	up.base = s.stored.Load()

	m, hashes, st, err := s.collect(ctx, up)
	if err != nil {
		return Manifest{}, st, fmt.Errorf("snapshot at epoch %d: %w", epoch, err)
	}
	m.Epoch, m.Seq, m.Time = epoch, seq, s.cfg.Now().UTC()
	// Collect may delete a blob this snapshot relies on once Grace/2 has passed since it started; the
	// manifest, which protects them, must exist before then.
	if took := s.cfg.Now().Sub(start); took > s.cfg.Grace/2 {
		return Manifest{}, st, fmt.Errorf("snapshot at epoch %d: took %v, more than half the gc grace period %v: not committed", epoch, took, s.cfg.Grace)
	}

	key, size, err := s.writeManifest(ctx, &m, up)
	if err != nil {
		return Manifest{}, st, fmt.Errorf("snapshot at epoch %d: %w", epoch, err)
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
		return Manifest{}, st, fmt.Errorf("snapshot %d-%d: %w", m.Epoch, m.Seq, err)
	}
	s.known = hashes // latest names them now
	s.checkRenewed(ctx, up)
	if up.base >= 0 {
		s.stored.Store(up.base + up.added.Load() + size + grown)
	}
	st.Duration = s.cfg.Now().Sub(start)
	s.cfg.Logger.Info("snapshot committed", "epoch", m.Epoch, "seq", m.Seq, "files", st.Files,
		"dirs", st.Dirs, "symlinks", st.Symlinks, "bytes", st.Bytes, "files_hashed", st.FilesHashed,
		"files_uploaded", st.FilesUploaded, "bytes_uploaded", st.BytesUploaded, "skipped", st.Skipped,
		"duration", st.Duration)
	return m, st, nil
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
// holds a newer epoch. A lost race (ErrPrecondition) is retried from the read. It returns by how many
// bytes latest grew.
func (s *Snapshotter) commit(ctx context.Context, m Manifest, key string) (int64, error) {
	data, err := json.Marshal(pointer{Epoch: m.Epoch, Seq: m.Seq, Manifest: key, Time: m.Time})
	if err != nil {
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

// readLatest reads the latest pointer; etag is "" when there is none.
func (s *Snapshotter) readLatest(ctx context.Context) (p pointer, etag string, found bool, err error) {
	data, etag, err := s.cfg.Store.Read(ctx, latestKey(s.cfg.Prefix))
	if errors.Is(err, blob.ErrNotFound) {
		return pointer{}, "", false, nil
	}
	if err != nil {
		return pointer{}, "", false, fmt.Errorf("read latest: %w", err)
	}
	p, err = parsePointer(data, s.cfg.Prefix)
	if err != nil {
		return pointer{}, "", false, err
	}
	return p, etag, true, nil
}

// Latest returns the committed snapshot's manifest, validated; false when there is none yet.
func (s *Snapshotter) Latest(ctx context.Context) (Manifest, bool, error) {
	p, _, found, err := s.readLatest(ctx)
	if err != nil || !found {
		return Manifest{}, false, err
	}
	m, err := s.readManifest(ctx, p.Manifest)
	if errors.Is(err, blob.ErrNotFound) {
		return Manifest{}, false, fmt.Errorf("%w: latest names missing manifest %s: %w", ErrCorrupt, p.Manifest, err)
	}
	if err != nil {
		return Manifest{}, false, err
	}
	if m.Epoch != p.Epoch || m.Seq != p.Seq {
		return Manifest{}, false, fmt.Errorf("%w: manifest %s holds snapshot %d-%d", ErrCorrupt, p.Manifest, m.Epoch, m.Seq)
	}
	return m, true, nil
}
