package runner_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner"
)

// A runner told its lease (PUT /v1/lease) keeps serving while renewals come, ignores a stale or foreign
// one, and stops itself, as fenced, before a lease that was not renewed ends.
func TestLeaseLapseStopsTheRunner(t *testing.T) {
	base := t.TempDir()
	r, err := runner.New(runner.Config{Issuer: "acme", User: "alice", Epoch: 7, Region: "r1", Listen: "127.0.0.1:0",
		Workspace: filepath.Join(base, "ws"), StateDir: filepath.Join(base, "state"), Key: "k", Insecure: true,
		Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	select {
	case <-r.Ready():
	case err := <-done:
		t.Fatalf("Run ended before listening: %v", err)
	}
	h := &harness{r: r, url: "http://" + r.Addr(), key: "k"}
	put := func(l any) int {
		t.Helper()
		return h.doJSON(t, http.MethodPut, "/v1/lease", l).StatusCode
	}
	if c := put(wire.Lease{Epoch: 6, Until: time.Now().Add(time.Hour)}); c != http.StatusConflict {
		t.Fatalf("a lease for another epoch: status %d, want 409", c)
	}
	if c := put(map[string]any{"epoch": 7}); c != http.StatusBadRequest {
		t.Fatalf("a lease without until: status %d, want 400", c)
	}
	if c := put(wire.Lease{Epoch: 7, Until: time.Now().Add(runner.MaxLeaseAhead + time.Minute)}); c != http.StatusBadRequest {
		t.Fatalf("a lease beyond MaxLeaseAhead (it would switch the deadline off): status %d, want 400", c)
	}
	if c := h.do(t, http.MethodPut, "/v1/lease", strings.NewReader(`{"epoch":7,"until":"2030-01-01T00:00:00Z"}`), "Authorization", "Bearer wrong").StatusCode; c != http.StatusUnauthorized {
		t.Fatalf("a lease with the wrong key: status %d, want 401", c)
	}
	// A short lease, renewed before it ends; then a stale one arrives late.
	short := time.Now().Add(runner.LeaseMargin + 300*time.Millisecond)
	if c := put(wire.Lease{Epoch: 7, Until: short}); c != http.StatusNoContent {
		t.Fatalf("lease: status %d", c)
	}
	long := time.Now().Add(runner.LeaseMargin + 3*time.Second)
	if c := put(wire.Lease{Epoch: 7, Until: long}); c != http.StatusNoContent {
		t.Fatalf("renewal: status %d", c)
	}
	if c := put(wire.Lease{Epoch: 7, Until: short}); c != http.StatusNoContent {
		t.Fatalf("stale lease: status %d", c)
	}
	time.Sleep(time.Until(short) + 500*time.Millisecond - runner.LeaseMargin)
	select {
	case err := <-done:
		t.Fatalf("the runner stopped at its first lease's end although it was renewed: %v", err)
	default:
	}
	if resp := h.do(t, http.MethodGet, "/healthz", nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz after a renewal: %d", resp.StatusCode)
	}
	// No renewal: it stops before long ends, as fenced.
	select {
	case err := <-done:
		if !errors.Is(err, runner.ErrLeaseLapsed) || !errors.Is(err, runner.ErrFencedOff) {
			t.Fatalf("Run after the lease lapsed: %v, want ErrLeaseLapsed (a fencing)", err)
		}
	case <-time.After(time.Until(long) + 20*time.Second):
		t.Fatal("the runner kept serving after its lease lapsed")
	}
}

// Lease pushes are the scheduler's, not the user's: however often they come, an idle sandbox still sleeps.
func TestLeasePushesDoNotKeepASandboxAwake(t *testing.T) {
	base := t.TempDir()
	r, err := runner.New(runner.Config{Issuer: "acme", User: "alice", Epoch: 7, Region: "r1", Listen: "127.0.0.1:0",
		Workspace: filepath.Join(base, "ws"), StateDir: filepath.Join(base, "state"), Key: "k", Insecure: true,
		IdleTimeout: time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(context.Background()) }()
	<-r.Ready()
	h := &harness{r: r, url: "http://" + r.Addr(), key: "k"}
	hang := time.After(30 * time.Second)
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Run after sleeping: %v", err)
			}
			return
		case <-hang:
			t.Fatal("an idle sandbox kept awake by lease pushes alone")
		case <-time.After(200 * time.Millisecond):
			resp := h.doJSON(t, http.MethodPut, "/v1/lease", wire.Lease{Epoch: 7, Until: time.Now().Add(time.Minute)})
			if resp.StatusCode != http.StatusNoContent {
				t.Fatalf("lease push: status %d", resp.StatusCode)
			}
		}
	}
}
