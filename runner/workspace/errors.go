package workspace

import "errors"

// Sentinel errors. Every error this package returns to a caller is a *wire.Error carrying the client-facing
// code, wrapping one of these so Go callers can test with errors.Is.
var (
	// ErrInvalidPath: the path is malformed (NUL byte, not UTF-8, too long) or names the wrong kind of
	// object for the operation (a directory where a file is needed, or the reverse).
	ErrInvalidPath = errors.New("invalid path")
	// ErrEscapes: the path, or a symlink on it, leads outside the workspace. Absolute paths count.
	ErrEscapes = errors.New("path escapes the workspace")
	// ErrNotFound: nothing exists at the path.
	ErrNotFound = errors.New("no such file or directory")
	// ErrIsDir: the operation needs a file (or an explicit recursive flag) and found a directory.
	ErrIsDir = errors.New("is a directory")
	// ErrTooLarge: a write exceeded the size cap; nothing was left behind.
	ErrTooLarge = errors.New("file too large")
	// ErrRoot: the operation is refused on the workspace root itself (deleting or overwriting it).
	ErrRoot = errors.New("refused on the workspace root")
)
