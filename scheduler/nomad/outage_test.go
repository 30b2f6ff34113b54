package nomad_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/scheduler"
	"github.com/warren-mesh/warren/scheduler/drivertest"
	"github.com/warren-mesh/warren/scheduler/nomad"
	placementsqlite "github.com/warren-mesh/warren/scheduler/sqlite"
)

// Nomad stopped while a sandbox runs: every driver call fails fast with the typed ErrUnavailable (the
// scheduler turns it into wire unavailable), none waits for its context. A dev agent keeps no state across
// a stop, so recovery is a new agent, which the other tests cover.
func TestNomadStoppedMidTest(t *testing.T) {
	c := startCluster(t)
	d := c.driver(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sb, err := d.Start(ctx, drivertest.Spec("r1"))
	if err != nil {
		t.Fatal(err)
	}
	c.nomad.Stop(t)

	callCtx, callCancel := context.WithTimeout(ctx, time.Minute)
	defer callCancel()
	begin := time.Now()
	if _, err := d.Start(callCtx, drivertest.Spec("r1")); !errors.Is(err, nomad.ErrUnavailable) {
		t.Errorf("Start with Nomad stopped = %v, want ErrUnavailable", err)
	}
	if err := d.Stop(callCtx, sb.Alloc); !errors.Is(err, nomad.ErrUnavailable) {
		t.Errorf("Stop with Nomad stopped = %v, want ErrUnavailable", err)
	}
	spec := drivertest.Spec("r1")
	if _, err := d.Adopt(callCtx, spec, sb.Alloc); !errors.Is(err, nomad.ErrUnavailable) || errors.Is(err, scheduler.ErrNotFound) {
		t.Errorf("Adopt with Nomad stopped = %v, want ErrUnavailable", err)
	}
	placements, err := placementsqlite.New(ctx, placementsqlite.Config{Path: filepath.Join(t.TempDir(), "placements.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer placements.Close()
	s, err := scheduler.New(scheduler.Config{Region: "r1", Placements: placements, Registry: c.reg, Driver: d, RunnerRegisters: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	var we *wire.Error
	if _, err := s.Ensure(callCtx, scheduler.Request{Issuer: "iss", User: "outage"}); !errors.As(err, &we) || we.Code != wire.Unavailable {
		t.Errorf("Ensure with Nomad stopped = %v, want a wire unavailable error", err)
	}
	if callCtx.Err() != nil {
		t.Fatalf("the calls waited for their context (%v) instead of failing fast", time.Since(begin))
	}
}
