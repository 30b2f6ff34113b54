package fswatch

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-mesh/warren/internal/httpx"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner/workspace"
)

func testWatchTable(maxDirs int) *Table {
	return &Table{maxDirs: maxDirs, log: slog.New(slog.DiscardHandler),
		events:    prometheus.NewCounter(prometheus.CounterOpts{Name: "e"}),
		overflows: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "o"}, []string{"reason"}),
		ops:       prometheus.NewCounterVec(prometheus.CounterOpts{Name: "f"}, []string{"op", "result"})}
}

func testWatchAPI(t *testing.T, maxDirs int) (*api, string) {
	t.Helper()
	dir := t.TempDir()
	root, err := workspace.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	return &api{t: testWatchTable(maxDirs), root: root}, dir
}

// delivered is the event stream a.deliver writes of w's pending changes.
func delivered(t *testing.T, a *api, w *watcher) *bytes.Buffer {
	t.Helper()
	rec := httptest.NewRecorder()
	if err := a.deliver(httpx.StartEvents(rec), w); err != nil {
		t.Fatal(err)
	}
	return rec.Body
}

// A subscriber that does not take its changes holds at most maxWatchQueue paths; the rest is counted and
// delivered as one typed overflow event, and ops on one path merge in the order first seen.
func TestWatchQueueBound(t *testing.T) {
	w := &watcher{pending: map[string]*wire.FileEvent{}, dropped: map[string]int64{}, kick: make(chan struct{}, 1)}
	for i := range maxWatchQueue + 500 {
		w.queue(fmt.Sprintf("f%d", i), wire.FileOpCreate, false)
	}
	w.queue("f0", wire.FileOpWrite, false)
	w.queue("f0", wire.FileOpCreate, false)
	a, _ := testWatchAPI(t, 10)
	out := delivered(t, a, w)
	if n := strings.Count(out.String(), "event: change\n"); n != maxWatchQueue {
		t.Fatalf("%d change events, want %d", n, maxWatchQueue)
	}
	if !strings.Contains(out.String(), `{"path":"f0","ops":["create","write"]}`) {
		t.Fatalf("ops not merged: %.200s", out.String())
	}
	if !strings.HasSuffix(out.String(), "event: overflow\ndata: "+`{"reason":"queue","dropped":500,"message":"more than 1024 paths changed before the subscriber took them: changes were dropped; list the directory again"}`+"\n\n") {
		t.Fatalf("no overflow event at the end: ...%s", out.String()[max(0, out.Len()-300):])
	}
	if evs, dropped := w.take(); len(evs) != 0 || dropped != nil {
		t.Fatalf("after delivery: %v %v", evs, dropped)
	}
}

// The watched-directory limit: a tree larger than it is refused up front with resource_exhausted; a new
// directory past it once watching is reported as a dirs overflow, and released directories are returned.
func TestWatchDirLimit(t *testing.T) {
	a, dir := testWatchAPI(t, 3)
	for _, d := range []string{"a", "b", "c"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	log := slog.New(slog.DiscardHandler)
	if _, _, err := a.newWatcher(wire.WatchQuery{Path: ".", Recursive: true}, log); wire.CodeOf(err) != wire.ResourceExhausted {
		t.Fatalf("4 directories with a limit of 3: %v", err)
	}
	if a.t.dirs != 0 {
		t.Fatalf("%d directories still counted", a.t.dirs)
	}
	w, ready, err := a.newWatcher(wire.WatchQuery{Path: "a", Recursive: true}, log)
	if err != nil || ready.Dirs != 1 {
		t.Fatalf("watch a: %+v %v", ready, err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "a", "x", "y", "z"), 0o755); err != nil {
		t.Fatal(err)
	}
	for {
		<-w.kick
		w.mu.Lock()
		n := w.dropped[wire.OverflowDirs]
		w.mu.Unlock()
		if n > 0 {
			break
		}
	}
	if n := a.t.counted(); n != 3 {
		t.Fatalf("%d directories counted, want 3", n)
	}
	w.close()
	if a.t.dirs != 0 {
		t.Fatalf("%d directories counted after close", a.t.dirs)
	}
}

func (t *Table) counted() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.dirs
}

// A kernel queue overflow of the shared inotify instance is reported to every subscriber, whatever it
// watches: the lost events could have been anyone's. The collector is held back (the table's lock) while
// more changes than the kernel queues happen, so the queue overflows for real.
func TestWatchKernelOverflowGoesToEverySubscriber(t *testing.T) {
	a, dir := testWatchAPI(t, 10)
	for _, d := range []string{"busy", "quiet"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile("/proc/sys/fs/inotify/max_queued_events")
	if err != nil {
		t.Fatal(err)
	}
	queued, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	var ws []*watcher
	for _, p := range []string{"busy", "busy", "quiet"} {
		w, _, err := a.newWatcher(wire.WatchQuery{Path: p, Recursive: true}, log)
		if err != nil {
			t.Fatal(err)
		}
		defer w.close()
		ws = append(ws, w)
	}
	a.t.mu.Lock()
	for i := range 2*queued + 4096 { // fsnotify reads up to 4096 events ahead of its consumer
		f, err := os.Create(filepath.Join(dir, "busy", "f"+strconv.Itoa(i)))
		if err != nil {
			a.t.mu.Unlock()
			t.Fatal(err)
		}
		f.Close()
	}
	a.t.mu.Unlock()
	for i, w := range ws {
		for {
			w.mu.Lock()
			_, over := w.dropped[wire.OverflowKernel]
			w.mu.Unlock()
			if over {
				break
			}
			select {
			case <-w.kick:
			case <-time.After(30 * time.Second):
				t.Fatalf("subscriber %d: no kernel overflow", i)
			}
		}
		out := delivered(t, a, w)
		if !strings.Contains(out.String(), `event: overflow`+"\n"+`data: {"reason":"kernel"`) {
			t.Fatalf("subscriber %d: no kernel overflow event in %.300s", i, out.String())
		}
	}
}
