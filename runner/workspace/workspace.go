// Package workspace holds a user's workspace directory as seen through the sandbox REST API: reading,
// atomically writing, listing and deleting files by client-supplied paths. Every operation goes through an
// os.Root opened on the workspace, so "..", absolute paths and symlinks that lead outside are refused by
// construction; Clean additionally rejects malformed and escaping paths up front with a typed error.
//
// Errors returned are *wire.Error values (code for the transport) wrapping this package's sentinels.
package workspace

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/warren-mesh/warren/internal/wire"
)

// TempPrefix starts the name of an upload in progress; such files live beside their target until renamed.
const TempPrefix = ".warren-upload-"

// Root is an open workspace. It is safe for concurrent use.
type Root struct {
	root *os.Root
}

// Open opens the existing directory dir as a workspace.
func Open(dir string) (*Root, error) {
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("open workspace %s: %w", dir, err)
	}
	return &Root{root: r}, nil
}

// Close releases the workspace.
func (w *Root) Close() error { return w.root.Close() }

// Dir checks that p names an existing directory (following symlinks that stay inside) and returns its
// cleaned form, for use as a working directory.
func (w *Root) Dir(p string) (string, error) {
	c, err := Clean(p)
	if err != nil {
		return "", err
	}
	fi, err := w.root.Stat(c)
	if err != nil {
		return "", classify(c, err)
	}
	if !fi.IsDir() {
		return "", wire.Wrap(wire.InvalidArgument, ErrInvalidPath, fmt.Sprintf("%s is not a directory", c))
	}
	return c, nil
}

// Open opens the regular file at p for reading and returns it with its size. Directories and special files
// (FIFOs, devices, sockets) are invalid_argument; a FIFO cannot block the caller because it is opened
// non-blocking and refused.
func (w *Root) Open(p string) (*os.File, int64, error) {
	c, err := Clean(p)
	if err != nil {
		return nil, 0, err
	}
	f, err := w.root.OpenFile(c, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, 0, classify(c, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("stat %s: %w", c, err)
	}
	switch {
	case fi.IsDir():
		f.Close()
		return nil, 0, wire.Wrap(wire.InvalidArgument, ErrIsDir, fmt.Sprintf("%s is a directory", c))
	case !fi.Mode().IsRegular():
		f.Close()
		return nil, 0, wire.Wrap(wire.InvalidArgument, ErrInvalidPath, fmt.Sprintf("%s is not a regular file", c))
	}
	return f, fi.Size(), nil
}

// WriteOptions tunes Write.
type WriteOptions struct {
	// Parents creates missing parent directories (0755); without it a missing parent is not_found.
	Parents bool
	// MaxSize caps the bytes accepted; more is payload_too_large. Zero or less means no cap.
	MaxSize int64
}

// Written describes a completed Write.
type Written struct {
	Path    string // cleaned path
	Size    int64
	Created bool // false when an existing file was replaced
}

// Write streams r into a temporary file beside p and renames it over p, so readers see either the old or
// the new content, never a partial file. On any error, including exceeding MaxSize, the temporary file is
// removed and p is untouched. A replaced file keeps its permission bits; a new one is 0644. A symlink at p
// is replaced, not written through.
func (w *Root) Write(p string, r io.Reader, opt WriteOptions) (Written, error) {
	c, err := Clean(p)
	if err != nil {
		return Written{}, err
	}
	if c == "." {
		return Written{}, wire.Wrap(wire.InvalidArgument, ErrRoot, "cannot write to the workspace root")
	}
	dir := path.Dir(c)
	if opt.Parents && dir != "." {
		if err := w.root.MkdirAll(dir, 0o755); err != nil {
			return Written{}, classify(dir, err)
		}
	}
	perm := fs.FileMode(0o644)
	created := true
	switch fi, err := w.root.Lstat(c); {
	case err == nil && fi.IsDir():
		return Written{}, wire.Wrap(wire.Conflict, ErrIsDir, fmt.Sprintf("%s is a directory", c))
	case err == nil:
		created = false
		if fi.Mode().IsRegular() {
			perm = fi.Mode().Perm()
		}
	case !errors.Is(err, fs.ErrNotExist):
		return Written{}, classify(c, err)
	}

	tmp := path.Join(dir, TempPrefix+randomHex(8))
	f, err := w.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return Written{}, classify(dir, err)
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
			_ = w.root.Remove(tmp)
		}
	}()
	src := r
	if opt.MaxSize > 0 {
		src = io.LimitReader(r, opt.MaxSize+1)
	}
	n, err := io.Copy(f, src)
	if err != nil {
		return Written{}, fmt.Errorf("write %s: %w", c, err)
	}
	if opt.MaxSize > 0 && n > opt.MaxSize {
		return Written{}, wire.Wrap(wire.PayloadTooLarge, ErrTooLarge,
			fmt.Sprintf("file exceeds the %d byte limit", opt.MaxSize))
	}
	// The umask applied at create time; set the bits we meant.
	if err := f.Chmod(perm); err != nil {
		return Written{}, fmt.Errorf("chmod %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		return Written{}, fmt.Errorf("sync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return Written{}, fmt.Errorf("close %s: %w", tmp, err)
	}
	if err := w.root.Rename(tmp, c); err != nil {
		return Written{}, classify(c, err)
	}
	ok = true
	return Written{Path: c, Size: n, Created: created}, nil
}

// Remove deletes the file, symlink or (with recursive) directory at p. A symlink is removed itself, never
// its target. A directory without recursive is conflict (ErrIsDir), even when empty, so a client cannot
// delete a tree by accident. The workspace root is refused with permission_denied (ErrRoot).
func (w *Root) Remove(p string, recursive bool) error {
	c, err := Clean(p)
	if err != nil {
		return err
	}
	if c == "." {
		return wire.Wrap(wire.PermissionDenied, ErrRoot, "refusing to delete the workspace root")
	}
	fi, err := w.root.Lstat(c)
	if err != nil {
		return classify(c, err)
	}
	if fi.IsDir() {
		if !recursive {
			return wire.Wrap(wire.Conflict, ErrIsDir, fmt.Sprintf("%s is a directory; pass recursive=true to delete it", c))
		}
		if err := w.root.RemoveAll(c); err != nil {
			return classify(c, err)
		}
		return nil
	}
	if err := w.root.Remove(c); err != nil {
		return classify(c, err)
	}
	return nil
}

// List returns the entries of the directory at p sorted by name. Entries describe themselves (a symlink is
// reported as "symlink" with the link's own size), and their Path is relative to the workspace root.
func (w *Root) List(p string) (wire.FileList, error) {
	c, err := Clean(p)
	if err != nil {
		return wire.FileList{}, err
	}
	f, err := w.root.OpenFile(c, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_DIRECTORY, 0)
	if err != nil {
		if errors.Is(err, syscall.ENOTDIR) {
			if fi, serr := w.root.Stat(c); serr == nil && !fi.IsDir() {
				return wire.FileList{}, wire.Wrap(wire.InvalidArgument, ErrInvalidPath, fmt.Sprintf("%s is not a directory", c))
			}
		}
		return wire.FileList{}, classify(c, err)
	}
	defer f.Close()
	ents, err := f.ReadDir(-1)
	if err != nil {
		return wire.FileList{}, fmt.Errorf("read directory %s: %w", c, err)
	}
	out := wire.FileList{Path: c, Entries: make([]wire.FileInfo, 0, len(ents))}
	for _, e := range ents {
		fi, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed while listing
		}
		if err != nil {
			return wire.FileList{}, fmt.Errorf("stat %s/%s: %w", c, e.Name(), err)
		}
		out.Entries = append(out.Entries, fileInfo(c, fi))
	}
	slices.SortFunc(out.Entries, func(a, b wire.FileInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func fileInfo(dir string, fi fs.FileInfo) wire.FileInfo {
	typ := "other"
	switch m := fi.Mode(); {
	case m.IsRegular():
		typ = "file"
	case m.IsDir():
		typ = "dir"
	case m&fs.ModeSymlink != 0:
		typ = "symlink"
	}
	return wire.FileInfo{
		Name:    fi.Name(),
		Path:    path.Join(dir, fi.Name()),
		Type:    typ,
		Size:    fi.Size(),
		Mode:    fi.Mode().String(),
		ModTime: fi.ModTime().UTC().Format(time.RFC3339Nano),
	}
}

// classify turns an error from os.Root into a client-facing *wire.Error. Anything unexpected is returned
// as is and becomes internal at the transport.
func classify(p string, err error) error {
	switch {
	case isEscape(err):
		return wire.Wrap(wire.PermissionDenied, fmt.Errorf("%w: %w", ErrEscapes, err),
			fmt.Sprintf("%s leads outside the workspace", p))
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return wire.Wrap(wire.NotFound, fmt.Errorf("%w: %w", ErrNotFound, err), fmt.Sprintf("%s does not exist", p))
	case errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.ENOTEMPTY), errors.Is(err, syscall.EEXIST):
		return wire.Wrap(wire.Conflict, fmt.Errorf("%w: %w", ErrIsDir, err), fmt.Sprintf("%s is in the way", p))
	case errors.Is(err, fs.ErrPermission):
		return wire.Wrap(wire.PermissionDenied, err, fmt.Sprintf("%s: permission denied", p))
	case errors.Is(err, syscall.ENAMETOOLONG), errors.Is(err, syscall.ELOOP):
		return wire.Wrap(wire.InvalidArgument, fmt.Errorf("%w: %w", ErrInvalidPath, err),
			fmt.Sprintf("%s: name too long or too many symbolic links", p))
	}
	return fmt.Errorf("%s: %w", p, err)
}

// escapeMessage is the text of os's unexported errPathEscapes. os.Root offers no exported way to test for
// it; TestClassifyEscape pins the text so a change in Go fails loudly instead of turning escapes into
// internal errors.
const escapeMessage = "path escapes from parent"

func isEscape(err error) bool {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if e.Error() == escapeMessage {
			return true
		}
	}
	return false
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on Linux
	return hex.EncodeToString(b)
}

// Give hands p and each directory between the workspace root and p to uid:gid (lchown, so a symlink is
// changed itself, never what it points to; every step resolves inside the root). The runner calls it after
// writing a file for a sandbox that runs as another host uid, so the sandbox owns what the runner made.
func (w *Root) Give(p string, uid, gid int) error {
	c, err := Clean(p)
	if err != nil {
		return err
	}
	if c == "." {
		return nil
	}
	parts := strings.Split(c, "/")
	for i := range parts {
		if err := w.root.Lchown(strings.Join(parts[:i+1], "/"), uid, gid); err != nil {
			return classify(c, err)
		}
	}
	return nil
}
