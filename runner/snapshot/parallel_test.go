package snapshot_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warren-mesh/warren/runner/snapshot"
)

// A failing call stops new calls but does not cancel those in flight: an upload under way when a sibling
// is refused finishes before the refusal's reclaim lists the store (a PUT cancelled half-way may still
// land in S3 after the client gave up, and would stay).
func TestParallelLetsInFlightCallsFinish(t *testing.T) {
	refused := errors.New("refused")
	started, refusedSeen := make(chan struct{}), make(chan struct{})
	var finished, cancelled atomic.Bool
	var calls atomic.Int64
	err := snapshot.Parallel(t.Context(), 100, 2, func(ctx context.Context, i int) error {
		calls.Add(1)
		switch i {
		case 0: // the upload in flight: waits until its sibling has failed
			close(started)
			<-refusedSeen
			select { // the old pool cancelled ctx right after the sibling returned
			case <-ctx.Done():
				cancelled.Store(true)
			case <-time.After(100 * time.Millisecond):
			}
			finished.Store(true)
			return nil
		case 1:
			<-started
			defer close(refusedSeen)
			return refused
		}
		return nil
	})
	if !errors.Is(err, refused) {
		t.Fatalf("parallel: %v, want the first error", err)
	}
	if !finished.Load() || cancelled.Load() {
		t.Fatalf("call in flight: finished %v, cancelled %v; want finished against an uncancelled ctx", finished.Load(), cancelled.Load())
	}
	if n := calls.Load(); n == 100 {
		t.Fatalf("all %d calls ran, want those after the failure skipped", n)
	}
}
