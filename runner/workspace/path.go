package workspace

import (
	"path"
	"strings"
	"unicode/utf8"

	"github.com/warren-mesh/warren/internal/wire"
)

// MaxPathLen bounds a client-supplied path (PATH_MAX on Linux).
const MaxPathLen = 4096

// Clean validates a client-supplied, slash-separated path and returns it in canonical form relative to the
// workspace root: "." for the root itself, otherwise a path with no leading "/", no "." or ".." elements and
// no empty elements. The empty string means the root.
//
// The contract, which FuzzClean checks:
//   - NUL bytes, invalid UTF-8 and paths longer than MaxPathLen are invalid_argument (ErrInvalidPath);
//   - absolute paths and paths whose ".." elements climb above the root are permission_denied (ErrEscapes),
//     even when they would land back inside ("/workspace/x" is not special-cased: paths are relative);
//   - a successful result never escapes: filepath.IsLocal holds for it.
//
// Clean is only the first fence: every file operation still goes through os.Root, which refuses symlinks
// that lead outside the workspace.
func Clean(p string) (string, error) {
	if len(p) > MaxPathLen {
		return "", wire.Wrap(wire.InvalidArgument, ErrInvalidPath, "path is longer than 4096 bytes")
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", wire.Wrap(wire.InvalidArgument, ErrInvalidPath, "path contains a NUL byte")
	}
	if !utf8.ValidString(p) {
		return "", wire.Wrap(wire.InvalidArgument, ErrInvalidPath, "path is not valid UTF-8")
	}
	if strings.HasPrefix(p, "/") {
		return "", wire.Wrap(wire.PermissionDenied, ErrEscapes,
			"absolute paths are not allowed; paths are relative to the workspace root")
	}
	if p == "" {
		return ".", nil
	}
	c := path.Clean(p)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", wire.Wrap(wire.PermissionDenied, ErrEscapes, "path escapes the workspace")
	}
	return c, nil
}
