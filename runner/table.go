package runner

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-mesh/warren/internal/wire"
)

// What the tables of background processes (procTable) and terminals (termTable) share: both hold programs
// that outlive requests, keep a bounded number running plus as many exited ones, count their starts, keep
// the sandbox awake like each other, and end with the sandbox.

// liveItem is a program a table holds.
type liveItem interface {
	exited() bool
	doneChan() <-chan struct{}
	stop(cause error)
}

func (tm *term) doneChan() <-chan struct{} { return tm.done }
func (tm *term) stop(cause error)          { tm.cancel(cause) }

// census counts the running items and finds the oldest exited one (-1: none).
func census[T liveItem](items []T) (running, oldestExited int) {
	oldestExited = -1
	for i, it := range items {
		if !it.exited() {
			running++
		} else if oldestExited < 0 {
			oldestExited = i
		}
	}
	return running, oldestExited
}

// countStart records the outcome of a start request.
func countStart(starts *prometheus.CounterVec, err error) error {
	switch {
	case err == nil:
		starts.WithLabelValues(outcomeOK).Inc()
	case wire.CodeOf(err) == wire.Internal:
		starts.WithLabelValues(outcomeError).Inc()
	default:
		starts.WithLabelValues("refused").Inc()
	}
	return err
}

// stopAll ends every item and waits (until ctx ends) for them to exit.
func stopAll[T liveItem](ctx context.Context, items []T, what string) error {
	for _, it := range items {
		it.stop(ErrShuttingDown)
	}
	for _, it := range items {
		select {
		case <-it.doneChan():
		case <-ctx.Done():
			return fmt.Errorf("stop %s: %w", what, ctx.Err())
		}
	}
	return nil
}

// keptAwake reports whether running programs keep the sandbox awake now: while one runs and the last
// request is less than ProcessKeepAwake ago.
func (r *Runner) keptAwake(running int, now time.Time) bool {
	if r.cfg.ProcessKeepAwake < 0 || running == 0 {
		return false
	}
	return now.Sub(time.Unix(0, r.lastActive.Load())) < r.cfg.ProcessKeepAwake
}
