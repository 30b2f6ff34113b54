package workspace

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/warren-mesh/warren/internal/wire"
)

// Stat describes the object at p itself (a symlink is reported as "symlink", not followed). The root is
// reported with name and path ".".
func (w *Root) Stat(p string) (wire.FileInfo, error) {
	c, err := Clean(p)
	if err != nil {
		return wire.FileInfo{}, err
	}
	fi, err := w.root.Lstat(c)
	if err != nil {
		return wire.FileInfo{}, classify(c, err)
	}
	info := fileInfo(path.Dir(c), fi)
	info.Name, info.Path = path.Base(c), c
	return info, nil
}

// Mkdir creates the directory p (0755). With parents it is mkdir -p: missing parents are created and an
// existing directory is not an error (created is false); without, a missing parent is not_found and an
// existing one conflict. Something other than a directory in the way is conflict either way.
func (w *Root) Mkdir(p string, parents bool) (info wire.FileInfo, created bool, err error) {
	c, err := Clean(p)
	if err != nil {
		return wire.FileInfo{}, false, err
	}
	switch fi, err := w.root.Lstat(c); {
	case err == nil && fi.IsDir() && parents:
		info, err := w.Stat(c)
		return info, false, err
	case err == nil:
		return wire.FileInfo{}, false, wire.Wrap(wire.Conflict, fmt.Errorf("%w: %w", ErrIsDir, fs.ErrExist),
			fmt.Sprintf("%s already exists", c))
	case !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR):
		return wire.FileInfo{}, false, classify(c, err)
	}
	if parents {
		err = w.root.MkdirAll(c, 0o755)
	} else {
		err = w.root.Mkdir(c, 0o755)
	}
	if err != nil {
		return wire.FileInfo{}, false, classify(c, err)
	}
	info, err = w.Stat(c)
	return info, true, err
}

// MoveOptions tunes Move.
type MoveOptions struct {
	// Overwrite replaces what is at the destination (a file, or an empty directory when moving a
	// directory); without it an existing destination is conflict.
	Overwrite bool
	// Parents creates the destination's missing parent directories.
	Parents bool
}

// Move renames from to to within the workspace (rename(2): atomic, the object keeps its inode; a symlink
// is moved itself). Neither may be the root (permission_denied, ErrRoot); a directory cannot move into
// itself (invalid_argument). Without Overwrite the check for an existing destination and the rename are
// two steps: a command in the sandbox racing the move can still have its file replaced, which only the
// tenant's own files can suffer.
func (w *Root) Move(from, to string, opt MoveOptions) (wire.FileInfo, error) {
	f, err := Clean(from)
	if err != nil {
		return wire.FileInfo{}, err
	}
	t, err := Clean(to)
	if err != nil {
		return wire.FileInfo{}, err
	}
	if f == "." || t == "." {
		return wire.FileInfo{}, wire.Wrap(wire.PermissionDenied, ErrRoot, "cannot move the workspace root or onto it")
	}
	if strings.HasPrefix(t, f+"/") {
		return wire.FileInfo{}, wire.Wrap(wire.InvalidArgument, ErrInvalidPath, fmt.Sprintf("cannot move %s into itself", f))
	}
	if _, err := w.root.Lstat(f); err != nil {
		return wire.FileInfo{}, classify(f, err)
	}
	if dir := path.Dir(t); opt.Parents && dir != "." {
		if err := w.root.MkdirAll(dir, 0o755); err != nil {
			return wire.FileInfo{}, classify(dir, err)
		}
	}
	if f != t && !opt.Overwrite {
		switch _, err := w.root.Lstat(t); {
		case err == nil:
			return wire.FileInfo{}, wire.Wrap(wire.Conflict, fmt.Errorf("%w: %w", ErrIsDir, fs.ErrExist),
				fmt.Sprintf("%s already exists; pass overwrite to replace it", t))
		case !errors.Is(err, fs.ErrNotExist):
			return wire.FileInfo{}, classify(t, err)
		}
	}
	if err := w.root.Rename(f, t); err != nil {
		if errors.Is(err, syscall.EINVAL) {
			return wire.FileInfo{}, wire.Wrap(wire.InvalidArgument, fmt.Errorf("%w: %w", ErrInvalidPath, err),
				fmt.Sprintf("cannot move %s to %s", f, t))
		}
		if errors.Is(err, syscall.ENOTDIR) {
			// A directory onto a file, or a file onto a directory: something is in the way.
			if _, serr := w.root.Lstat(t); serr == nil {
				return wire.FileInfo{}, wire.Wrap(wire.Conflict, fmt.Errorf("%w: %w", ErrIsDir, err),
					fmt.Sprintf("%s is in the way", t))
			}
		}
		return wire.FileInfo{}, classify(t, err)
	}
	return w.Stat(t)
}

// OpenDir opens the directory at p (following symlinks that stay inside) for watching, and returns it
// with p's cleaned form. Not a directory is invalid_argument.
func (w *Root) OpenDir(p string) (*os.File, string, error) {
	c, err := Clean(p)
	if err != nil {
		return nil, "", err
	}
	f, err := w.root.OpenFile(c, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_DIRECTORY, 0)
	if err != nil {
		if errors.Is(err, syscall.ENOTDIR) {
			if fi, serr := w.root.Stat(c); serr == nil && !fi.IsDir() {
				return nil, "", wire.Wrap(wire.InvalidArgument, ErrInvalidPath, fmt.Sprintf("%s is not a directory", c))
			}
		}
		return nil, "", classify(c, err)
	}
	return f, c, nil
}

// OpenChildDir opens the subdirectory name (one path element) of the open directory dir without following
// a symlink: the result is that very directory, inside the workspace whatever is renamed meanwhile.
// ok is false when name is not a directory (or is gone).
func OpenChildDir(dir *os.File, name string) (f *os.File, ok bool, err error) {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
		return nil, false, nil
	}
	var fd int
	rc, err := dir.SyscallConn()
	if err != nil {
		return nil, false, err
	}
	var oerr error
	if err := rc.Control(func(dfd uintptr) {
		for {
			fd, oerr = unix.Openat(int(dfd), name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
			if oerr != unix.EINTR {
				return
			}
		}
	}); err != nil {
		return nil, false, err
	}
	switch {
	case oerr == nil:
		return os.NewFile(uintptr(fd), name), true, nil
	case errors.Is(oerr, unix.ENOTDIR), errors.Is(oerr, unix.ELOOP), errors.Is(oerr, unix.ENOENT):
		return nil, false, nil
	}
	return nil, false, fmt.Errorf("open %s: %w", name, oerr)
}
