package scheduler_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/registry/mem"
	"github.com/warren-mesh/warren/scheduler"
)

// stuckDriver starts sandboxes that never exit and whose Stop never finishes before its context ends.
type stuckDriver struct{ stops chan error }

func (d *stuckDriver) Start(ctx context.Context, spec scheduler.Spec) (scheduler.Sandbox, error) {
	return scheduler.Sandbox{Alloc: "stuck-" + spec.ID, Addr: "127.0.0.1:1", Key: "k", Exited: make(chan struct{})}, nil
}

func (d *stuckDriver) Stop(ctx context.Context, alloc string) error {
	<-ctx.Done()
	select {
	case d.stops <- ctx.Err():
	default:
	}
	return ctx.Err()
}

// hangCatch is far beyond what these closes take: it only turns a hang into a failure.
const hangCatch = 30 * time.Second

// Close returns once its context ends, even while a supervisor waits for a sandbox that neither stops
// (Stop would take its 10 s) nor exits (StartTimeout, an hour here); what it gave up on then unwinds at
// once, so a later Close finds it done.
func TestCloseBoundedByContext(t *testing.T) {
	ctx := context.Background()
	placements := sqlitePlacements(t)
	d := &stuckDriver{stops: make(chan error, 1)}
	s, err := scheduler.New(scheduler.Config{Region: "r1", Placements: placements, Registry: mem.New(), Driver: d,
		StartTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Ensure(ctx, scheduler.Request{Issuer: "iss", User: "stuck"}); err != nil {
		t.Fatal(err)
	}
	closeCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	closed := make(chan error, 1)
	go func() { closed <- s.Close(closeCtx) }()
	select {
	case err := <-closed:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Close with a stuck supervisor = %v, want its context's deadline", err)
		}
	case <-time.After(hangCatch):
		t.Fatal("Close did not return when its context ended")
	}
	// The supervisor's shutdown stop was cancelled with the close, not left to its own timeout.
	select {
	case err := <-d.stops:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the shutdown stop ended with %v, want canceled by the close", err)
		}
	case <-time.After(hangCatch):
		t.Fatal("the shutdown stop was not cancelled")
	}
	go func() { closed <- s.Close(context.Background()) }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("second Close = %v", err)
		}
	case <-time.After(hangCatch):
		t.Fatal("the supervisor did not unwind after the close gave up")
	}
	if n := s.Live(); n != 0 {
		t.Fatalf("after Close, %d sandboxes are still supervised", n)
	}
}
