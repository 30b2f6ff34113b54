package tasks

import (
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"
)

// Bounds of a task's files-changed listing: the entries walked in each listing of the workspace and the
// changes reported.
const (
	maxWalkEntries  = 100_000
	maxFilesChanged = 1000
)

type fileState struct {
	size  int64
	mtime time.Time
	mode  fs.FileMode
}

// workspaceListing is the regular files and symbolic links under dir (never followed), at most
// maxWalkEntries entries walked; complete is false when the walk stopped early.
type workspaceListing struct {
	files    map[string]fileState
	complete bool
}

// walkHook, when set (tests only), is called with each directory's path (relative to the workspace)
// before the walk reads it: where a racing tenant would swap it for a symlink.
var walkHook func(rel string)

// listWorkspace walks dir through an os.Root of it: the tree is the tenant's, changed while it is walked
// (the agent's commands keep running), so a directory swapped for a symlink to the host's / between being
// listed and being read must not lead the walk (run by the runner, on the host, as root) out of the
// workspace. Every open and lstat is confined to the root; a symlink that leads out is an error and its
// subtree skipped.
func listWorkspace(dir string) workspaceListing {
	l := workspaceListing{files: map[string]fileState{}, complete: true}
	root, err := os.OpenRoot(dir)
	if err != nil {
		l.complete = false
		return l
	}
	defer root.Close()
	n := 0
	_ = fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // vanished, unreadable or leading out: skipped (a directory error skips its subtree)
		}
		n++
		if n > maxWalkEntries {
			l.complete = false
			return fs.SkipAll
		}
		if d.IsDir() {
			if walkHook != nil {
				walkHook(p)
			}
			return nil
		}
		if !d.Type().IsRegular() && d.Type()&fs.ModeSymlink == 0 {
			return nil
		}
		// root.Lstat, not d.Info: the entry's Info lstats by a path string, through whatever its parent
		// has become meanwhile.
		info, err := root.Lstat(p)
		if err != nil {
			return nil
		}
		l.files[p] = fileState{size: info.Size(), mtime: info.ModTime(), mode: info.Mode()}
		return nil
	})
	return l
}

// diffListings lists what changed from before to after, sorted by path, at most maxFilesChanged; truncated
// says some changes are missing (too many, or a listing incomplete).
func diffListings(before, after workspaceListing) (changes []FileChange, truncated bool) {
	changes = []FileChange{}
	for p, a := range after.files {
		b, ok := before.files[p]
		switch {
		case !ok:
			changes = append(changes, FileChange{Path: p, Change: "created"})
		case a != b:
			changes = append(changes, FileChange{Path: p, Change: "modified"})
		}
	}
	if after.complete { // a path missing from an incomplete listing may just not have been reached
		for p := range before.files {
			if _, ok := after.files[p]; !ok {
				changes = append(changes, FileChange{Path: p, Change: "deleted"})
			}
		}
	}
	slices.SortFunc(changes, func(x, y FileChange) int { return strings.Compare(x.Path, y.Path) })
	truncated = !before.complete || !after.complete
	if len(changes) > maxFilesChanged {
		changes, truncated = changes[:maxFilesChanged], true
	}
	return changes, truncated
}
