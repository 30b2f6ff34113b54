package cockroach_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/warren-mesh/warren/internal/cockroachdb"
	"github.com/warren-mesh/warren/internal/testenv"
	"github.com/warren-mesh/warren/scheduler"
	"github.com/warren-mesh/warren/scheduler/cockroach"
	"github.com/warren-mesh/warren/scheduler/placementstest"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func openPool(t testing.TB, dsn string) *pgxpool.Pool {
	t.Helper()
	pool, err := cockroachdb.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// open opens placements on a new pool to dsn, configured by cfg's other fields.
func open(t testing.TB, dsn string, cfg cockroach.Config) *cockroach.Placements {
	t.Helper()
	cfg.Pool = openPool(t, dsn)
	p, err := cockroach.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestContract(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	placementstest.Run(t, func(t *testing.T) scheduler.Placements { return open(t, testenv.PostgreSQL(t), cockroach.Config{}) })
}

// Two stores, each with a pool of its own, on one database stand for two processes (an edge in each of
// two regions): their claims still race through one compare-and-set.
func TestTwoProcessesRace(t *testing.T) {
	dsn := testenv.PostgreSQL(t)
	placementstest.ClaimRace(t, open(t, dsn, cockroach.Config{}), open(t, dsn, cockroach.Config{}))
}

// fakeClock is advanced only by the test.
type fakeClock struct{ t time.Time }

func (c *fakeClock) Now() time.Time { return c.t }

func TestUpdatedUsesClock(t *testing.T) {
	ctx := context.Background()
	clock := &fakeClock{t: time.Date(2030, 1, 2, 3, 4, 5, 6000, time.UTC)}
	p := open(t, testenv.PostgreSQL(t), cockroach.Config{Now: clock.Now})

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
	if err := p.Update(ctx, "iss", "u", 7, scheduler.StateAsleep, ""); !errors.Is(err, scheduler.ErrStaleEpoch) {
		t.Fatalf("stale update: %v, want ErrStaleEpoch", err)
	}
	assertUpdated(before)

	clock.t = clock.t.Add(time.Hour)
	placementstest.MustClaim(t, p, "iss", "u", "us", 1)
	assertUpdated(clock.t)
}

func TestReopenKeepsPlacements(t *testing.T) {
	ctx := context.Background()
	dsn := testenv.PostgreSQL(t)
	p := open(t, dsn, cockroach.Config{})
	placementstest.MustClaim(t, p, "iss", "u", "eu", 0)
	if err := p.Update(ctx, "iss", "u", 1, scheduler.StateAsleep, "gone"); err != nil {
		t.Fatal(err)
	}
	placementstest.AssertStored(t, open(t, dsn, cockroach.Config{}),
		scheduler.Placement{Issuer: "iss", User: "u", Region: "eu", Epoch: 1, State: scheduler.StateAsleep, Alloc: "gone"})
}

func TestInvalidInput(t *testing.T) {
	ctx := context.Background()
	p := open(t, testenv.PostgreSQL(t), cockroach.Config{})
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

// A store whose database cannot be reached says so, and not that the placement is missing or was claimed.
func TestClosedPool(t *testing.T) {
	ctx := context.Background()
	pool, err := cockroachdb.Open(ctx, testenv.PostgreSQL(t))
	if err != nil {
		t.Fatal(err)
	}
	p, err := cockroach.New(ctx, cockroach.Config{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	pool.Close()
	_, err = p.Get(ctx, "iss", "u")
	assertUnavailable(t, "Get", err)
	_, err = p.Claim(ctx, "iss", "u", "eu", 0, time.Time{})
	assertUnavailable(t, "Claim", err)
	assertUnavailable(t, "Update", p.Update(ctx, "iss", "u", 1, scheduler.StateRunning, ""))
}

func assertUnavailable(t *testing.T, op string, err error) {
	t.Helper()
	if cockroachdb.Classify(err) != cockroachdb.Unavailable ||
		errors.Is(err, scheduler.ErrNotFound) || errors.Is(err, scheduler.ErrConflict) || errors.Is(err, scheduler.ErrStaleEpoch) {
		t.Errorf("%s on a closed pool: %v (%v), want an unavailable database", op, err, cockroachdb.Classify(err))
	}
}

// TestServerStoppedThenBack: with the database server down every call reports an unavailable database
// (never "missing" or "claimed"); once it is back the same store carries on, placements intact.
func TestServerStoppedThenBack(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartPostgreSQL(t)
	pool, err := cockroachdb.Open(ctx, srv.CreateDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	p, err := cockroach.New(ctx, cockroach.Config{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Claim(ctx, "iss", "u", "eu", 0, time.Time{}); err != nil {
		t.Fatal(err)
	}
	srv.Stop(t)
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err = p.Get(sctx, "iss", "u")
	assertUnavailable(t, "Get", err)
	_, err = p.Claim(sctx, "iss", "u", "eu", 1, time.Time{})
	assertUnavailable(t, "Claim", err)
	assertUnavailable(t, "Update", p.Update(sctx, "iss", "u", 1, scheduler.StateRunning, "a1"))
	srv.Start(t)
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, err := p.Get(ctx, "iss", "u")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("placements did not recover after the server came back: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	got, err := p.Claim(ctx, "iss", "u", "eu", 1, time.Time{})
	if err != nil || got.Epoch != 2 {
		t.Fatalf("claim after recovery = %+v, %v; want epoch 2", got, err)
	}
}

// TestNewRejectsInvalidConfig: New without Pool fails at once, naming the missing field.
func TestNewRejectsInvalidConfig(t *testing.T) {
	_, err := cockroach.New(context.Background(), cockroach.Config{Now: time.Now})
	if err == nil || !strings.Contains(err.Error(), "open placements: Config.Pool is required") {
		t.Fatalf("New without Pool: %v, want an error saying Config.Pool is required", err)
	}
}
