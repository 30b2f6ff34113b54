package runner

import (
	"context"
	"time"

	"github.com/warren-mesh/warren/runner/isolate"
)

// The host interfaces of the feature packages, each served by the Runner: a feature sees only what it
// uses (its package declares the interface).

// procHost is procs.Host.
type procHost struct{ r *Runner }

func (h procHost) Start(ctx context.Context, spec isolate.ProcessSpec) (*isolate.Process, error) {
	return h.r.sandbox.Start(ctx, spec)
}
func (h procHost) Admit() error                                             { return h.r.disk.admit() }
func (h procHost) WatchDisk(ctx context.Context, c context.CancelCauseFunc) { h.r.disk.watch(ctx, c) }
func (h procHost) Limit() int                                               { return h.r.backgroundProcessLimit() }
func (h procHost) LogLimit() int64                                          { return h.r.processLogLimit() }
func (h procHost) KeepAwake(running int, now time.Time) bool                { return h.r.keptAwake(running, now) }
