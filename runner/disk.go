package runner

import (
	"context"
	"errors"
	"io/fs"
	"math"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner/internal/live"
)

// ErrWorkspaceFull is the cause of a command killed because the workspace grew past its limit.
var ErrWorkspaceFull = live.ErrWorkspaceFull

// diskGuard bounds the bytes under the workspace (the quota's max_workspace_bytes). RLIMIT_FSIZE caps any
// one file a command writes; the guard caps their sum: an upload is refused while the workspace (plus the
// uploads in flight) would be over the limit, and a running command is killed within diskPoll of taking
// it over. Commands still start while the workspace is over, so that it can always be cleaned with rm
// from exec (issue #21): such a command is killed once the workspace grows past the least it has been
// since the command started (or past the limit, once back under it), so it may free space but not write;
// admit stops them starting once the workspace has grown overSlack while over. Usage is the allocated
// size, each entry counted as at least entryBytes so that inodes are bounded too, measured by a walk
// through os.Root (one level at a time: no path is too long to count and no directory swapped for a
// symlink leads outside), plus heldUnlinked, cached for diskCache. A walk that fails counts as over
// the limit.
type diskGuard struct {
	dir      string
	limit    func() int64 // 0: none
	pids     func() []int // the sandbox's processes, whose unlinked open files count too; nil: none
	mu       sync.Mutex
	at       time.Time
	used     int64
	over     int64        // the least usage measured since the workspace last went over its limit; 0: not over
	inflight atomic.Int64 // bytes reserved by uploads in progress
	walks    atomic.Int64 // walks of the workspace so far
}

const (
	diskCache  = 2 * time.Second
	diskPoll   = time.Second
	entryBytes = 4096
)

// usage returns the workspace's allocated bytes, measured at most maxAge ago.
func (g *diskGuard) usage(maxAge time.Duration) int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	if time.Since(g.at) < maxAge {
		return g.used
	}
	g.walks.Add(1)
	n, err := walkUsage(g.dir)
	if err != nil {
		n = math.MaxInt64 // fail closed
	} else if g.pids != nil {
		n += heldUnlinked(g.dir, g.pids())
	}
	g.used, g.at = n, time.Now()
	switch limit := g.limit(); {
	case limit <= 0 || n <= limit:
		g.over = 0
	case n != math.MaxInt64 && (g.over == 0 || n < g.over):
		g.over = n
	}
	return n
}

// overSlack is how far a workspace over its limit may grow past the least it has been since it went over
// before commands stop starting (see admit).
const overSlack = 16 << 20

// admit refuses with resource_exhausted to start a command (exec, process or terminal) while the workspace
// is over its limit and has grown more than overSlack past the least it has been since it went over.
// Commands start while it is over so that rm can clean it, and each is killed once it grows the workspace,
// but the bytes written in the poll before its kill stay: without this a loop of commands, each killed,
// grew an over-full workspace without bound. The files API's DELETE still frees space.
func (g *diskGuard) admit() error {
	limit := g.limit()
	if limit <= 0 {
		return nil
	}
	used := g.usage(diskPoll / 2)
	g.mu.Lock()
	over := g.over
	g.mu.Unlock()
	if used > limit && (over == 0 || used > over+overSlack) {
		return wire.Errorf(wire.ResourceExhausted, "the workspace is over its limit of %d bytes (the quota's max_workspace_bytes) and grew while over: delete files first (DELETE /v1/sandbox/files)", limit)
	}
	return nil
}

// walkUsage sums the allocated bytes (at least entryBytes an entry) under dir. Entries that vanish during
// the walk are skipped; any other error ends it.
func walkUsage(dir string) (int64, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return 0, err
	}
	defer root.Close()
	var n int64
	err = fs.WalkDir(root.FS(), ".", func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		size := int64(entryBytes)
		if info, err := d.Info(); err == nil {
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				size = max(size, st.Blocks*512)
			}
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		n += size
		return nil
	})
	return n, err
}

// heldUnlinked sums the allocated bytes (at least entryBytes a file) of the files on dir's file system
// that pids hold open or mapped but no name links any more. The walk cannot see them: a command that
// opened a file, removed it and kept writing filled the disk while the workspace looked empty.
func heldUnlinked(dir string, pids []int) int64 {
	var root syscall.Stat_t
	if syscall.Stat(dir, &root) != nil {
		return 0
	}
	seen := map[uint64]bool{}
	var n int64
	for _, pid := range pids {
		for _, sub := range []string{"fd", "map_files"} {
			d := "/proc/" + strconv.Itoa(pid) + "/" + sub
			entries, err := os.ReadDir(d)
			if err != nil {
				continue
			}
			for _, e := range entries {
				var st syscall.Stat_t
				if syscall.Stat(d+"/"+e.Name(), &st) != nil || st.Nlink != 0 || st.Dev != root.Dev ||
					st.Mode&syscall.S_IFMT != syscall.S_IFREG || seen[st.Ino] {
					continue
				}
				seen[st.Ino] = true
				n += max(int64(entryBytes), st.Blocks*512)
			}
		}
	}
	return n
}

// check refuses with resource_exhausted a write (a mkdir) while the workspace is over its limit.
func (g *diskGuard) check() error { return g.checkWith(0) }

// checkWith refuses with resource_exhausted when the workspace plus extra bytes about to be written (an
// upload's) would be over its limit.
func (g *diskGuard) checkWith(extra int64) error {
	limit := g.limit()
	if limit <= 0 {
		return nil
	}
	if used := g.usage(diskCache); used == math.MaxInt64 || used+g.inflight.Load()+extra > limit {
		return wire.Errorf(wire.ResourceExhausted, "the workspace would hold more than its limit of %d bytes (the quota's max_workspace_bytes): delete files first", limit)
	}
	return nil
}

// watch cancels ctx's command (through cancel) once the workspace passes its limit, or, while it is
// over, grows past the least it has been since the watch began, until ctx ends.
func (g *diskGuard) watch(ctx context.Context, cancel context.CancelCauseFunc) {
	if g.limit() <= 0 {
		return
	}
	floor := g.usage(diskPoll / 2)
	t := time.NewTicker(diskPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// Every running command and process has a watcher, all ticking each diskPoll: a measurement of
		// the last half poll serves them all, so the workspace (whose entries the tenant multiplies) is
		// walked at most twice a poll whatever their number, not once per watcher.
		used := g.usage(diskPoll / 2)
		floor = min(floor, used)
		if limit := g.limit(); limit > 0 && used > max(limit, floor) {
			cancel(ErrWorkspaceFull)
			return
		}
	}
}
