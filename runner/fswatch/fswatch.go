// Package fswatch is the sandbox's file watching (docs/PROTOCOL.md#watch): GET /v1/sandbox/files/watch, a
// stream of the changes under a workspace directory, through one inotify instance the runner shares among
// the subscribers. Its Host says how many subscribers the sandbox may have.
package fswatch

import (
	"cmp"
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
	"golang.org/x/sys/unix"

	"github.com/warren-mesh/warren/internal/httpx"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner/internal/web"
	"github.com/warren-mesh/warren/runner/workspace"
)

// Bounds of file watching (docs/PROTOCOL.md#watch). A sandbox has at most Max subscribers (or its quota's max_file_watches) at once
// and at most maxWatchedDirs distinct directories watched over all of them (each is one inotify watch in
// the runner's one inotify instance, shared by the subscribers that watch it); one subscriber queues at
// most maxWatchQueue distinct changed paths between two deliveries, and what does not fit is reported as
// an overflow event instead of held.
const (
	// Max is the subscribers a sandbox may have unless its quota says otherwise (the host's Limit).
	Max            = 8
	maxWatchedDirs = 4096
	maxWatchQueue  = 1024
)

// Table is the runner's file watching: one inotify instance (one fsnotify.Watcher) shared by every
// subscriber, its directory watches counted by reference, the collector that fans each event out to the
// subscribers holding the directory it happened in, the bounds' counters and the metrics. The instance is
// created with the first subscriber and closed when the last one leaves, so an idle runner holds none of
// the host's inotify instances (they are per uid, and every runner is root). mu guards everything below
// it; a subscriber's own queue has its own lock, taken inside mu.
type Table struct {
	mu        sync.Mutex
	watches   int
	dirs      int // len(byRel): distinct directories watched
	maxDirs   int
	events    prometheus.Counter
	overflows *prometheus.CounterVec

	host  Host
	ops   *prometheus.CounterVec // the file operations' counter (op, result)
	log   *slog.Logger
	open  func(rel string) (*os.File, error) // opens a workspace directory again, by path
	fs    *fsnotify.Watcher                  // nil while nobody watches
	byRel map[string]*watchDir
	byKey map[string]*watchDir // by inotify path (/proc/self/fd/N at the time it was added)
	subs  map[*watcher]struct{}
}

// Host is what file watching uses of the runner. Limit may be called concurrently.
type Host interface {
	// Limit is the subscribers the sandbox may have now (the quota's max_file_watches, else Max).
	Limit() int
}

// Config is what the watches are built with.
type Config struct {
	Host    Host
	Logger  *slog.Logger
	Metrics prometheus.Registerer
	// Ops is the file operations' counter (labels op and result), where each watch is counted as "watch".
	Ops *prometheus.CounterVec
}

// New makes the sandbox's file watching and registers its metrics in cfg.Metrics.
func New(cfg Config) *Table {
	t := &Table{
		maxDirs: maxWatchedDirs,
		host:    cfg.Host,
		ops:     cfg.Ops,
		log:     cfg.Logger,
		events: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "warren_runner_file_watch_events_total",
			Help: "Change events delivered to file watch subscribers (after debouncing).",
		}),
		overflows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warren_runner_file_watch_overflows_total",
			Help: "Changes not delivered to a file watch subscriber, by reason (queue: the subscriber fell behind; kernel: the inotify queue overflowed; dirs: the watched-directory limit was reached).",
		}, []string{"reason"}),
	}
	cfg.Metrics.MustRegister(t.events, t.overflows,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "warren_runner_file_watches",
			Help: "File watch subscribers connected now.",
		}, func() float64 { t.mu.Lock(); defer t.mu.Unlock(); return float64(t.watches) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "warren_runner_file_watched_dirs",
			Help: "Distinct directories watched now, over all subscribers (each one inotify watch).",
		}, func() float64 { t.mu.Lock(); defer t.mu.Unlock(); return float64(t.dirs) }),
	)
	return t
}

// Busy is false: a watch is a request, in flight as long as it streams.
func (*Table) Busy(time.Time) bool { return false }

// Close has nothing to end: each watch ends with its request, and the inotify instance with the last one.
func (*Table) Close(context.Context) error { return nil }

// Routes mounts the watch route on s.
func (t *Table) Routes(s web.Serve) {
	a := &api{t: t, root: s.Root}
	s.Handle("/v1/sandbox/files/watch", httpx.Methods{http.MethodGet: a.watchFiles})
}

// api is the watch route of one Run, on its workspace.
type api struct {
	t    *Table
	root *workspace.Root
}

// fail counts the failed watch and answers err.
func (a *api) fail(w http.ResponseWriter, req *http.Request, err error) {
	a.t.ops.WithLabelValues("watch", string(wire.CodeOf(err))).Inc()
	web.Fail(w, req, err)
}

// join takes one of the limit subscribers' places (the quota's max_file_watches, else maxWatches).
func (t *Table) join(limit int) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.watches >= limit {
		return wire.Errorf(wire.ResourceExhausted, "the sandbox already has %d file watches, the most it may have (the quota's max_file_watches)", limit).
			WithDetails(map[string]any{"limit": limit, "quota": "max_file_watches"})
	}
	t.watches++
	return nil
}

func (t *Table) leave() {
	t.mu.Lock()
	t.watches--
	t.mu.Unlock()
}

// watchDir is one watched directory, shared by the subscribers holding it (refs). The inotify watch is
// added through /proc/self/fd/N of a descriptor opened inside the workspace (os.Root for a subscriber's
// watched directory, openat with O_NOFOLLOW from its parent for each subdirectory), so it names exactly
// the directory that was checked, whatever is renamed or swapped for a symlink meanwhile. That name is
// the watch's key: keys are kept unique among the watched directories (a descriptor whose number names a
// watched directory already is duplicated to another number before adding), so the descriptor need not
// stay open for it. While some subscriber holds the directory as a subdirectory (subs > 0) its descriptor
// f stays open, to open new children from; a directory only held as a subscriber's watched directory has
// none (an open descriptor would hold back the kernel's delete-self event, and nothing else reports its
// removal) and is reopened by path (inside the workspace) when needed.
type watchDir struct {
	key  string
	f    *os.File
	rel  string // relative to the workspace root
	refs int
	subs int
}

// watcher is one subscriber's watch: the directories it holds in the table, and what it has not been
// delivered yet. The table's collector queues into pending; the handler's loop delivers pending once per
// debounce window.
type watcher struct {
	t         *Table
	log       *slog.Logger
	root      string // the watched directory, cleaned
	recursive bool
	held      map[string]bool // rel of each directory held (guarded by t.mu)
	ended     bool            // gone is closed (guarded by t.mu)

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
	t := a.t
	w := &watcher{t: t, log: log, root: rel, recursive: q.Recursive, held: map[string]bool{},
		pending: map[string]*wire.FileEvent{}, dropped: map[string]int64{}, kick: make(chan struct{}, 1), gone: make(chan struct{})}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.fs == nil {
		fw, err := fsnotify.NewWatcher()
		if err != nil {
			f.Close()
			return nil, wire.FileWatchReady{}, wire.Wrap(wire.ResourceExhausted, err, "cannot start watching: the host's inotify limit is reached")
		}
		t.fs, t.byRel, t.byKey, t.subs = fw, map[string]*watchDir{}, map[string]*watchDir{}, map[*watcher]struct{}{}
		t.open = func(rel string) (*os.File, error) {
			f, _, err := a.root.OpenDir(rel)
			return f, err
		}
		if t.log == nil {
			t.log = log
		}
		go t.collect(fw)
	}
	t.subs[w] = struct{}{}
	if err := t.add(f, rel, []*watcher{w}, true, false); err != nil {
		t.releaseLocked(w)
		return nil, wire.FileWatchReady{}, err
	}
	ready := wire.FileWatchReady{Path: rel, Recursive: q.Recursive, DebounceMs: q.Debounce.Milliseconds()}
	ready.Dirs = len(w.held)
	return w, ready, nil
}

// add makes each of ws hold the open directory f at rel and, for the recursive ones, its subdirectories
// (not through symlinks), watching each directory not watched yet. top: rel is the subscribers' watched
// directory. With announce each entry found is queued to ws as a create: it appeared before its directory
// was watched. A new directory past the limit is refused with resource_exhausted when setting up
// (announce false) and reported as a dirs overflow afterwards. f is consumed. Called with t.mu held.
func (t *Table) add(f *os.File, rel string, ws []*watcher, top, announce bool) error {
	keep := false
	defer func() {
		if !keep {
			f.Close()
		}
	}()
	d := t.byRel[rel]
	if d == nil {
		if t.dirs >= t.maxDirs {
			if announce {
				dropAll(ws, wire.OverflowDirs)
				return nil
			}
			return wire.Errorf(wire.ResourceExhausted, "more than %d directories would be watched in this sandbox", t.maxDirs)
		}
		key, err := t.watchNew(f)
		if err != nil {
			if announce {
				dropAll(ws, wire.OverflowDirs)
				return nil
			}
			return wire.Wrap(wire.ResourceExhausted, err, "cannot watch "+rel+": the host's inotify watch limit is reached")
		}
		d = &watchDir{key: key, rel: rel}
		t.byRel[rel], t.byKey[key] = d, d
		t.dirs++
	}
	var grow []*watcher
	for _, w := range ws {
		if w.held[rel] {
			continue
		}
		w.held[rel] = true
		d.refs++
		if !top {
			d.subs++
		}
		if w.recursive {
			grow = append(grow, w)
		}
	}
	if !top && d.f == nil {
		d.f, keep = f, true
	}
	if len(grow) == 0 && !announce {
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
			for _, w := range ws {
				w.queue(child, wire.FileOpCreate, e.IsDir())
			}
		}
		if len(grow) == 0 || !e.IsDir() {
			continue
		}
		cf, ok, err := workspace.OpenChildDir(f, e.Name())
		if err != nil {
			return err
		}
		if ok {
			if err := t.add(cf, child, grow, false, announce); err != nil {
				return err
			}
		}
	}
	return nil
}

// watchNew adds an inotify watch for the open directory f, named /proc/self/fd/N by a number N that names
// no watched directory (f itself, or a duplicate of it), and returns that name.
func (t *Table) watchNew(f *os.File) (string, error) {
	fd := int(f.Fd())
	var dups []int
	defer func() {
		for _, d := range dups {
			_ = unix.Close(d)
		}
	}()
	for {
		key := "/proc/self/fd/" + strconv.Itoa(fd)
		if _, used := t.byKey[key]; !used {
			return key, t.fs.Add(key)
		}
		nfd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return "", fmt.Errorf("duplicate a directory descriptor: %w", err)
		}
		dups = append(dups, nfd)
		fd = nfd
	}
}

// unhold drops w's hold on rel, and the watch when nobody holds it any more. Called with t.mu held.
func (t *Table) unhold(w *watcher, rel string) {
	delete(w.held, rel)
	d := t.byRel[rel]
	if d == nil {
		return
	}
	d.refs--
	if rel != w.root {
		d.subs--
		if d.subs == 0 && d.f != nil {
			d.f.Close()
			d.f = nil
		}
	}
	if d.refs <= 0 {
		t.unwatch(d)
	}
}

func (t *Table) unwatch(d *watchDir) {
	_ = t.fs.Remove(d.key) // already gone when the kernel dropped it
	if d.f != nil {
		d.f.Close()
	}
	delete(t.byRel, d.rel)
	delete(t.byKey, d.key)
	t.dirs--
}

// forget stops watching rel and every watched directory under it, for every subscriber: it was removed,
// moved or replaced. A subscriber whose watched directory is among them gets op on it and ends. Called
// with t.mu held.
func (t *Table) forget(rel, op string) {
	under := func(r string) bool { return r == rel || strings.HasPrefix(r, rel+"/") || rel == "." }
	for r, d := range t.byRel {
		if under(r) {
			t.unwatch(d)
		}
	}
	for w := range t.subs {
		for r := range w.held {
			if under(r) {
				delete(w.held, r)
			}
		}
		if under(w.root) && !w.ended {
			w.queue(w.root, op, true)
			w.ended = true
			close(w.gone)
		}
	}
}

// release drops everything w holds; the last subscriber to leave closes the inotify instance.
func (t *Table) release(w *watcher) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.releaseLocked(w)
}

func (t *Table) releaseLocked(w *watcher) {
	if _, ok := t.subs[w]; !ok {
		return
	}
	for rel := range w.held {
		t.unhold(w, rel)
	}
	delete(t.subs, w)
	if len(t.subs) == 0 {
		for _, d := range t.byRel {
			t.unwatch(d) // none is left: every hold was dropped
		}
		_ = t.fs.Close()
		t.fs = nil
	}
}

func (w *watcher) close() { w.t.release(w) }

func dropAll(ws []*watcher, reason string) {
	for _, w := range ws {
		w.drop(reason, 1)
	}
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

// collect reads fs's events until it is closed, applying each to the table and fanning it out to the
// subscribers holding the directory it happened in. An event read from an instance closed meanwhile is
// dropped.
func (t *Table) collect(fs *fsnotify.Watcher) {
	for {
		select {
		case err, ok := <-fs.Errors:
			if !ok {
				return
			}
			t.mu.Lock()
			if t.fs == fs {
				if errors.Is(err, fsnotify.ErrEventOverflow) {
					for w := range t.subs {
						w.drop(wire.OverflowKernel, 0)
					}
				} else {
					t.log.Warn("file watch error", "err", err)
				}
			}
			t.mu.Unlock()
		case ev, ok := <-fs.Events:
			if !ok {
				return
			}
			t.mu.Lock()
			if t.fs == fs {
				t.handle(ev)
			}
			t.mu.Unlock()
		}
	}
}

// handle applies one inotify event. Called with t.mu held.
func (t *Table) handle(ev fsnotify.Event) {
	if d, ok := t.byKey[ev.Name]; ok {
		// The directory itself was removed or moved: its parent, when watched, reports the name.
		if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
			t.forget(d.rel, opOf(ev))
		}
		return
	}
	key, name := path.Split(ev.Name)
	d, ok := t.byKey[strings.TrimSuffix(key, "/")]
	if !ok || name == "" || strings.HasPrefix(name, workspace.TempPrefix) {
		return // a directory forgotten meanwhile, or an upload in progress
	}
	rel := path.Join(d.rel, name)
	var holders []*watcher
	for w := range t.subs {
		if w.held[d.rel] && !w.ended {
			holders = append(holders, w)
		}
	}
	_, wasDir := t.byRel[rel]
	if wasDir && (ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename)) {
		t.forget(rel, opOf(ev))
	}
	isDir := wasDir
	if ev.Has(fsnotify.Create) {
		if cf, ok := t.openChild(d, name); ok {
			isDir = true
			if _, dup := t.byRel[rel]; dup {
				t.forget(rel, wire.FileOpRemove) // replaced by another directory of the same name
			}
			var grow []*watcher
			for _, w := range holders {
				w.queue(rel, wire.FileOpCreate, true)
				if w.recursive {
					grow = append(grow, w)
				}
			}
			if len(grow) == 0 {
				cf.Close()
			} else if err := t.add(cf, rel, grow, false, true); err != nil {
				t.log.Warn("file watch: watch new directory", "path", rel, "err", err)
			}
			return
		}
	}
	for _, w := range holders {
		for _, op := range opsOf(ev) {
			w.queue(rel, op, isDir)
		}
	}
}

// openChild opens d's child name when it is a directory (not through a symlink).
func (t *Table) openChild(d *watchDir, name string) (*os.File, bool) {
	parent := d.f
	if parent == nil {
		f, err := t.open(d.rel)
		if err != nil {
			t.log.Warn("file watch: reopen a watched directory", "path", d.rel, "err", err)
			return nil, false
		}
		defer f.Close()
		parent = f
	}
	cf, ok, err := workspace.OpenChildDir(parent, name)
	if err != nil {
		t.log.Warn("file watch: open new directory", "path", path.Join(d.rel, name), "err", err)
	}
	return cf, ok
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
		err = a.t.join(a.t.host.Limit())
	}
	if err != nil {
		a.fail(w, req, err)
		return
	}
	defer a.t.leave()
	log := web.Logger(req)
	wt, ready, err := a.newWatcher(q, log)
	if err != nil {
		a.fail(w, req, err)
		return
	}
	defer wt.close()
	a.t.ops.WithLabelValues("watch", "ok").Inc()
	log.Info("file watch started", "path", ready.Path, "recursive", ready.Recursive, "dirs", ready.Dirs)
	defer log.Info("file watch ended", "path", ready.Path)

	ctx := req.Context()
	events := httpx.StartEvents(w)
	_ = events.Send(wire.EventWatchReady, ready)
	ping := time.NewTicker(httpx.KeepAliveEvery)
	defer ping.Stop()
	timer := time.NewTimer(q.Debounce)
	timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ping.C:
			_ = events.Ping()
			continue
		case <-wt.gone:
			_ = a.deliver(events, wt)
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
		if err := a.deliver(events, wt); err != nil {
			return
		}
	}
}

// deliver sends the pending batch, then an overflow event per reason of loss. An error is the client gone.
func (a *api) deliver(events *httpx.Events, wt *watcher) error {
	evs, dropped := wt.take()
	var err error
	for _, ev := range evs {
		err = cmp.Or(err, events.Send(wire.EventFileChange, ev))
	}
	a.t.events.Add(float64(len(evs)))
	for _, reason := range []string{wire.OverflowQueue, wire.OverflowKernel, wire.OverflowDirs} {
		n, ok := dropped[reason]
		if !ok {
			continue
		}
		a.t.overflows.WithLabelValues(reason).Add(float64(max(n, 1)))
		err = cmp.Or(err, events.Send(wire.EventWatchOverflow, wire.FileWatchOverflow{Reason: reason, Dropped: n, Message: overflowMessage(reason)}))
	}
	return err
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
