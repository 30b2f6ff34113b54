package runnerlease_test

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/registry"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner"
	"github.com/warren-mesh/warren/scheduler/runnerlease"
)

// The client against a real runner: a lease for its epoch is taken, one for another epoch refused with
// conflict, a wrong key with unauthenticated; a runner stopped by its owner does not report a lapse.
func TestNotifyLease(t *testing.T) {
	base := t.TempDir()
	r, err := runner.New(runner.Config{Issuer: "acme", User: "alice", Epoch: 3, Region: "r1", Listen: "127.0.0.1:0",
		Workspace: filepath.Join(base, "ws"), StateDir: filepath.Join(base, "state"), Key: "key", Insecure: true,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	<-r.Ready()
	var c runnerlease.Client
	e := registry.Entry{Issuer: "acme", User: "alice", Epoch: 3, Addr: r.Addr(), Key: "key"}
	if err := c.NotifyLease(ctx, e, time.Now().Add(time.Hour)); err != nil {
		t.Fatalf("lease for the runner's epoch: %v", err)
	}
	other := e
	other.Epoch = 4
	if err := c.NotifyLease(ctx, other, time.Now().Add(time.Hour)); wire.CodeOf(err) != wire.Conflict {
		t.Fatalf("lease for another epoch: %v, want conflict", err)
	}
	wrong := e
	wrong.Key = "nope"
	if err := c.NotifyLease(ctx, wrong, time.Now().Add(time.Hour)); wire.CodeOf(err) != wire.Unauthenticated {
		t.Fatalf("lease with a wrong key: %v, want unauthenticated", err)
	}
	// A later lease extends the hold: the runner keeps serving.
	if err := c.NotifyLease(ctx, e, time.Now().Add(30*time.Minute)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		t.Fatalf("runner stopped while its lease holds: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	cancel()
	if err := <-done; errors.Is(err, runner.ErrLeaseLapsed) {
		t.Fatalf("a runner stopped by its owner reports a lapsed lease: %v", err)
	}
}
