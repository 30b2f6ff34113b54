package snapshot

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path"
	"slices"
	"sync"
	"time"

	"github.com/warren-mesh/warren/internal/blob"
)

// A blob larger than two ranges of rangeSize bytes is fetched in ranges, in parallel: one stream from
// object storage carries far less than the store can (S3 serves each connection at tens of MB/s), and a
// few large files fetched whole would leave the other fetches' slots idle at the end.
const rangeSize = 8 << 20

// fileFetch is one file of a restore: fetched whole by one fetchJob, or in ranges by several, which
// write into the same temporary file; whichever job completes the file renames it into place.
type fileFetch struct {
	e     *Entry
	parts int
	rsize int64 // the size of its ranges

	once    sync.Once
	prepErr error
	present bool     // the file already held the content: nothing to fetch
	f       *os.File // the temporary file, while being written
	tmp     string

	mu      sync.Mutex
	written []bool    // ranges written (under mu)
	hashed  int       // ranges hashed, in order (under mu, or by the one job hashing)
	hashing bool      // a job is hashing the written ranges (under mu)
	h       hash.Hash // over ranges [0, hashed)
	done    bool      // a ranged file's last range is hashed (under mu)

	// id identifies the restored file (when haveID), for the next snapshot's cache of hashes.
	id     fileID
	haveID bool
}

// fetchJob is one range of a file (or the whole file when it is fetched in one piece).
type fetchJob struct {
	file *fileFetch
	part int
}

// planFetches returns the jobs restoring files: the largest files first (so the long fetches start
// early and the small ones fill in around them), ranged ones split into their ranges.
func planFetches(files []*Entry, rsize int64) ([]*fileFetch, []fetchJob) {
	ffs := make([]*fileFetch, len(files))
	for i, e := range files {
		parts := 1
		if e.Size > 2*rsize {
			parts = int((e.Size + rsize - 1) / rsize)
		}
		ffs[i] = &fileFetch{e: e, parts: parts, rsize: rsize}
	}
	order := slices.Clone(ffs)
	slices.SortStableFunc(order, func(a, b *fileFetch) int { return cmp.Compare(b.e.Size, a.e.Size) })
	var jobs []fetchJob
	for _, ff := range order {
		for p := range ff.parts {
			jobs = append(jobs, fetchJob{ff, p})
		}
	}
	return ffs, jobs
}

// runFetch fetches the job's range (or file) and, if that completes the file, verifies and renames it.
func (s *Snapshotter) runFetch(ctx context.Context, src region, root *os.Root, j fetchJob) error {
	ff := j.file
	ff.once.Do(func() { ff.prepErr = s.prepareFetch(root, ff) })
	if ff.prepErr != nil || ff.present {
		return ff.prepErr
	}
	if ff.parts == 1 {
		if _, err := s.fetch(ctx, src, ff.f, ff.e); err != nil {
			return err
		}
		return ff.finish(root)
	}
	off := int64(j.part) * ff.rsize
	if err := s.fetchRange(ctx, src, ff.f, ff.e, off, min(ff.rsize, ff.e.Size-off)); err != nil {
		return err
	}
	return ff.advance(root, j.part)
}

// prepareFetch leaves a file that already holds the content in place (setting its mode and mtime), or
// creates the temporary file the content is written to.
func (s *Snapshotter) prepareFetch(root *os.Root, ff *fileFetch) error {
	e := ff.e
	mtime := time.Unix(0, e.MTime)
	if fi, err := root.Lstat(e.Path); err == nil && fi.Mode().IsRegular() && fi.Size() == e.Size {
		if same, err := hasHash(root, e.Path, fi, e.SHA256); err == nil && same {
			ff.present = true
			if fi.Mode().Perm() != e.Mode {
				if err := root.Chmod(e.Path, e.Mode); err != nil {
					return err
				}
			}
			if !fi.ModTime().Equal(mtime) {
				if err := root.Chtimes(e.Path, mtime, mtime); err != nil {
					return err
				}
			}
			ff.identify(root)
			return nil
		}
	}
	ff.tmp = path.Join(path.Dir(e.Path), restoreTempPrefix+rand.Text())
	f, err := root.OpenFile(ff.tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	ff.f = f
	if ff.parts > 1 {
		ff.written = make([]bool, ff.parts)
		ff.h = sha256.New()
	}
	return nil
}

// advance records that range part is written and hashes the ranges written so far, in order, reading
// them back from the file (the page cache: no second download, no buffer held per range). Only one
// job hashes at a time; a range written meanwhile is picked up by it before it stops. The job that
// hashes the last range checks the hash and renames the file into place.
func (ff *fileFetch) advance(root *os.Root, part int) error {
	ff.mu.Lock()
	ff.written[part] = true
	if ff.hashing {
		ff.mu.Unlock()
		return nil
	}
	ff.hashing = true
	for ff.hashed < ff.parts && ff.written[ff.hashed] {
		k := ff.hashed
		ff.mu.Unlock()
		off := int64(k) * ff.rsize
		_, err := copyBuffered(ff.h, io.NewSectionReader(ff.f, off, min(ff.rsize, ff.e.Size-off)))
		ff.mu.Lock()
		if err != nil {
			ff.hashing = false
			ff.mu.Unlock()
			return err
		}
		ff.hashed++
	}
	ff.hashing = false
	last := ff.hashed == ff.parts && !ff.done
	if last {
		ff.done = true
	}
	ff.mu.Unlock()
	if !last {
		return nil
	}
	if got := hex.EncodeToString(ff.h.Sum(nil)); got != ff.e.SHA256 {
		return fmt.Errorf("%w: blob %s holds %d bytes hashing to %s", ErrCorrupt, ff.e.SHA256, ff.e.Size, got)
	}
	return ff.finish(root)
}

// finish gives the temporary file its mode and mtime and renames it into place.
func (ff *fileFetch) finish(root *os.Root) error {
	e := ff.e
	err := ff.f.Chmod(e.Mode)
	if cerr := ff.f.Close(); err == nil {
		err = cerr
	}
	ff.f = nil
	mtime := time.Unix(0, e.MTime)
	if err == nil {
		err = root.Chtimes(ff.tmp, mtime, mtime)
	}
	if err == nil {
		err = root.Rename(ff.tmp, e.Path)
	}
	if err != nil {
		root.Remove(ff.tmp)
		return err
	}
	ff.tmp = ""
	ff.identify(root)
	return nil
}

// identify records what identifies the restored file, after the last change Restore made to it.
func (ff *fileFetch) identify(root *os.Root) {
	if fi, err := root.Lstat(ff.e.Path); err == nil && fi.Mode().IsRegular() {
		ff.id, ff.haveID = fileIDOf(fi)
	}
}

// abandon removes the temporary file of a fetch that did not finish.
func (ff *fileFetch) abandon(root *os.Root) {
	if ff.f != nil {
		ff.f.Close()
		ff.f = nil
	}
	if ff.tmp != "" {
		root.Remove(ff.tmp)
		ff.tmp = ""
	}
}

// fetchRange writes the n bytes of e's blob from off at the same offset of f. A blob that ends sooner is
// ErrCorrupt; its content is checked against the hash once every range is written (advance).
func (s *Snapshotter) fetchRange(ctx context.Context, src region, f *os.File, e *Entry, off, n int64) error {
	rc, err := src.store.GetRange(ctx, blobKey(s.cfg.Prefix, e.SHA256), off, n)
	if errors.Is(err, blob.ErrNotFound) {
		return fmt.Errorf("%w: blob %s is missing: %w", ErrCorrupt, e.SHA256, err)
	}
	if err != nil {
		return fmt.Errorf("fetch blob %s: %w", e.SHA256, unavailable(ctx, src.name, err))
	}
	defer rc.Close()
	var wErr error
	got, err := copyBuffered(errWriter{io.NewOffsetWriter(f, off), &wErr}, &ctxReader{ctx, io.LimitReader(rc, n)})
	if err != nil {
		if wErr == nil {
			err = unavailable(ctx, src.name, err)
		}
		return fmt.Errorf("fetch blob %s at %d: %w", e.SHA256, off, err)
	}
	if got != n {
		return fmt.Errorf("%w: blob %s ends at %d bytes, want %d", ErrCorrupt, e.SHA256, off+got, e.Size)
	}
	return nil
}

// copyBufSize is the buffer of a fetch's copies: larger than io.Copy's 32 KiB, so a restore makes fewer
// system calls per byte (reads of the connection, writes of the file, reads back to hash).
const copyBufSize = 256 << 10

var copyBufs = sync.Pool{New: func() any { return new([copyBufSize]byte) }}

// copyBuffered is io.Copy with a pooled buffer of copyBufSize bytes.
func copyBuffered(w io.Writer, r io.Reader) (int64, error) {
	buf := copyBufs.Get().(*[copyBufSize]byte)
	defer copyBufs.Put(buf)
	return io.CopyBuffer(w, r, buf[:])
}
