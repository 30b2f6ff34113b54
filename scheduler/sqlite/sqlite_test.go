package sqlite_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warren-mesh/warren/scheduler"
	"github.com/warren-mesh/warren/scheduler/placementstest"
	"github.com/warren-mesh/warren/scheduler/sqlite"
)

func open(t testing.TB, cfg sqlite.Config) *sqlite.Placements {
	t.Helper()
	p, err := sqlite.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	return p
}

func TestContract(t *testing.T) {
	placementstest.Run(t, func(t *testing.T) scheduler.Placements {
		return open(t, sqlite.Config{Path: filepath.Join(t.TempDir(), "placements.db")})
	})
}

// Two stores on one file stand for two processes (an edge in each of two regions): their claims still race
// through one compare-and-set.
func TestTwoProcessesRace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "placements.db")
	placementstest.ClaimRace(t, open(t, sqlite.Config{Path: path}), open(t, sqlite.Config{Path: path}))
}

// fakeClock is advanced only by the test.
type fakeClock struct{ t time.Time }

func (c *fakeClock) Now() time.Time { return c.t }

func TestUpdatedUsesClock(t *testing.T) {
	ctx := context.Background()
	clock := &fakeClock{t: time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)}
	p := open(t, sqlite.Config{Path: filepath.Join(t.TempDir(), "placements.db"), Now: clock.Now})

	assertUpdated := func(want time.Time) {
		t.Helper()
		got, err := p.Get(ctx, "iss", "u")
		if err != nil {
			t.Fatal(err)
		}
		if !got.Updated.Equal(want) {
			t.Fatalf("Updated = %v, want %v", got.Updated, want)
		}
	}
	pl := placementstest.MustClaim(t, p, "iss", "u", "eu", 0)
	if !pl.Updated.Equal(clock.t) {
		t.Fatalf("claim Updated = %v, want %v", pl.Updated, clock.t)
	}
	assertUpdated(clock.t)

	clock.t = clock.t.Add(time.Minute)
	if err := p.Update(ctx, "iss", "u", 1, scheduler.StateRunning, "a"); err != nil {
		t.Fatal(err)
	}
	assertUpdated(clock.t)

	// A rejected update leaves the timestamp alone.
	before := clock.t
	clock.t = clock.t.Add(time.Minute)
	if err := p.Update(ctx, "iss", "u", 7, scheduler.StateAsleep, ""); err == nil {
		t.Fatal("stale update succeeded")
	}
	assertUpdated(before)

	clock.t = clock.t.Add(time.Hour)
	placementstest.MustClaim(t, p, "iss", "u", "us", 1)
	assertUpdated(clock.t)
}

func TestReopenKeepsPlacements(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "placements.db")
	p, err := sqlite.New(ctx, sqlite.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	placementstest.MustClaim(t, p, "iss", "u", "eu", 0)
	if err := p.Update(ctx, "iss", "u", 1, scheduler.StateAsleep, "gone"); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	placementstest.AssertStored(t, open(t, sqlite.Config{Path: path}),
		scheduler.Placement{Issuer: "iss", User: "u", Region: "eu", Epoch: 1, State: scheduler.StateAsleep, Alloc: "gone"})
}

func TestInvalidInput(t *testing.T) {
	ctx := context.Background()
	p := open(t, sqlite.Config{Path: filepath.Join(t.TempDir(), "placements.db")})
	placementstest.MustClaim(t, p, "iss", "u", "eu", 0)
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"claim empty issuer", func() error { _, err := p.Claim(ctx, "", "u", "eu", 0, time.Time{}); return err }},
		{"claim empty user", func() error { _, err := p.Claim(ctx, "iss", "", "eu", 0, time.Time{}); return err }},
		{"claim empty region", func() error { _, err := p.Claim(ctx, "iss", "v", "", 0, time.Time{}); return err }},
		{"update unknown state", func() error { return p.Update(ctx, "iss", "u", 1, "flying", "") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); err == nil {
				t.Fatal("succeeded")
			}
		})
	}
	placementstest.AssertStored(t, p, scheduler.Placement{Issuer: "iss", User: "u", Region: "eu", Epoch: 1, State: scheduler.StateStarting})
}

// TestNewRejectsInvalidConfig: New without Path fails at once, naming the missing field.
func TestNewRejectsInvalidConfig(t *testing.T) {
	_, err := sqlite.New(context.Background(), sqlite.Config{Now: time.Now})
	if err == nil || !strings.Contains(err.Error(), "open placements: Config.Path is required") {
		t.Fatalf("New without Path: %v, want an error saying Config.Path is required", err)
	}
}
