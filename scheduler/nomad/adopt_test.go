package nomad_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/warren-mesh/warren/billing"
	billingsqlite "github.com/warren-mesh/warren/billing/sqlite"
	"github.com/warren-mesh/warren/internal/registry"
	"github.com/warren-mesh/warren/scheduler"
	"github.com/warren-mesh/warren/scheduler/nomad"
	placementsqlite "github.com/warren-mesh/warren/scheduler/sqlite"
)

// A scheduler that restarts adopts the runners its predecessor left serving: the new process meters their
// compute to the account stored with the placement and marks the placement asleep when the runner exits;
// a runner that ended while no scheduler watched has its placement put to sleep.
func TestSchedulerRestartAdoptsRunners(t *testing.T) {
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	placements, err := placementsqlite.New(ctx, placementsqlite.Config{Path: filepath.Join(dir, "placements.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { placements.Close() })
	ledger, err := billingsqlite.New(ctx, billingsqlite.Config{Path: filepath.Join(dir, "ledger.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ledger.Close() })
	newScheduler := func(d *nomad.Driver) *scheduler.Scheduler {
		s, err := scheduler.New(scheduler.Config{
			Region: "r1", Placements: placements, Registry: c.reg, Driver: d, RunnerRegisters: true,
			Ledger: ledger, MeterInterval: 100 * time.Millisecond, StartTimeout: time.Minute,
		})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	user := func(name string) (scheduler.Request, billing.Account) {
		acct := billing.Account{Issuer: "iss", User: fmt.Sprintf("%s-%d", name, time.Now().UnixNano()), Window: billing.Day,
			WindowStart: time.Now().UTC().Truncate(24 * time.Hour)}
		return scheduler.Request{Issuer: acct.Issuer, User: acct.User, Account: acct, ComputeLimit: -1}, acct
	}
	kept, keptAcct := user("kept")
	ended, _ := user("ended")

	d1 := c.driver(t, nil)
	first := newScheduler(d1)
	keptEntry, err := first.Ensure(ctx, kept)
	if err != nil {
		t.Fatal(err)
	}
	endedEntry, err := first.Ensure(ctx, ended)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := placements.Get(ctx, kept.Issuer, kept.User); err != nil || p.Meter.Window != billing.Day ||
		!p.Meter.WindowStart.Equal(keptAcct.WindowStart) || p.Meter.Limit != -1 {
		t.Fatalf("placement %+v, %v: the meter of the request is not stored", p, err)
	}
	// The first scheduler meters a few seconds, which its successor must not count again.
	waitFor(t, ctx, "the first scheduler to meter the runner", func() bool {
		u, err := ledger.Usage(ctx, keptAcct)
		return err == nil && u.ComputeSeconds >= 6
	})
	first.Close(context.Background())
	d1.Close()
	if e, err := c.reg.Lookup(ctx, kept.Issuer, kept.User); err != nil || e.Epoch != keptEntry.Epoch {
		t.Fatalf("after the scheduler closed, the runner's registration = %+v, %v: it should keep serving", e, err)
	}
	before, err := ledger.Usage(ctx, keptAcct)
	if err != nil {
		t.Fatal(err)
	}

	// While no scheduler runs, one runner ends.
	d2 := c.driver(t, nil)
	if err := d2.Stop(ctx, endedEntry.Alloc); err != nil {
		t.Fatal(err)
	}

	waitFor(t, ctx, "the ended runner to release its lock", func() bool {
		_, err := c.reg.Lookup(ctx, ended.Issuer, ended.User)
		return errors.Is(err, registry.ErrNotFound)
	})

	second := newScheduler(d2)
	defer second.Close(context.Background())
	n, err := second.Adopt(ctx)
	if err != nil || n != 1 {
		t.Fatalf("Adopt = %d, %v; want the one runner still serving", n, err)
	}
	if second.Live() != 1 {
		t.Fatalf("the new scheduler supervises %d sandboxes, want 1", second.Live())
	}
	if p, err := placements.Get(ctx, ended.Issuer, ended.User); err != nil || p.State != scheduler.StateAsleep {
		t.Fatalf("placement of the runner that ended unwatched = %+v, %v; want asleep", p, err)
	}
	if n, err := second.Adopt(ctx); err != nil || n != 0 {
		t.Fatalf("second Adopt = %d, %v; want nothing more to adopt", n, err)
	}
	// Ensure for the adopted user answers from the registry and keeps the same runner.
	if e, err := second.Ensure(ctx, kept); err != nil || e.Epoch != keptEntry.Epoch || e.Alloc != keptEntry.Alloc {
		t.Fatalf("Ensure after adoption = %+v, %v; want the adopted runner %+v", e, err, keptEntry)
	}

	waitFor(t, ctx, "the new scheduler to meter the adopted runner's compute", func() bool {
		u, err := ledger.Usage(ctx, keptAcct)
		return err == nil && u.ComputeSeconds >= before.ComputeSeconds+1
	})

	// The runner exits (here: stopped from outside the scheduler); the new scheduler sees it and lets the
	// placement sleep once the runner's lock is released.
	stopping := time.Now()
	if err := d2.Stop(ctx, keptEntry.Alloc); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the adopted runner's placement to sleep", func() bool {
		p, err := placements.Get(ctx, kept.Issuer, kept.User)
		return err == nil && p.State == scheduler.StateAsleep && second.Live() == 0
	})
	if _, err := c.reg.Lookup(ctx, kept.Issuer, kept.User); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("registry entry after the adopted runner exited: %v", err)
	}
	// Every second of the runner's life is charged once: the successor re-metered from the runner's start,
	// and the buckets the first scheduler had recorded did not count twice (which would add its 6+ s). The
	// runner lived at least until the stop began and at most until now; one-second buckets are charged in
	// started seconds (the first and last round up), and the runner registered a little before Ensure
	// returned.
	atLeast, atMost := stopping.Sub(keptEntry.Since), time.Since(keptEntry.Since)
	u, err := ledger.Usage(ctx, keptAcct)
	if err != nil {
		t.Fatal(err)
	}
	if got := time.Duration(u.ComputeSeconds) * time.Second; got < atLeast-time.Second || got > atMost+3*time.Second {
		t.Fatalf("charged %v for a runner that lived between %v and %v", got, atLeast, atMost)
	}
}
