package runner_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warren-mesh/warren/internal/wire"
)

// watchDirFDs counts the directory descriptors and inotify instances this process holds (the runner under
// test runs in it).
func watchDirFDs(t *testing.T) int {
	t.Helper()
	fds, err := filepath.Glob("/proc/self/fd/*")
	if err != nil {
		t.Fatal(err)
	}
	dirs := 0
	for _, fd := range fds {
		if fi, err := os.Stat(fd); err == nil && fi.IsDir() {
			dirs++
		}
	}
	return dirs + inotifyInstances(t)
}

// Watched directories removed, moved and replaced while subscribers at different depths come and go: once
// every subscriber has left, the runner holds no directory descriptor, watch or inotify instance it did not
// hold before, and its counters are back to zero (no refcount left behind or gone below zero).
func TestFileWatchChurnLeaksNothing(t *testing.T) {
	h := startRunner(t)
	execOK(t, h, "mkdir -p proj/a/b/c proj/d/e")
	before := watchDirFDs(t)
	top, _, topResp := watchStream(t, h, "debounceMs=20")
	_, _, innerResp := watchStream(t, h, "path=proj/a/b&debounceMs=20")
	_, _, sideResp := watchStream(t, h, "path=proj/d&debounceMs=20")
	if n := watchDirFDs(t); n < before+2 {
		t.Fatalf("%d descriptors while watching, %d before: the count does not see the watches' descriptors", n, before)
	}
	execOK(t, h, "mv proj/a proj/a2 && rm -rf proj/d && mkdir -p proj/d/e/f proj/a && mv proj/a2/b proj/a/b && rm -rf proj/a2 && echo x > proj/a/b/c/f.txt")
	_, _ = changes(t, top, func(s map[string][]string) bool { return has(s["proj/a/b/c/f.txt"], wire.FileOpCreate) })
	_, _, againResp := watchStream(t, h, "path=proj/d/e&debounceMs=20")
	innerResp.Body.Close()
	execOK(t, h, "rm -rf proj/d/e && mkdir proj/d/e && rm -rf proj/a/b")
	sideResp.Body.Close()
	againResp.Body.Close()
	topResp.Body.Close()
	waitFor(t, "every watch to end", func() bool {
		m := metrics(t, h)
		return strings.Contains(m, "warren_runner_file_watches 0\n") && strings.Contains(m, "warren_runner_file_watched_dirs 0\n")
	})
	if n := watchDirFDs(t); n != before {
		t.Fatalf("%d directory descriptors and inotify instances after every watch left, %d before", n, before)
	}
}
