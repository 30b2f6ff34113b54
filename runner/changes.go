package runner

import (
	"io/fs"
	"path/filepath"
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

func listWorkspace(dir string) workspaceListing {
	l := workspaceListing{files: map[string]fileState{}, complete: true}
	n := 0
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // vanished or unreadable: skipped (a directory error skips its subtree)
		}
		n++
		if n > maxWalkEntries {
			l.complete = false
			return filepath.SkipAll
		}
		if d.IsDir() || (!d.Type().IsRegular() && d.Type()&fs.ModeSymlink == 0) {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return nil
		}
		l.files[filepath.ToSlash(rel)] = fileState{size: info.Size(), mtime: info.ModTime(), mode: info.Mode()}
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
