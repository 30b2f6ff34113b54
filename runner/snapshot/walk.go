package snapshot

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/warren-mesh/warren/internal/blob"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner/workspace"
)

const (
	// inlineMax: files up to this size are read once into memory and uploaded from there, so hash and
	// upload see the same bytes; larger files are read twice and the upload is verified against the hash.
	inlineMax = 4 << 20
	// fileAttempts bounds how often a file that changes while being read is read again.
	fileAttempts = 3
	// restoreTempPrefix starts the name of a file Restore is writing; it lives beside its target until
	// renamed, and Snapshot skips such names (as it skips the sandbox API's uploads in progress).
	restoreTempPrefix = ".warren-restore-"
)

// A cached hash is trusted only if the file's mtime and ctime are older than the moment it was hashed by
// at least racyMargin, which exceeds the kernel's timestamp granularity (one tick, at most 10 ms): a
// write after the hash then always moves ctime. Otherwise a write within the same tick as the previous
// one could leave size and times unchanged (git's "racily clean" entries). Whole-second timestamps mean a
// file system with coarse times, given coarseMargin.
const (
	racyMargin   = 50 * time.Millisecond
	coarseMargin = 2 * time.Second
)

// errChanged: a file changed (content, or what the path names) while it was read; it is read again.
var errChanged = errors.New("file changed while being read")

type cacheKey struct{ dir, path string }

// fileID identifies a file's content without reading it.
type fileID struct {
	dev, ino           uint64
	size, mtime, ctime int64
}

type cached struct {
	id  fileID
	sha string
	// hashedAt is the wall clock before the file was opened. It is compared with file system timestamps,
	// which come from the kernel's real clock, so it is time.Now and not Config.Now.
	hashedAt time.Time
}

func (c cached) trusted(id fileID, margin time.Duration) bool {
	if c.id != id {
		return false
	}
	if id.mtime%1e9 == 0 && id.ctime%1e9 == 0 {
		margin = coarseMargin
	}
	limit := c.hashedAt.Add(-margin).UnixNano()
	return id.mtime <= limit && id.ctime <= limit
}

// fileJob is one regular file found by the walk, hashed and uploaded in parallel.
type fileJob struct {
	root  *os.Root
	dir   string
	entry *Entry
	info  fs.FileInfo
	skip  bool // vanished or no longer a file: dropped from the manifest
	// filled in by the worker
	hashed   bool
	uploaded int64
	didPut   bool
}

// collect walks every directory and makes sure every file's content is in the store. It returns the
// manifest's directories (epoch, seq and time are the caller's).
func (s *Snapshotter) collect(ctx context.Context, up *uploads) (Manifest, map[string]struct{}, Stats, error) {
	var st Stats
	m := Manifest{Version: ManifestVersion, Dirs: make([]Dir, 0, len(s.names))}
	var jobs []*fileJob
	for _, name := range s.names {
		root, err := os.OpenRoot(s.cfg.Dirs[name])
		if err != nil {
			return Manifest{}, nil, st, fmt.Errorf("dir %s: %w", name, err)
		}
		defer root.Close()
		d, dirJobs, err := s.walk(root, name, &st)
		if err != nil {
			return Manifest{}, nil, st, fmt.Errorf("dir %s: %w", name, err)
		}
		m.Dirs = append(m.Dirs, d)
		jobs = append(jobs, dirJobs...)
	}

	// Files known unchanged whose blobs are known stored (most of them, in a turn) are done here; the
	// others are hashed and uploaded in parallel.
	unchanged := make(map[cacheKey]cached, len(s.cache))
	var work []*fileJob
	for _, j := range jobs {
		ok, err := s.unchanged(up, j, unchanged)
		if err != nil {
			return Manifest{}, nil, st, fmt.Errorf("%s/%s: %w", j.dir, j.entry.Path, err)
		}
		if !ok {
			work = append(work, j)
		}
	}
	cache := &sync.Map{} // cacheKey → cached, filled by the workers
	err := parallel(ctx, len(work), s.cfg.Concurrency, func(ctx context.Context, i int) error {
		return s.file(ctx, up, cache, work[i])
	})
	cache.Range(func(k, v any) bool {
		unchanged[k.(cacheKey)] = v.(cached)
		return true
	})
	if err != nil {
		// The hashes taken are right: keep them, so that a second attempt (Snapshot under the
		// stored-bytes limit) does not read the files again.
		if s.cache == nil {
			s.cache = make(map[cacheKey]cached)
		}
		maps.Copy(s.cache, unchanged)
		return Manifest{}, nil, st, err
	}

	skipped := make(map[*Entry]bool)
	for _, j := range jobs {
		if j.skip {
			skipped[j.entry] = true
			continue
		}
		st.Files++
		st.Bytes += j.entry.Size
		if j.hashed {
			st.FilesHashed++
		}
		if j.didPut {
			st.FilesUploaded++
			st.BytesUploaded += j.uploaded
		}
	}
	hashes := make(map[string]struct{})
	for i := range m.Dirs {
		d := &m.Dirs[i]
		kept := make([]Entry, 0, len(d.Entries))
		for k := range d.Entries {
			e := &d.Entries[k]
			if skipped[e] {
				continue
			}
			if e.Type == TypeFile {
				hashes[e.SHA256] = struct{}{}
			}
			kept = append(kept, *e)
		}
		d.Entries = kept
		slices.SortFunc(d.Entries, func(a, b Entry) int { return strings.Compare(a.Path, b.Path) })
	}

	// Whatever happens to the commit, these hashes are right. The blobs are in the store, but only the
	// commit makes latest name them, so the caller makes them known then.
	s.cache = unchanged
	return m, hashes, st, nil
}

// unchanged fills j's entry, adding its cached hash to next, when the cache vouches for the file and its
// blob is known to be stored: what tryFile would do for it, without a worker.
func (s *Snapshotter) unchanged(up *uploads, j *fileJob, next map[cacheKey]cached) (bool, error) {
	key := cacheKey{j.dir, j.entry.Path}
	c, ok := s.cache[key]
	if !ok {
		return false, nil
	}
	id, haveID := fileIDOf(j.info)
	if !haveID || !c.trusted(id, s.racy) {
		return false, nil
	}
	up.mu.Lock()
	_, known := up.known[c.sha]
	up.mu.Unlock()
	if !known {
		return false, nil
	}
	if err := up.charge(c.sha, id.size); err != nil {
		return false, err
	}
	e := j.entry
	e.Mode, e.MTime, e.Size, e.SHA256 = j.info.Mode().Perm(), j.info.ModTime().UnixNano(), id.size, c.sha
	next[key] = c
	return true, nil
}

// walk lists one directory without following symlinks. Regular files come back as jobs whose entries
// point into the returned Dir.
func (s *Snapshotter) walk(root *os.Root, name string, st *Stats) (Dir, []*fileJob, error) {
	var entries []Entry
	type found struct {
		index int
		info  fs.FileInfo
	}
	var files []found
	skip := func(p string, d fs.DirEntry, why string, err error) error {
		st.Skipped++
		s.cfg.Logger.Warn("snapshot: skipping", "dir", name, "path", p, "reason", why, "err", err)
		if d != nil && d.IsDir() {
			return fs.SkipDir
		}
		return nil
	}
	err := fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == "." {
				return err
			}
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while walking
			}
			// A directory that cannot be read: its entry is recorded, its contents are not.
			return skip(p, nil, "unreadable", err)
		}
		if p == "." {
			return nil
		}
		switch {
		case s.cfg.Exclude != nil && s.cfg.Exclude(name, p):
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		case strings.HasPrefix(d.Name(), restoreTempPrefix) || strings.HasPrefix(d.Name(), workspace.TempPrefix):
			return nil
		case !utf8.ValidString(p):
			return skip(p, d, "name is not valid UTF-8", nil)
		case len(p) > MaxPathLen:
			return skip(p, d, "path is too long", nil)
		}
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return skip(p, d, "stat failed", err)
		}
		switch mode := info.Mode(); {
		case mode.IsDir():
			entries = append(entries, Entry{Path: p, Type: TypeDir, Mode: mode.Perm()})
			st.Dirs++
		case mode&fs.ModeSymlink != 0:
			target, err := root.Readlink(p)
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			if err != nil {
				return skip(p, d, "readlink failed", err)
			}
			if target == "" || !utf8.ValidString(target) || len(target) > MaxPathLen {
				return skip(p, d, "symlink target is not valid UTF-8", nil)
			}
			entries = append(entries, Entry{Path: p, Type: TypeSymlink, Target: target})
			st.Symlinks++
		case mode.IsRegular():
			entries = append(entries, Entry{Path: p, Type: TypeFile})
			files = append(files, found{len(entries) - 1, info})
		default:
			return skip(p, d, "not a file, directory or symlink: "+mode.Type().String(), nil)
		}
		return nil
	})
	if err != nil {
		return Dir{}, nil, err
	}
	jobs := make([]*fileJob, len(files))
	for i, f := range files {
		jobs[i] = &fileJob{root: root, dir: name, entry: &entries[f.index], info: f.info}
	}
	return Dir{Name: name, Entries: entries}, jobs, nil
}

// file fills j's entry from the file's content, reading it again if it changes underneath.
func (s *Snapshotter) file(ctx context.Context, up *uploads, cache *sync.Map, j *fileJob) error {
	p := j.entry.Path
	for attempt := 1; ; attempt++ {
		err := s.tryFile(ctx, up, cache, j)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, fs.ErrNotExist):
			j.skip = true // removed since the walk
			return nil
		case errors.Is(err, fs.ErrPermission):
			j.skip = true
			s.cfg.Logger.Warn("snapshot: skipping", "dir", j.dir, "path", p, "reason", "unreadable", "err", err)
			return nil
		case !errors.Is(err, errChanged):
			return fmt.Errorf("%s/%s: %w", j.dir, p, err)
		case attempt == fileAttempts:
			return fmt.Errorf("%s/%s: %w %d times", j.dir, p, err, attempt)
		}
		info, err := j.root.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			j.skip = true
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s/%s: %w", j.dir, p, err)
		}
		if !info.Mode().IsRegular() {
			j.skip = true // no longer a file; the next snapshot records what it became
			return nil
		}
		j.info = info
	}
}

// tryFile hashes the file unless the cache vouches for it, and uploads its content unless the store has
// it. It returns errChanged when what it read does not match what the walk saw.
func (s *Snapshotter) tryFile(ctx context.Context, up *uploads, cache *sync.Map, j *fileJob) error {
	e, key := j.entry, cacheKey{j.dir, j.entry.Path}
	info := j.info
	id, haveID := fileIDOf(info)
	var (
		sha  string
		size = info.Size()
		data []byte // the content when small, so it is read only once
	)
	if c, ok := s.cache[key]; ok && haveID && c.trusted(id, s.racy) {
		sha = c.sha
		cache.Store(key, c)
	} else {
		hashedAt := time.Now()
		f, fi, err := s.openSame(j.root, e.Path, info)
		if err != nil {
			return err
		}
		h := sha256.New()
		if fi.Size() <= inlineMax {
			var b bytes.Buffer
			b.Grow(int(fi.Size()) + bytes.MinRead)
			_, err = b.ReadFrom(io.LimitReader(f, inlineMax+1))
			data = b.Bytes()
			if err == nil && len(data) > inlineMax {
				err = errChanged // grew past the limit while being read
			}
			h.Write(data)
			size = int64(len(data))
		} else {
			size, err = io.Copy(h, f)
		}
		if err != nil {
			f.Close()
			return err
		}
		after, err := f.Stat()
		f.Close()
		if err != nil {
			return err
		}
		sha = hex.EncodeToString(h.Sum(nil))
		j.hashed = true
		info = fi
		before, ok1 := fileIDOf(fi)
		now, ok2 := fileIDOf(after)
		if ok1 && ok2 && before == now && before.size == size {
			cache.Store(key, cached{id: before, sha: sha, hashedAt: hashedAt})
		}
	}
	e.Mode = info.Mode().Perm()
	e.MTime = info.ModTime().UnixNano()
	e.Size = size
	e.SHA256 = sha
	if err := up.charge(sha, size); err != nil {
		return err
	}
	return s.ensureBlob(ctx, up, j, data)
}

// openSame opens the file at p and checks it is still the regular file the walk saw, not something put
// in its place (os.Root already keeps the open inside the directory).
func (s *Snapshotter) openSame(root *os.Root, p string, want fs.FileInfo) (*os.File, fs.FileInfo, error) {
	f, err := root.OpenFile(p, openFlags, 0)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() || !os.SameFile(fi, want) {
		f.Close()
		return nil, nil, errChanged
	}
	return f, fi, nil
}

// ensureBlob uploads the entry's content unless it is known to be in the store or found there. data is
// the content if already read.
func (s *Snapshotter) ensureBlob(ctx context.Context, up *uploads, j *fileJob, data []byte) error {
	e := j.entry
	leader, err := up.acquire(ctx, e.SHA256)
	if err != nil || !leader {
		return err
	}
	ok := false
	defer func() { up.release(e.SHA256, ok) }()
	key := blobKey(s.cfg.Prefix, e.SHA256)
	o, err := s.cfg.Store.Stat(ctx, key)
	exists := err == nil
	switch {
	case exists && o.Modified.After(up.reuseAfter):
		ok = true // young enough that Collect keeps it until this snapshot's manifest protects it
		return nil
	case exists:
		// Old: Collect may delete it any time (no kept manifest may name it). Writing it again renews it;
		// the snapshot checks it again after its commit (checkRenewed).
		defer func() {
			if ok {
				up.mu.Lock()
				up.renewed = append(up.renewed, j)
				up.mu.Unlock()
			}
		}()
	case !errors.Is(err, blob.ErrNotFound):
		return fmt.Errorf("blob %s: %w", e.SHA256, err)
	default:
		if err := up.reserve(e.Size); err != nil {
			return err
		}
		defer func() {
			if !ok {
				up.added.Add(-e.Size)
			}
		}()
	}
	if data != nil || e.Size == 0 {
		err = s.cfg.Store.Put(ctx, key, bytes.NewReader(data), int64(len(data)))
	} else {
		// Read again; the verifier fails the Put, so nothing is stored under the hash, if the content
		// is no longer what was hashed.
		f, _, oerr := s.openSame(j.root, e.Path, j.info)
		if oerr != nil {
			return oerr
		}
		v := &verifier{r: io.LimitReader(f, e.Size+1), h: sha256.New(), size: e.Size, want: e.SHA256}
		err = s.cfg.Store.Put(ctx, key, v, e.Size)
		f.Close()
		if v.changed {
			return errChanged
		}
	}
	if err != nil {
		return fmt.Errorf("upload blob %s: %w", e.SHA256, err)
	}
	ok = true
	j.didPut = true
	j.uploaded = e.Size
	up.mu.Lock()
	if up.put == nil {
		up.put = make(map[string]struct{})
	}
	up.put[key] = struct{}{}
	up.mu.Unlock()
	return nil
}

// verifier passes a file's content through and fails at the end if it is not size bytes hashing to
// want.
type verifier struct {
	r       io.Reader
	h       hash.Hash
	n, size int64
	want    string
	changed bool
}

func (v *verifier) Read(p []byte) (int, error) {
	n, err := v.r.Read(p)
	v.h.Write(p[:n])
	v.n += int64(n)
	if v.n > v.size {
		v.changed = true
		return n, errChanged
	}
	if err == io.EOF && (v.n != v.size || hex.EncodeToString(v.h.Sum(nil)) != v.want) {
		v.changed = true
		return n, errChanged
	}
	return n, err
}

// uploads tracks, during one snapshot, the blobs known to be in the store and those being uploaded, so
// identical files are uploaded once.
type uploads struct {
	mu       sync.Mutex
	known    map[string]struct{}
	inflight map[string]chan struct{}
	// reuseAfter: a stored blob last written before it is written again rather than reused.
	reuseAfter time.Time
	// limit (<= 0: no cap) caps stored + added: stored is the bytes under the prefix before this
	// snapshot (-1 unknown), added the bytes of new blobs uploaded or being uploaded.
	limit, stored int64
	added         atomic.Int64
	// projected (after a reclaim): limit caps instead base + the bytes of the blobs the snapshot names
	// that are not pinned, each counted once (charged): base is what the store keeps whatever the
	// snapshot names (reclaimed.pinned), so the sum is what it keeps once this snapshot is committed and
	// the blobs of the previous one that it no longer names are reclaimed. Guarded by mu.
	projected    bool
	base         int64
	pinned       map[string]struct{}
	charged      map[string]struct{}
	chargedBytes int64
	// renewed are the files whose old blob was written again (under mu).
	renewed []*fileJob
	// put are the keys of the blobs this snapshot wrote (under mu).
	put map[string]struct{}
}

// checkRenewed makes sure the blobs the snapshot renewed are still there after its commit. A Collect that
// listed before the renewal and looked at a blob again just before it (then deleted it) may have removed
// one; it is uploaded again from the file, or, if the file changed, forgotten so the next snapshot
// uploads it. Collects listing after the commit keep them: latest names them.
func (s *Snapshotter) checkRenewed(ctx context.Context, up *uploads) {
	for _, j := range up.renewed {
		e := j.entry
		key := blobKey(s.cfg.Prefix, e.SHA256)
		_, err := s.cfg.Store.Stat(ctx, key)
		if !errors.Is(err, blob.ErrNotFound) {
			continue
		}
		err = s.reupload(ctx, j, key)
		if err == nil {
			s.cfg.Logger.Warn("snapshot: a concurrent gc deleted a renewed blob; uploaded it again", "blob", e.SHA256)
			continue
		}
		delete(s.known, e.SHA256)
		s.cfg.Logger.Error("snapshot: a concurrent gc deleted a renewed blob; the next snapshot uploads it",
			"blob", e.SHA256, "dir", j.dir, "path", e.Path, "err", err)
	}
}

func (s *Snapshotter) reupload(ctx context.Context, j *fileJob, key string) error {
	root, err := os.OpenRoot(s.cfg.Dirs[j.dir])
	if err != nil {
		return err
	}
	defer root.Close()
	f, _, err := s.openSame(root, j.entry.Path, j.info)
	if err != nil {
		return err
	}
	defer f.Close()
	v := &verifier{r: io.LimitReader(f, j.entry.Size+1), h: sha256.New(), size: j.entry.Size, want: j.entry.SHA256}
	return s.cfg.Store.Put(ctx, key, v, j.entry.Size)
}

// reserve counts n more bytes of new blobs, refusing when they would take the store past the limit
// (not when projected: charge decides).
func (u *uploads) reserve(n int64) error {
	added := u.added.Add(n)
	if u.limit <= 0 || u.projected || u.stored+added <= u.limit {
		return nil
	}
	u.added.Add(-n)
	return quotaError(u.stored, added, u.limit)
}

// charge counts, when projected, the n bytes of the blob sha the snapshot names, once, unless pinned,
// refusing when the total would pass the limit.
func (u *uploads) charge(sha string, n int64) error {
	if !u.projected || u.limit <= 0 {
		return nil
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	_, pinned := u.pinned[sha]
	_, seen := u.charged[sha]
	if pinned || seen {
		return nil
	}
	u.charged[sha] = struct{}{}
	u.chargedBytes += n
	if u.base+u.chargedBytes > u.limit {
		return quotaError(u.base, u.chargedBytes, u.limit)
	}
	return nil
}

// fits checks that n more bytes (the manifest) keep the store within the limit.
func (u *uploads) fits(n int64) error {
	if u.limit <= 0 {
		return nil
	}
	base, adding := u.stored, u.added.Load()+n
	if u.projected {
		u.mu.Lock()
		base, adding = u.base, u.chargedBytes+n
		u.mu.Unlock()
	}
	if base+adding > u.limit {
		return quotaError(base, adding, u.limit)
	}
	return nil
}

func quotaError(stored, adding, limit int64) error {
	return wire.Wrap(wire.ResourceExhausted, ErrStoredBytesQuota, fmt.Sprintf(
		"snapshot refused: the sandbox's snapshots would keep %d bytes in the store, over its limit of %d; the previous snapshot stays, delete files to get under the limit",
		stored+adding, limit)).WithDetails(map[string]any{"stored_bytes": stored, "snapshot_bytes": adding, "limit_bytes": limit})
}

// acquire returns true if the caller must make sure the blob is stored (and then call release), false if
// it already is.
func (u *uploads) acquire(ctx context.Context, sha string) (bool, error) {
	for {
		u.mu.Lock()
		if _, ok := u.known[sha]; ok {
			u.mu.Unlock()
			return false, nil
		}
		ch, busy := u.inflight[sha]
		if !busy {
			u.inflight[sha] = make(chan struct{})
			u.mu.Unlock()
			return true, nil
		}
		u.mu.Unlock()
		select {
		case <-ch: // done; known now, or failed and this caller takes over
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
}

func (u *uploads) release(sha string, stored bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if stored {
		u.known[sha] = struct{}{}
	}
	close(u.inflight[sha])
	delete(u.inflight, sha)
}

// parallel calls fn for 0..n-1 on up to workers goroutines and returns the first error, after which the
// remaining calls are skipped. The calls in flight are not cancelled: they finish (or fail) against the
// caller's ctx before parallel returns. An upload cancelled half-way may still land in an S3 store after
// the client gave up on it, after the reclaim that follows a refusal listed the store, and stay there;
// letting it finish makes the store's contents settled when parallel returns.
func parallel(ctx context.Context, n, workers int, fn func(ctx context.Context, i int) error) error {
	var (
		next    atomic.Int64
		stopped atomic.Bool
		wg      sync.WaitGroup
		once    sync.Once
		first   error
	)
	for range min(workers, n) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || stopped.Load() || ctx.Err() != nil {
					return
				}
				if err := fn(ctx, i); err != nil {
					once.Do(func() { first = err; stopped.Store(true) })
					return
				}
			}
		})
	}
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}
