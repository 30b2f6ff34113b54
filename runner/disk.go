package runner

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/warren-mesh/warren/internal/wire"
)

// ErrWorkspaceFull is the cause of a command killed because the workspace grew past its limit.
var ErrWorkspaceFull = errors.New("the workspace is over its size limit")

// diskGuard bounds the bytes under the workspace (the quota's max_workspace_bytes). RLIMIT_FSIZE caps any
// one file a command writes; the guard caps their sum: a command is refused while the workspace is over
// the limit, and a running one is killed within diskPoll of taking it over. Usage is the allocated size
// (blocks), measured by a walk that is cached for diskCache.
type diskGuard struct {
	dir   string
	limit func() int64 // 0: none
	mu    sync.Mutex
	at    time.Time
	used  int64
}

const (
	diskCache = 2 * time.Second
	diskPoll  = time.Second
)

// usage returns the workspace's allocated bytes, measured at most diskCache ago (fresh when force).
func (g *diskGuard) usage(force bool) int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !force && time.Since(g.at) < diskCache {
		return g.used
	}
	var n int64
	_ = filepath.WalkDir(g.dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // vanished or unreadable: skip
		}
		if info, err := d.Info(); err == nil {
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				n += st.Blocks * 512
			}
		}
		return nil
	})
	g.used, g.at = n, time.Now()
	return n
}

// check refuses with resource_exhausted when the workspace is over its limit.
func (g *diskGuard) check() error {
	limit := g.limit()
	if limit <= 0 {
		return nil
	}
	if used := g.usage(false); used > limit {
		return wire.Errorf(wire.ResourceExhausted, "the workspace holds %d bytes, more than its limit of %d (the quota's max_workspace_bytes): delete files first", used, limit)
	}
	return nil
}

// watch cancels ctx's command (through cancel) once the workspace passes its limit, until ctx ends.
func (g *diskGuard) watch(ctx context.Context, cancel context.CancelCauseFunc) {
	if g.limit() <= 0 {
		return
	}
	t := time.NewTicker(diskPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if limit := g.limit(); limit > 0 && g.usage(true) > limit {
			cancel(ErrWorkspaceFull)
			return
		}
	}
}
