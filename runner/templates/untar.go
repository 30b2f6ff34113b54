package templates

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/warren-mesh/warren/internal/wire"
)

// Limits bound what one deploy may unpack. The tar comes from a client (a platform team's CI, or whoever
// holds its admin key) and is handled as hostile.
type Limits struct {
	// MaxBytes bounds the total size of the files (default DefaultMaxBytes).
	MaxBytes int64
	// MaxFiles bounds the entries of every kind (default DefaultMaxFiles).
	MaxFiles int
}

// Defaults of Limits.
const (
	DefaultMaxBytes = 512 << 20
	DefaultMaxFiles = 20000
	// maxPathLen and maxNameLen are PATH_MAX and NAME_MAX, as the snapshot manifest's.
	maxPathLen = 4096
	maxNameLen = 255
)

func (l Limits) withDefaults() Limits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultMaxBytes
	}
	if l.MaxFiles <= 0 {
		l.MaxFiles = DefaultMaxFiles
	}
	return l
}

// ErrBadArchive: the uploaded tar is malformed or holds something a template may not (an absolute or ".."
// path, a link leaving the tree, a device, a FIFO, a duplicate). Its wire code is invalid_argument.
var ErrBadArchive = errors.New("bad template archive")

// ErrTooLarge: the uploaded tar goes past Limits. Its wire code is payload_too_large.
var ErrTooLarge = errors.New("template archive too large")

func bad(format string, args ...any) error {
	return wire.Wrap(wire.InvalidArgument, ErrBadArchive, fmt.Sprintf(format, args...))
}

// Unpack extracts the tar stream r into dir, an existing empty directory, after checking every entry:
// regular files, directories and symbolic links only (hard links, devices, FIFOs and the rest are refused),
// names relative, clean once a leading "./" is dropped, without ".." elements, NUL or invalid UTF-8, each
// path once, parents that are directories of the archive (or implied by a deeper entry), symlink targets
// relative and resolving inside the tree, at most l's bytes and entries. Modes keep the permission bits
// only (no set-id, no sticky), with the owner's read and write (and search on directories) added. Every
// write goes through os.Root, so even a check missed could not write outside dir. On error dir holds a
// partial tree, which the caller removes.
func Unpack(ctx context.Context, r io.Reader, dir string, l Limits) (files int, size int64, err error) {
	l = l.withDefaults()
	root, err := os.OpenRoot(dir)
	if err != nil {
		return 0, 0, err
	}
	defer root.Close()
	tr := tar.NewReader(r)
	types := map[string]byte{} // path → tar.TypeDir, TypeReg or TypeSymlink
	type dirMode struct {
		path string
		mode fs.FileMode
	}
	var dirs []dirMode
	for {
		if err := ctx.Err(); err != nil {
			return files, size, err
		}
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return files, size, bad("read tar: %v", err)
		}
		if h.Typeflag == tar.TypeXGlobalHeader {
			continue // pax global header: metadata only
		}
		name, err := entryName(h.Name)
		if err != nil {
			return files, size, err
		}
		if name == "" { // "./": the root itself
			if h.Typeflag != tar.TypeDir {
				return files, size, bad("%q: the archive's root must be a directory", h.Name)
			}
			continue
		}
		if _, dup := types[name]; dup {
			return files, size, bad("%q appears twice", name)
		}
		if len(types)+1 > l.MaxFiles {
			return files, size, wire.Wrap(wire.PayloadTooLarge, ErrTooLarge,
				fmt.Sprintf("more than %d entries", l.MaxFiles)).WithDetails(map[string]any{"max_files": l.MaxFiles})
		}
		// Parents: a directory of the archive, or made here as one; never a file or a symlink.
		if err := ensureParents(root, types, name); err != nil {
			return files, size, err
		}
		perm := fs.FileMode(h.Mode) & fs.ModePerm
		switch h.Typeflag {
		case tar.TypeDir:
			types[name] = tar.TypeDir
			if err := root.Mkdir(name, 0o700); err != nil {
				return files, size, fmt.Errorf("unpack %s: %w", name, err)
			}
			dirs = append(dirs, dirMode{name, perm | 0o700})
		case tar.TypeReg: // archive/tar reads the old TypeRegA as TypeReg
			types[name] = tar.TypeReg
			if h.Size < 0 || h.Size > l.MaxBytes-size {
				return files, size, wire.Wrap(wire.PayloadTooLarge, ErrTooLarge,
					fmt.Sprintf("files total more than %d bytes", l.MaxBytes)).WithDetails(map[string]any{"max_bytes": l.MaxBytes})
			}
			f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm|0o600)
			if err != nil {
				return files, size, fmt.Errorf("unpack %s: %w", name, err)
			}
			n, err := io.Copy(f, io.LimitReader(tr, h.Size))
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return files, size, bad("%s: read: %v", name, err)
			}
			if n != h.Size {
				return files, size, bad("%s: truncated", name)
			}
			if err := root.Chmod(name, perm|0o600); err != nil {
				return files, size, err
			}
			files++
			size += n
		case tar.TypeSymlink:
			types[name] = tar.TypeSymlink
			if err := checkLinkTarget(name, h.Linkname); err != nil {
				return files, size, err
			}
			if err := root.Symlink(h.Linkname, name); err != nil {
				return files, size, fmt.Errorf("unpack %s: %w", name, err)
			}
		case tar.TypeLink:
			return files, size, bad("%q: hard links are not allowed", name)
		case tar.TypeChar, tar.TypeBlock:
			return files, size, bad("%q: device files are not allowed", name)
		case tar.TypeFifo:
			return files, size, bad("%q: FIFOs are not allowed", name)
		default:
			return files, size, bad("%q: entry type %q is not allowed", name, h.Typeflag)
		}
	}
	// Directory modes last, deepest first, so a read-only directory was writable while filled.
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := root.Chmod(dirs[i].path, dirs[i].mode); err != nil {
			return files, size, err
		}
	}
	return files, size, nil
}

// entryName checks a tar entry's name and returns it clean and relative ("" for the root itself).
func entryName(raw string) (string, error) {
	switch {
	case raw == "":
		return "", bad("an entry has no name")
	case len(raw) > maxPathLen:
		return "", bad("a name is longer than %d bytes", maxPathLen)
	case strings.IndexByte(raw, 0) >= 0:
		return "", bad("%q contains NUL", raw)
	case !utf8.ValidString(raw):
		return "", bad("%q is not valid UTF-8", raw)
	case raw[0] == '/':
		return "", bad("%q is absolute", raw)
	}
	name := raw
	for strings.HasPrefix(name, "./") {
		name = name[2:]
	}
	name = strings.TrimSuffix(name, "/")
	if name == "" || name == "." {
		return "", nil
	}
	if path.Clean(name) != name {
		return "", bad("%q is not a clean path", raw)
	}
	for elem := range strings.SplitSeq(name, "/") {
		if elem == ".." {
			return "", bad("%q leaves the tree", raw)
		}
		if len(elem) > maxNameLen {
			return "", bad("%q has an element longer than %d bytes", raw, maxNameLen)
		}
	}
	return name, nil
}

// ensureParents makes the missing parents of name directories (0700, as tar tools do for implied
// directories) and refuses a parent that is a file or a symlink of the archive.
func ensureParents(root *os.Root, types map[string]byte, name string) error {
	parent := path.Dir(name)
	if parent == "." {
		return nil
	}
	var missing []string
	for p := parent; p != "."; p = path.Dir(p) {
		t, ok := types[p]
		if ok && t != tar.TypeDir {
			return bad("%q: its parent %q is not a directory", name, p)
		}
		if ok {
			break
		}
		missing = append(missing, p)
	}
	for i := len(missing) - 1; i >= 0; i-- {
		types[missing[i]] = tar.TypeDir
		if err := root.Mkdir(missing[i], 0o700); err != nil {
			return fmt.Errorf("unpack %s: %w", missing[i], err)
		}
	}
	return nil
}

// checkLinkTarget accepts a symlink whose target is relative and, resolved lexically from the link's
// directory, stays inside the tree. (Through other symlinks it still cannot leave: they are checked the
// same way, and a restored workspace's links are never followed by the runner.)
func checkLinkTarget(name, target string) error {
	switch {
	case target == "":
		return bad("%q: empty symlink target", name)
	case len(target) > maxPathLen || strings.IndexByte(target, 0) >= 0 || !utf8.ValidString(target):
		return bad("%q: bad symlink target", name)
	case target[0] == '/':
		return bad("%q: symlink target %q is absolute", name, target)
	}
	resolved := path.Join(path.Dir(name), target)
	if resolved == ".." || strings.HasPrefix(resolved, "../") {
		return bad("%q: symlink target %q leaves the tree", name, target)
	}
	return nil
}

// asMaxBytes is errors.As for the request body's size limit, which a tar read error carries only as text
// (archive/tar does not wrap its reader's errors everywhere).
func asMaxBytes(err error, target **http.MaxBytesError) bool {
	if errors.As(err, target) {
		return true
	}
	return err != nil && strings.Contains(err.Error(), "http: request body too large")
}
