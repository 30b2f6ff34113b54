package snapshot

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/warren-mesh/warren/internal/blob"
)

// emptySHA256 is the hash of no bytes; empty files are restored without fetching their blob.
var emptySHA256 = func() string { s := sha256.Sum256(nil); return hex.EncodeToString(s[:]) }()

// Restore makes each configured directory that m names hold exactly m's tree: entries not in m are
// removed (except paths Config.Exclude matches), files are fetched from the store of m's region (the
// own region's when m.Region is empty or Config.Region; a store that fails is a
// *RegionUnavailableError naming the region), checked against their SHA-256
// (ErrCorrupt on a mismatch or a missing blob) and renamed into place with their mode and mtime,
// symlinks are recreated verbatim, directories get their modes last. Files already holding the right
// content are left in place. Directories of m missing from Config.Dirs are skipped with a warning;
// configured directories m does not name are not touched. This is what a runner does on start, before
// the sandbox runs.
//
// m is validated first (as by ParseManifest), and every operation goes through os.Root without following
// symlinks on the last path element; since an entry's parent is always a directory entry of m, made a
// real directory before anything is written into it, neither a hostile manifest nor a hostile existing
// tree can make Restore write outside the directory or through a symlink. On error the directory may be
// partly restored; restoring again finishes the job. Restored files are not synced to disk, for speed:
// after a crash the runner restores again.
func (s *Snapshotter) Restore(ctx context.Context, m Manifest) (Stats, error) {
	if err := m.validate(); err != nil {
		return Stats{}, fmt.Errorf("restore: %w", err)
	}
	src, ok := s.region(m.Region)
	if !ok {
		return Stats{}, fmt.Errorf("restore %d-%d: %w: no store for region %q", m.Epoch, m.Seq, ErrConfig, m.Region)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	start := s.cfg.Now()
	var st Stats
	restored := make(map[cacheKey]cached)
	for _, d := range m.Dirs {
		host, ok := s.cfg.Dirs[d.Name]
		if !ok {
			s.cfg.Logger.Warn("restore: manifest dir not configured, skipped", "dir", d.Name)
			continue
		}
		if err := s.restoreDir(ctx, src, host, d, &st, restored); err != nil {
			return st, fmt.Errorf("restore %d-%d: dir %s: %w", m.Epoch, m.Seq, d.Name, err)
		}
	}
	s.cacheRestored(m, restored)
	known := make(map[string]struct{})
	for _, d := range m.Dirs {
		for _, e := range d.Entries {
			if e.Type == TypeFile {
				known[e.SHA256] = struct{}{}
			}
		}
	}
	if src.name != s.regions[0].name {
		// The blobs are in another region's store: the next snapshot looks for each in the own store
		// and uploads those missing, so the own region's snapshots never depend on another's store.
		known = nil
	}
	s.known = known
	st.Duration = s.cfg.Now().Sub(start)
	s.cfg.Logger.Info("snapshot restored", "epoch", m.Epoch, "seq", m.Seq, "region", src.name, "files", st.Files, "dirs", st.Dirs,
		"symlinks", st.Symlinks, "bytes", st.Bytes, "files_downloaded", st.FilesDownloaded,
		"bytes_downloaded", st.BytesDownloaded, "duration", st.Duration)
	return st, nil
}

// cacheRestored makes the hashes of the files Restore wrote or found in place known to the next snapshot,
// so it reads only the files changed since rather than the whole tree again. Their content was verified
// against its hash and nothing else writes to the directories while Restore runs (the sandbox starts
// after it), so each file held that content at the end of Restore: that is its hash's time, and the
// racy-clean rule (cached.trusted) makes any later write, even within the file system's timestamp
// granularity, read it again. The cached hashes of configured directories m does not name are kept.
func (s *Snapshotter) cacheRestored(m Manifest, restored map[cacheKey]cached) {
	hashedAt := time.Now()
	named := make(map[string]bool, len(m.Dirs))
	for _, d := range m.Dirs {
		named[d.Name] = true
	}
	for k, c := range s.cache {
		if !named[k.dir] {
			restored[k] = c
		}
	}
	for k, c := range restored {
		if named[k.dir] {
			c.hashedAt = hashedAt
			restored[k] = c
		}
	}
	s.cache = restored
}

// region returns the store of the region named name ("" is the own region).
func (s *Snapshotter) region(name string) (region, bool) {
	if name == "" {
		return s.regions[0], true
	}
	for _, r := range s.regions {
		if r.name == name {
			return r, true
		}
	}
	return region{}, false
}

// restoreDir restores d into host, adding each file it restored or found in place to restored.
func (s *Snapshotter) restoreDir(ctx context.Context, src region, host string, d Dir, st *Stats, restored map[cacheKey]cached) error {
	if err := os.MkdirAll(host, 0o700); err != nil {
		return err
	}
	root, err := os.OpenRoot(host)
	if err != nil {
		return err
	}
	defer root.Close()

	entries := slices.Clone(d.Entries)
	slices.SortFunc(entries, func(a, b Entry) int { return strings.Compare(a.Path, b.Path) })
	want := make(map[string]*Entry, len(entries))
	var dirs, files, links []*Entry
	for i := range entries {
		e := &entries[i]
		want[e.Path] = e
		switch e.Type {
		case TypeDir:
			dirs = append(dirs, e)
		case TypeFile:
			files = append(files, e)
			st.Bytes += e.Size
		case TypeSymlink:
			links = append(links, e)
		}
	}
	st.Files += len(files)
	st.Dirs += len(dirs)
	st.Symlinks += len(links)

	if err := s.prune(root, d.Name, want); err != nil {
		return fmt.Errorf("remove entries not in the manifest: %w", err)
	}
	// Parents sort before their children, so each directory's parent exists and is a real directory.
	// Directories stay writable until the end, whatever their final mode.
	for _, e := range dirs {
		fi, err := root.Lstat(e.Path)
		switch {
		case err == nil && fi.IsDir():
		case errors.Is(err, fs.ErrNotExist):
			if err := root.Mkdir(e.Path, 0o700); err != nil {
				return err
			}
		case err != nil:
			return err
		default:
			return fmt.Errorf("%s: %s in place of a directory", e.Path, fi.Mode().Type())
		}
	}
	ffs, jobs := planFetches(files, s.rangeSize)
	err = parallel(ctx, len(jobs), s.cfg.FetchConcurrency, func(ctx context.Context, i int) error {
		if err := s.runFetch(ctx, src, root, jobs[i]); err != nil {
			return fmt.Errorf("%s: %w", jobs[i].file.e.Path, err)
		}
		return nil
	})
	if err != nil {
		for _, ff := range ffs {
			ff.abandon(root)
		}
		return err
	}
	for _, ff := range ffs {
		if !ff.present && ff.e.Size > 0 {
			st.FilesDownloaded++
			st.BytesDownloaded += ff.e.Size
		}
		if ff.haveID {
			restored[cacheKey{d.Name, ff.e.Path}] = cached{id: ff.id, sha: ff.e.SHA256}
		}
	}
	for _, e := range links {
		if err := restoreSymlink(root, e); err != nil {
			return fmt.Errorf("%s: %w", e.Path, err)
		}
	}
	for _, e := range slices.Backward(dirs) {
		if err := root.Chmod(e.Path, e.Mode); err != nil {
			return err
		}
	}
	return nil
}

// prune removes what the manifest does not have, or has as another type, and makes the directories it
// keeps writable so their contents can be replaced.
func (s *Snapshotter) prune(root *os.Root, name string, want map[string]*Entry) error {
	return fs.WalkDir(root.FS(), ".", func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			if p != "." && errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if p == "." {
			return nil
		}
		excluded := s.cfg.Exclude != nil && s.cfg.Exclude(name, p)
		e, ok := want[p]
		switch {
		case ok && sameType(e.Type, de.Type()):
			if de.IsDir() {
				if excluded {
					return fs.SkipDir
				}
				// Before WalkDir reads it, so a read-only directory can be listed and emptied.
				return root.Chmod(p, 0o700)
			}
			return nil
		case !ok && excluded:
			if de.IsDir() {
				return fs.SkipDir
			}
			return nil
		case de.IsDir():
			if err := removeAll(root, p); err != nil {
				return err
			}
			return fs.SkipDir
		default:
			if err := root.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			return nil
		}
	})
}

func sameType(t EntryType, mode fs.FileMode) bool {
	switch t {
	case TypeDir:
		return mode.IsDir()
	case TypeSymlink:
		return mode&fs.ModeSymlink != 0
	case TypeFile:
		return mode.IsRegular()
	}
	return false
}

// removeAll removes a directory tree, making read-only directories in it writable if that is what
// stops it (a Go module cache, for one).
func removeAll(root *os.Root, p string) error {
	if err := root.RemoveAll(p); err == nil || !errors.Is(err, fs.ErrPermission) {
		return err
	}
	fs.WalkDir(root.FS(), p, func(q string, de fs.DirEntry, err error) error {
		if err == nil && de.IsDir() {
			root.Chmod(q, 0o700)
		}
		return nil
	})
	return root.RemoveAll(p)
}

// fetch copies e's blob from src's store into w, verifying its size and hash.
func (s *Snapshotter) fetch(ctx context.Context, src region, w io.Writer, e *Entry) (int64, error) {
	if e.Size == 0 && e.SHA256 == emptySHA256 {
		return 0, nil
	}
	rc, err := src.store.Get(ctx, blobKey(s.cfg.Prefix, e.SHA256))
	if errors.Is(err, blob.ErrNotFound) {
		return 0, fmt.Errorf("%w: blob %s is missing: %w", ErrCorrupt, e.SHA256, err)
	}
	if err != nil {
		return 0, fmt.Errorf("fetch blob %s: %w", e.SHA256, unavailable(ctx, src.name, err))
	}
	defer rc.Close()
	h := sha256.New()
	var wErr error
	n, err := copyBuffered(io.MultiWriter(errWriter{w, &wErr}, h), &ctxReader{ctx, io.LimitReader(rc, e.Size+1)})
	if err != nil {
		if wErr == nil { // the store's body failed, not the local file
			err = unavailable(ctx, src.name, err)
		}
		return 0, fmt.Errorf("fetch blob %s: %w", e.SHA256, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); n != e.Size || got != e.SHA256 {
		return 0, fmt.Errorf("%w: blob %s holds %d bytes hashing to %s, want %d bytes", ErrCorrupt, e.SHA256, n, got, e.Size)
	}
	return n, nil
}

// hasHash reports whether the regular file at p (the one fi describes) hashes to sha.
func hasHash(root *os.Root, p string, fi fs.FileInfo, sha string) (bool, error) {
	f, err := root.OpenFile(p, openFlags, 0)
	if err != nil {
		return false, err
	}
	defer f.Close()
	got, err := f.Stat()
	if err != nil || !got.Mode().IsRegular() || !os.SameFile(got, fi) {
		return false, err
	}
	h := sha256.New()
	if _, err := copyBuffered(h, f); err != nil {
		return false, err
	}
	return hex.EncodeToString(h.Sum(nil)) == sha, nil
}

// restoreSymlink creates the symlink under a temporary name and renames it over whatever is there, so
// the path is never missing and never followed.
func restoreSymlink(root *os.Root, e *Entry) error {
	if fi, err := root.Lstat(e.Path); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		if t, err := root.Readlink(e.Path); err == nil && t == e.Target {
			return nil
		}
	}
	tmp := path.Join(path.Dir(e.Path), restoreTempPrefix+rand.Text())
	if err := root.Symlink(e.Target, tmp); err != nil {
		return err
	}
	if err := root.Rename(tmp, e.Path); err != nil {
		root.Remove(tmp)
		return err
	}
	return nil
}

// errWriter records the error of w, to tell a failing local write from a failing download.
type errWriter struct {
	w   io.Writer
	err *error
}

func (e errWriter) Write(p []byte) (int, error) {
	n, err := e.w.Write(p)
	if err != nil {
		*e.err = err
	}
	return n, err
}

// ctxReader stops a long copy when the context ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
