// Package fs is the directory adapter of the BlobStore port (blob.Store), used by `warren dev` and tests.
// Several processes may share one directory: writes are atomic renames, and PutIf is a compare-and-set
// under an exclusive flock on a store-wide lock file, so it is linearizable across processes on one host
// (not across hosts sharing the directory over NFS).
//
// Layout: the object at key "a/b/c" is the file <dir>/a/b/c# — the key's segments are directories and the
// last one gets a "#" suffix. "#" is not a key character, so an object file never collides with the
// directory of a longer key ("a" and "a/b" coexist, as in S3), nor with the store's own files: the lock
// file <dir>/#lock and temporary files named #tmp-*. Emptied directories are not removed.
package fs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"iter"
	"os"
	"path/filepath"
	"strings"

	"github.com/warren-mesh/warren/internal/blob"
)

const (
	// MaxKeyLen bounds a key (the port's limit).
	MaxKeyLen = blob.MaxKeyLen
	// maxSegmentLen bounds one key segment: NAME_MAX (255) less the suffix.
	maxSegmentLen = 255 - len(objectSuffix)

	objectSuffix = "#"
	lockName     = "#lock"
	tempPattern  = "#tmp-*"
)

// Store is a blob.Store over a directory. It is safe for concurrent use, also by several Stores (in one
// or several processes) on the same directory. It holds no open files, so it needs no Close.
type Store struct {
	dir  string
	lock chan struct{} // serializes this Store's goroutines before they contend for the flock
}

var _ blob.Store = (*Store)(nil)

// New opens the store rooted at dir, creating the directory (0700) if needed.
func New(dir string) (*Store, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("blob store %s: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("blob store %s: %w", abs, err)
	}
	// Create the lock file now so a misconfigured directory (not writable) fails here, not on first use.
	f, err := os.OpenFile(filepath.Join(abs, lockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("blob store %s: %w", abs, err)
	}
	f.Close()
	return &Store{dir: abs, lock: make(chan struct{}, 1)}, nil
}

// Dir returns the store's absolute directory.
func (s *Store) Dir() string { return s.dir }

// Put writes r to a temporary file beside the object, syncs it, and renames it into place under the store
// lock, so the object appears whole or not at all and the write is ordered with PutIf. With size >= 0, a
// reader that yields a different number of bytes is an error and nothing is written.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	p, err := s.path(key)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	tmp, err := s.writeTemp(ctx, p, r, size)
	if err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	if err := s.commit(ctx, tmp, p, func() error { return nil }); err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	return nil
}

// Get opens the object for streaming. The returned file keeps the content it had when opened even if the
// object is replaced meanwhile.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	p, err := s.path(key)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", key, notFound(err))
	}
	return f, nil
}

// GetRange opens the object file and reads the range of it.
func (s *Store) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	if err := blob.CheckRange(off, n); err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	rc, err := s.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	f := rc.(*os.File)
	return struct {
		io.Reader
		io.Closer
	}{io.NewSectionReader(f, off, n), f}, nil
}

// Exists reports whether the object file exists.
func (s *Store) Exists(ctx context.Context, key string) (bool, error) {
	p, err := s.path(key)
	if err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("exists %s: %w", key, err)
	}
	_, err = os.Lstat(p)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(notFound(err), blob.ErrNotFound):
		return false, nil
	default:
		return false, fmt.Errorf("exists %s: %w", key, err)
	}
}

// Read returns the object and its ETag, the hex SHA-256 of the content.
func (s *Store) Read(ctx context.Context, key string) ([]byte, string, error) {
	p, err := s.path(key)
	if err != nil {
		return nil, "", err
	}
	if err := ctx.Err(); err != nil {
		return nil, "", fmt.Errorf("read %s: %w", key, err)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, "", fmt.Errorf("read %s: %w", key, notFound(err))
	}
	return data, etagOf(data), nil
}

// PutIf compares the current object's ETag with ifMatch and writes data, both under the store lock.
func (s *Store) PutIf(ctx context.Context, key string, data []byte, ifMatch string) (string, error) {
	p, err := s.path(key)
	if err != nil {
		return "", err
	}
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("put-if %s: %w", key, err)
	}
	check := func() error {
		cur, err := os.ReadFile(p)
		switch {
		case errors.Is(err, iofs.ErrNotExist):
			if ifMatch != "" {
				return fmt.Errorf("%w: no object, want etag %s", blob.ErrPrecondition, ifMatch)
			}
			return nil
		case err != nil:
			return err
		case ifMatch == "":
			return fmt.Errorf("%w: object exists", blob.ErrPrecondition)
		case etagOf(cur) != ifMatch:
			return fmt.Errorf("%w: etag %s, want %s", blob.ErrPrecondition, etagOf(cur), ifMatch)
		}
		return nil
	}
	// Compare once without the lock, so a loser of a race fails before paying for a synced write; then
	// write the temporary file outside the lock, and compare again and rename under it, so the lock is
	// held only for a read and a rename.
	if err := check(); err != nil {
		return "", fmt.Errorf("put-if %s: %w", key, err)
	}
	tmp, err := s.writeTemp(ctx, p, bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return "", fmt.Errorf("put-if %s: %w", key, err)
	}
	if err := s.commit(ctx, tmp, p, check); err != nil {
		return "", fmt.Errorf("put-if %s: %w", key, err)
	}
	return etagOf(data), nil
}

// Delete removes the object under the store lock; a missing object is not an error.
func (s *Store) Delete(ctx context.Context, key string) error {
	p, err := s.path(key)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	removed := false
	err = s.locked(ctx, func() error {
		err := os.Remove(p)
		if err == nil {
			removed = true
		} else if !errors.Is(notFound(err), blob.ErrNotFound) {
			return err
		}
		return nil
	})
	if err == nil && removed {
		err = syncDir(filepath.Dir(p))
	}
	if err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	return nil
}

// Stat describes the object file: its size and modification time (set when the object was written).
func (s *Store) Stat(ctx context.Context, key string) (blob.Object, error) {
	p, err := s.path(key)
	if err != nil {
		return blob.Object{}, err
	}
	if err := ctx.Err(); err != nil {
		return blob.Object{}, fmt.Errorf("stat %s: %w", key, err)
	}
	fi, err := os.Lstat(p)
	if err != nil {
		return blob.Object{}, fmt.Errorf("stat %s: %w", key, notFound(err))
	}
	return blob.Object{Key: key, Size: fi.Size(), Modified: fi.ModTime()}, nil
}

// List walks the directory that holds prefix's last complete segment, skipping directories that cannot
// hold a matching key and the store's own files. Objects are yielded as the walk finds them.
func (s *Store) List(ctx context.Context, prefix string) iter.Seq2[blob.Object, error] {
	if err := blob.CheckPrefix(prefix); err != nil {
		return blob.ListErr(err)
	}
	return func(yield func(blob.Object, error) bool) {
		base := prefix[:strings.LastIndexByte(prefix, '/')+1] // "" or "a/b/"
		root := filepath.Join(s.dir, filepath.FromSlash(base))
		stop := errors.New("stop")
		err := filepath.WalkDir(root, func(p string, d iofs.DirEntry, err error) error {
			if cerr := ctx.Err(); cerr != nil {
				return cerr
			}
			if err != nil {
				if errors.Is(err, iofs.ErrNotExist) {
					return nil // the base directory does not exist, or an entry vanished
				}
				return err
			}
			rel, rerr := filepath.Rel(s.dir, p)
			if rerr != nil {
				return rerr
			}
			name := filepath.ToSlash(rel)
			if d.IsDir() {
				if p == root {
					return nil
				}
				dir := name + "/"
				if !strings.HasPrefix(dir, prefix) && !strings.HasPrefix(prefix, dir) {
					return filepath.SkipDir
				}
				return nil
			}
			key, ok := strings.CutSuffix(name, objectSuffix)
			if !ok || !d.Type().IsRegular() || strings.HasPrefix(d.Name(), "#") || !strings.HasPrefix(key, prefix) {
				return nil // the lock, temporary files, anything not an object
			}
			fi, err := d.Info()
			if errors.Is(err, iofs.ErrNotExist) {
				return nil // deleted meanwhile
			}
			if err != nil {
				return err
			}
			if !yield(blob.Object{Key: key, Size: fi.Size(), Modified: fi.ModTime()}, nil) {
				return stop
			}
			return nil
		})
		if err != nil && err != stop {
			yield(blob.Object{}, fmt.Errorf("list %s: %w", prefix, err))
		}
	}
}

// path validates key and returns its object file.
func (s *Store) path(key string) (string, error) {
	if err := validKey(key); err != nil {
		return "", err
	}
	return filepath.Join(s.dir, filepath.FromSlash(key)) + objectSuffix, nil
}

// writeTemp copies r into a synced temporary file in p's directory (created as needed) and returns its
// name. On error nothing is left behind.
func (s *Store) writeTemp(ctx context.Context, p string, r io.Reader, size int64) (name string, err error) {
	dir := filepath.Dir(p)
	if err := s.mkdirs(dir); err != nil {
		return "", err
	}
	f, err := os.CreateTemp(dir, tempPattern)
	if err != nil {
		return "", err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	src := io.Reader(&ctxReader{ctx: ctx, r: r})
	if size >= 0 {
		src = io.LimitReader(src, size+1) // one more byte than promised reveals a longer reader
	}
	n, err := io.Copy(f, src)
	if err != nil {
		return "", err
	}
	if size >= 0 && n != size {
		return "", fmt.Errorf("reader yielded %s bytes, size is %d", countString(n, size), size)
	}
	if err := f.Sync(); err != nil {
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	return f.Name(), nil
}

func countString(n, size int64) string {
	if n > size {
		return fmt.Sprintf("more than %d", size)
	}
	return fmt.Sprint(n)
}

// commit renames tmp onto p if check passes, both under the store lock, then syncs the directory. The
// temporary file is removed on any failure.
func (s *Store) commit(ctx context.Context, tmp, p string, check func() error) error {
	err := s.locked(ctx, func() error {
		if err := check(); err != nil {
			return err
		}
		return os.Rename(tmp, p)
	})
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDir(filepath.Dir(p))
}

// locked runs fn holding this Store's semaphore and the exclusive flock on the store's lock file. The lock
// file is opened anew each time: flock excludes other open file descriptions, in this process or others,
// and the lock is released when the descriptor is closed, also when the process dies.
func (s *Store) locked(ctx context.Context, fn func() error) error {
	select {
	case s.lock <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-s.lock }()
	f, err := os.OpenFile(filepath.Join(s.dir, lockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := flock(ctx, f); err != nil {
		if ctx.Err() != nil {
			return err
		}
		return fmt.Errorf("%w: lock: %w", blob.ErrUnavailable, err)
	}
	return fn()
}

// mkdirs creates dir and its missing parents below the store root, syncing each parent that gained an
// entry so that a synced object survives a crash together with its directories.
func (s *Store) mkdirs(dir string) error {
	if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
		return nil
	}
	if dir == s.dir {
		return fmt.Errorf("store directory %s is missing", dir)
	}
	if !strings.HasPrefix(dir, s.dir+string(filepath.Separator)) {
		return fmt.Errorf("directory %s is outside the store", dir)
	}
	parent := filepath.Dir(dir)
	if err := s.mkdirs(parent); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, iofs.ErrExist) {
			return nil // a concurrent writer made it
		}
		return err
	}
	return syncDir(parent)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// validKey enforces the port's key rules plus this adapter's segment limit.
func validKey(key string) error {
	if err := blob.CheckKey(key); err != nil {
		return err
	}
	for seg := range strings.SplitSeq(key, "/") {
		if len(seg) > maxSegmentLen {
			return fmt.Errorf("%w: %q: a segment is longer than %d bytes", blob.ErrInvalidKey, key, maxSegmentLen)
		}
	}
	return nil
}

// notFound maps a missing file, or a missing or non-directory parent, to blob.ErrNotFound.
func notFound(err error) error {
	var pe *iofs.PathError
	if errors.Is(err, iofs.ErrNotExist) || errors.As(err, &pe) && isNotDir(pe.Err) {
		return fmt.Errorf("%w: %w", blob.ErrNotFound, err)
	}
	return err
}

func etagOf(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
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
