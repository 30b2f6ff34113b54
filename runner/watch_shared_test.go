package runner_test

import (
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/warren-mesh/warren/internal/wire"
)

// inotifyInstances counts the inotify instances this process holds (the runner under test runs in it).
func inotifyInstances(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && l == "anon_inode:inotify" {
			n++
		}
	}
	return n
}

// Eight watch subscribers on eight directories of one runner hold one inotify instance between them, not
// eight (instances are per host uid, and every runner is root); it is closed when the last one leaves.
func TestFileWatchSharesOneInotifyInstance(t *testing.T) {
	h := startRunner(t)
	before := inotifyInstances(t)
	var streams []*sseReader
	for i := range 8 {
		d := "d" + strconv.Itoa(i)
		execOK(t, h, "mkdir -p "+d+"/sub")
		sse, ready, _ := watchStream(t, h, "path="+d)
		if ready.Dirs != 2 {
			t.Fatalf("watch %s: %+v", d, ready)
		}
		streams = append(streams, sse)
	}
	if n := inotifyInstances(t); n != before+1 {
		t.Fatalf("8 watches hold %d inotify instances, want 1", n-before)
	}
	if m := metrics(t, h); !strings.Contains(m, "warren_runner_file_watched_dirs 16") {
		t.Fatalf("watched dirs: %s", grepLines(m, "warren_runner_file_watched_dirs"))
	}
	// Every subscriber gets the changes in its own directory, and only those.
	execOK(t, h, "for i in 0 1 2 3 4 5 6 7; do echo x > d$i/sub/f$i.txt; done")
	for i, sse := range streams {
		want := "d" + strconv.Itoa(i) + "/sub/f" + strconv.Itoa(i) + ".txt"
		seen, _ := changes(t, sse, func(s map[string][]string) bool { return has(s[want], wire.FileOpCreate) })
		for p := range seen {
			if !strings.HasPrefix(p, "d"+strconv.Itoa(i)+"/") {
				t.Fatalf("watch of d%d saw %s", i, p)
			}
		}
	}
	h.stop()
	waitFor(t, "the shared instance to be closed", func() bool { return inotifyInstances(t) == before })
}

// Two subscribers on one directory watch it once; when one leaves, the other still gets the changes in it
// and in its subdirectories, new ones too.
func TestFileWatchSharedDirectoryIsCounted(t *testing.T) {
	h := startRunner(t)
	execOK(t, h, "mkdir -p proj/a")
	_, _, resp1 := watchStream(t, h, "path=proj&debounceMs=20")
	sse2, ready2, _ := watchStream(t, h, "path=proj&debounceMs=20")
	if ready2.Dirs != 2 {
		t.Fatalf("ready %+v", ready2)
	}
	if m := metrics(t, h); !strings.Contains(m, "warren_runner_file_watched_dirs 2") {
		t.Fatalf("two watches of one tree: %s", grepLines(m, "warren_runner_file_watched_dirs"))
	}
	resp1.Body.Close()
	waitFor(t, "the first watch to end", func() bool { return strings.Contains(metrics(t, h), "warren_runner_file_watches 1") })
	if m := metrics(t, h); !strings.Contains(m, "warren_runner_file_watched_dirs 2") {
		t.Fatalf("after one of two watches left: %s", grepLines(m, "warren_runner_file_watched_dirs"))
	}
	execOK(t, h, "echo x > proj/top.txt && echo y > proj/a/inner.txt && mkdir proj/b && echo z > proj/b/new.txt")
	_, _ = changes(t, sse2, func(s map[string][]string) bool {
		return has(s["proj/top.txt"], wire.FileOpCreate) && has(s["proj/a/inner.txt"], wire.FileOpCreate) &&
			has(s["proj/b/new.txt"], wire.FileOpCreate)
	})
}

func grepLines(s, prefix string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// A directory moved while two watches hold it at different depths: the watch inside it ends (its
// directory is no longer at its path), and the watch above it watches it under its new name.
func TestFileWatchSharedDirectoryMoved(t *testing.T) {
	h := startRunner(t)
	execOK(t, h, "mkdir -p proj/deep")
	top, _, _ := watchStream(t, h, "debounceMs=20")
	inner, _, _ := watchStream(t, h, "path=proj/deep&debounceMs=20")
	execOK(t, h, "mv proj proj2 && echo x > proj2/deep/f.txt")
	_, _ = changes(t, top, func(s map[string][]string) bool { return has(s["proj2/deep/f.txt"], wire.FileOpCreate) })
	seen := map[string][]string{}
	for {
		ev, err := inner.next()
		if err != nil {
			break
		}
		if ev.name == wire.EventFileChange {
			var fe wire.FileEvent
			if err := json.Unmarshal([]byte(ev.data), &fe); err != nil {
				t.Fatal(err)
			}
			seen[fe.Path] = append(seen[fe.Path], fe.Ops...)
		}
	}
	if !has(seen["proj/deep"], wire.FileOpRename) {
		t.Fatalf("the inner watch ended with %v", seen)
	}
	execOK(t, h, "echo y >> proj2/deep/f.txt")
	_, _ = changes(t, top, func(s map[string][]string) bool { return has(s["proj2/deep/f.txt"], wire.FileOpWrite) })
}
