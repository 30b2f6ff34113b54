package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner/workspace"
)

// Bounds of file watching (docs/PROTOCOL.md#watch). A sandbox has at most maxWatches subscribers at once
// and at most maxWatchedDirs directories watched over all of them (each is an inotify watch and an open
// descriptor in the runner); one subscriber queues at most maxWatchQueue distinct changed paths between
// two deliveries, and what does not fit is reported as an overflow event instead of held.
const (
	maxWatches     = 8
	maxWatchedDirs = 4096
	maxWatchQueue  = 1024
)

// watchTable is the sandbox-wide state of file watching: the bounds' counters and the metrics.
type watchTable struct {
	mu        sync.Mutex
	watches   int
	dirs      int
	maxDirs   int
	events    prometheus.Counter
	overflows *prometheus.CounterVec
}

func newWatchTable(r *Runner) *watchTable {
	t := &watchTable{
		maxDirs: maxWatchedDirs,
		events: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "warren_runner_file_watch_events_total",
			Help: "Change events delivered to file watch subscribers (after debouncing).",
		}),
		overflows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warren_runner_file_watch_overflows_total",
			Help: "Changes not delivered to a file watch subscriber, by reason (queue: the subscriber fell behind; kernel: the inotify queue overflowed; dirs: the watched-directory limit was reached).",
		}, []string{"reason"}),
	}
	r.metrics.reg.MustRegister(t.events, t.overflows,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "warren_runner_file_watches",
			Help: "File watch subscribers connected now.",
		}, func() float64 { t.mu.Lock(); defer t.mu.Unlock(); return float64(t.watches) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "warren_runner_file_watched_dirs",
			Help: "Directories watched now, over all subscribers.",
		}, func() float64 { t.mu.Lock(); defer t.mu.Unlock(); return float64(t.dirs) }),
	)
	return t
}

// join takes one of the limit subscribers' places (the quota's max_file_watches, else maxWatches).
func (t *watchTable) join(limit int) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.watches >= limit {
		return wire.Errorf(wire.ResourceExhausted, "the sandbox already has %d file watches, the most it may have (the quota's max_file_watches)", limit).
			WithDetails(map[string]any{"limit": limit, "quota": "max_file_watches"})
	}
	t.watches++
	return nil
}

func (t *watchTable) leave() {
	t.mu.Lock()
	t.watches--
	t.mu.Unlock()
}

// takeDir reserves one watched directory; false at the limit.
func (t *watchTable) takeDir() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.dirs >= t.maxDirs {
		return false
	}
	t.dirs++
	return true
}

func (t *watchTable) giveDirs(n int) {
	t.mu.Lock()
	t.dirs -= n
	t.mu.Unlock()
}

// watchDir is one watched directory. The inotify watch is added through /proc/self/fd/N of a descriptor
// opened inside the workspace (os.Root for the watched directory, openat with O_NOFOLLOW from its parent
// for each subdirectory), so it names exactly the directory that was checked, whatever is renamed or
// swapped for a symlink meanwhile. A subdirectory's descriptor stays open while it is watched, which keeps
// N, and so the watch's name, unique; its removal is learnt from its parent. The watched directory itself
// has no watched parent: its descriptor is closed once the watch is added (an open descriptor would hold
// back the kernel's delete-self event until closed) and its watch is named /proc/<pid>/fd/N, which no
// /proc/self/fd/N name can equal; it is reopened by path (inside the workspace) when needed.
type watchDir struct {
	f   *os.File // nil for the watched directory itself
	rel string   // relative to the workspace root
}

// watcher is one subscriber's watch. The collector (run) reads inotify events into pending, adding and
// dropping directories as the tree changes; the handler's loop delivers pending once per debounce window.
type watcher struct {
	t         *watchTable
	log       *slog.Logger
	root      string // the watched directory, cleaned
	recursive bool
	reopen    func() (*os.File, error) // opens the watched directory again
	fs        *fsnotify.Watcher
	dirs      map[string]*watchDir // by inotify path (/proc/self/fd/N)
	byRel     map[string]string    // relative path → inotify path

	mu      sync.Mutex
	pending map[string]*wire.FileEvent
	order   []string
	dropped map[string]int64 // by overflow reason
	kick    chan struct{}    // pending went from empty to not
	gone    chan struct{}    // the watched directory was removed or moved: the watch ends
}

func (a *api) newWatcher(q wire.WatchQuery, log *slog.Logger) (*watcher, wire.FileWatchReady, error) {
	f, rel, err := a.root.OpenDir(q.Path)
	if err != nil {
		return nil, wire.FileWatchReady{}, err
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		f.Close()
		return nil, wire.FileWatchReady{}, wire.Wrap(wire.ResourceExhausted, err, "cannot start watching: the host's inotify limit is reached")
	}
	w := &watcher{t: a.watches, log: log, root: rel, recursive: q.Recursive, fs: fw,
		dirs: map[string]*watchDir{}, byRel: map[string]string{}, pending: map[string]*wire.FileEvent{},
		dropped: map[string]int64{}, kick: make(chan struct{}, 1), gone: make(chan struct{})}
	w.reopen = func() (*os.File, error) {
		f, _, err := a.root.OpenDir(rel)
		return f, err
	}
	if err := w.add(f, rel, false); err != nil {
		w.close()
		return nil, wire.FileWatchReady{}, err
	}
	ready := wire.FileWatchReady{Path: rel, Recursive: q.Recursive, DebounceMs: q.Debounce.Milliseconds()}
	ready.Dirs = len(w.dirs)
	return w, ready, nil
}

// add watches the open directory f at rel and, when recursive, its subdirectories (not through symlinks).
// With announce each entry found is queued as a create: it appeared before its directory was watched. A
// directory past the limit is refused with resource_exhausted when setting up (announce false) and
// reported as a dirs overflow afterwards. f is consumed.
func (w *watcher) add(f *os.File, rel string, announce bool) error {
	if !w.t.takeDir() {
		f.Close()
		if announce {
			w.drop(wire.OverflowDirs, 1)
			return nil
		}
		return wire.Errorf(wire.ResourceExhausted, "more than %d directories would be watched in this sandbox", w.t.maxDirs)
	}
	top := len(w.dirs) == 0 && rel == w.root
	key := "/proc/self/fd/" + strconv.FormatUint(uint64(f.Fd()), 10)
	if top {
		key = "/proc/" + strconv.Itoa(os.Getpid()) + "/fd/" + strconv.FormatUint(uint64(f.Fd()), 10)
		defer f.Close()
	}
	if err := w.fs.Add(key); err != nil {
		f.Close()
		w.t.giveDirs(1)
		if announce {
			w.drop(wire.OverflowDirs, 1)
			return nil
		}
		return wire.Wrap(wire.ResourceExhausted, err, "cannot watch "+rel+": the host's inotify watch limit is reached")
	}
	if top {
		w.dirs[key] = &watchDir{rel: rel}
	} else {
		w.dirs[key] = &watchDir{f: f, rel: rel}
	}
	w.byRel[rel] = key
	if !w.recursive && !announce {
		return nil
	}
	ents, err := f.ReadDir(-1)
	if _, serr := f.Seek(0, io.SeekStart); serr != nil && err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("read directory %s: %w", rel, err)
	}
	for _, e := range ents {
		child := path.Join(rel, e.Name())
		if strings.HasPrefix(e.Name(), workspace.TempPrefix) {
			continue
		}
		if announce {
			w.queue(child, wire.FileOpCreate, e.IsDir())
		}
		if !w.recursive || !e.IsDir() {
			continue
		}
		cf, ok, err := workspace.OpenChildDir(f, e.Name())
		if err != nil {
			return err
		}
		if ok {
			if err := w.add(cf, child, announce); err != nil {
				return err
			}
		}
	}
	return nil
}

// forget stops watching rel and every watched directory under it.
func (w *watcher) forget(rel string) {
	n := 0
	for key, d := range w.dirs {
		if d.rel == rel || strings.HasPrefix(d.rel, rel+"/") || rel == "." {
			_ = w.fs.Remove(key) // already gone when the kernel dropped it
			if d.f != nil {
				d.f.Close()
			}
			delete(w.dirs, key)
			delete(w.byRel, d.rel)
			n++
		}
	}
	w.t.giveDirs(n)
}

func (w *watcher) close() {
	_ = w.fs.Close()
	w.forget(".")
}

// queue merges op on p into the pending batch; a new path beyond maxWatchQueue is dropped and counted.
func (w *watcher) queue(p, op string, dir bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ev, ok := w.pending[p]
	if !ok {
		if len(w.pending) >= maxWatchQueue {
			w.dropped[wire.OverflowQueue]++
			return
		}
		ev = &wire.FileEvent{Path: p}
		w.pending[p] = ev
		w.order = append(w.order, p)
		if len(w.order) == 1 {
			w.wake()
		}
	}
	ev.Dir = ev.Dir || dir
	for _, o := range ev.Ops {
		if o == op {
			return
		}
	}
	ev.Ops = append(ev.Ops, op)
}

func (w *watcher) drop(reason string, n int64) {
	w.mu.Lock()
	w.dropped[reason] += n
	w.mu.Unlock()
	w.wake()
}

func (w *watcher) wake() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// take returns the pending batch and the drops since the last one, and empties them.
func (w *watcher) take() ([]*wire.FileEvent, map[string]int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	evs := make([]*wire.FileEvent, 0, len(w.order))
	for _, p := range w.order {
		evs = append(evs, w.pending[p])
	}
	clear(w.pending)
	w.order = w.order[:0]
	var dropped map[string]int64
	if len(w.dropped) > 0 {
		dropped = w.dropped
		w.dropped = map[string]int64{}
	}
	return evs, dropped
}

// run collects events until ctx ends or the watched directory goes away.
func (w *watcher) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case err, ok := <-w.fs.Errors:
			if !ok {
				return
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				w.drop(wire.OverflowKernel, 0)
				continue
			}
			w.log.Warn("file watch error", "err", err)
		case ev, ok := <-w.fs.Events:
			if !ok {
				return
			}
			if w.handle(ev) {
				close(w.gone)
				return
			}
		}
	}
}

// handle applies one inotify event; true when the watched directory itself is gone.
func (w *watcher) handle(ev fsnotify.Event) bool {
	if d, ok := w.dirs[ev.Name]; ok {
		// The directory itself was removed or moved: its parent, when watched, reports the name.
		if d.rel == w.root && (ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename)) {
			w.queue(d.rel, opOf(ev), true)
			return true
		}
		if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
			w.forget(d.rel)
		}
		return false
	}
	key, name := path.Split(ev.Name)
	d, ok := w.dirs[strings.TrimSuffix(key, "/")]
	if !ok || name == "" || strings.HasPrefix(name, workspace.TempPrefix) {
		return false // a directory forgotten meanwhile, or an upload in progress
	}
	rel := path.Join(d.rel, name)
	_, wasDir := w.byRel[rel]
	if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
		if wasDir {
			w.forget(rel)
		}
	}
	isDir := wasDir
	if ev.Has(fsnotify.Create) {
		parent := d.f
		if parent == nil {
			f, err := w.reopen()
			if err != nil {
				w.log.Warn("file watch: reopen the watched directory", "path", d.rel, "err", err)
				return false
			}
			defer f.Close()
			parent = f
		}
		cf, ok, err := workspace.OpenChildDir(parent, name)
		if err != nil {
			w.log.Warn("file watch: open new directory", "path", rel, "err", err)
		}
		if ok {
			isDir = true
			if w.recursive {
				if _, dup := w.byRel[rel]; dup {
					w.forget(rel) // replaced by another directory of the same name
				}
				w.queue(rel, wire.FileOpCreate, true)
				if err := w.add(cf, rel, true); err != nil {
					w.log.Warn("file watch: watch new directory", "path", rel, "err", err)
				}
				return false
			}
			cf.Close()
		}
	}
	for _, op := range opsOf(ev) {
		w.queue(rel, op, isDir)
	}
	return false
}

func opsOf(ev fsnotify.Event) []string {
	var ops []string
	for _, o := range []struct {
		op   fsnotify.Op
		name string
	}{{fsnotify.Create, wire.FileOpCreate}, {fsnotify.Write, wire.FileOpWrite}, {fsnotify.Remove, wire.FileOpRemove},
		{fsnotify.Rename, wire.FileOpRename}, {fsnotify.Chmod, wire.FileOpChmod}} {
		if ev.Has(o.op) {
			ops = append(ops, o.name)
		}
	}
	return ops
}

func opOf(ev fsnotify.Event) string {
	if ev.Has(fsnotify.Remove) {
		return wire.FileOpRemove
	}
	return wire.FileOpRename
}

// watchFiles serves GET /v1/sandbox/files/watch?path=P&recursive=true&debounceMs=50 with Accept:
// text/event-stream: a ready event once the directories are watched, then change events (one per changed
// path per debounce window, ops merged in order) and overflow events when changes were lost. The stream
// ends when the client leaves, the sandbox stops, or the watched directory is removed or moved (after its
// own change event).
func (a *api) watchFiles(w http.ResponseWriter, req *http.Request) {
	q, err := wire.ParseWatchQuery(req.URL.Query())
	if err == nil && !strings.Contains(req.Header.Get("Accept"), "text/event-stream") {
		err = wire.Errorf(wire.InvalidArgument, "a watch is a stream: send Accept: text/event-stream")
	}
	if err == nil {
		err = a.watches.join(a.r.fileWatchLimit())
	}
	if err != nil {
		a.fileFail(w, req, "watch", err)
		return
	}
	defer a.watches.leave()
	log := a.logger(req)
	wt, ready, err := a.newWatcher(q, log)
	if err != nil {
		a.fileFail(w, req, "watch", err)
		return
	}
	defer wt.close()
	a.r.metrics.fileOps.WithLabelValues("watch", "ok").Inc()
	log.Info("file watch started", "path", ready.Path, "recursive", ready.Recursive, "dirs", ready.Dirs)
	defer log.Info("file watch ended", "path", ready.Path)

	ctx, cancel := context.WithCancel(req.Context())
	collected := make(chan struct{})
	defer func() { cancel(); <-collected }()
	go func() { defer close(collected); wt.run(ctx) }()

	rc := startEvents(w)
	writeEvent(w, wire.EventWatchReady, ready)
	_ = rc.Flush()
	ping := time.NewTicker(procKeepAlive)
	defer ping.Stop()
	timer := time.NewTimer(q.Debounce)
	timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ping.C:
			_, _ = io.WriteString(w, ": keep-alive\n\n")
			_ = rc.Flush()
			continue
		case <-wt.gone:
			a.deliver(w, wt)
			_ = rc.Flush()
			return
		case <-wt.kick:
		}
		// The first change of a burst opens the window; everything until it closes is one batch.
		timer.Reset(q.Debounce)
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-wt.gone:
		}
		a.deliver(w, wt)
		if err := rc.Flush(); err != nil {
			return
		}
	}
}

// deliver writes the pending batch, then an overflow event per reason of loss.
func (a *api) deliver(w io.Writer, wt *watcher) {
	evs, dropped := wt.take()
	for _, ev := range evs {
		writeEvent(w, wire.EventFileChange, ev)
	}
	a.watches.events.Add(float64(len(evs)))
	for _, reason := range []string{wire.OverflowQueue, wire.OverflowKernel, wire.OverflowDirs} {
		n, ok := dropped[reason]
		if !ok {
			continue
		}
		a.watches.overflows.WithLabelValues(reason).Add(float64(max(n, 1)))
		writeEvent(w, wire.EventWatchOverflow, wire.FileWatchOverflow{Reason: reason, Dropped: n, Message: overflowMessage(reason)})
	}
}

func overflowMessage(reason string) string {
	switch reason {
	case wire.OverflowQueue:
		return fmt.Sprintf("more than %d paths changed before the subscriber took them: changes were dropped; list the directory again", maxWatchQueue)
	case wire.OverflowKernel:
		return "the kernel's inotify queue overflowed: changes were lost; list the directory again"
	}
	return fmt.Sprintf("a new directory was not watched: the sandbox watches at most %d directories", maxWatchedDirs)
}
