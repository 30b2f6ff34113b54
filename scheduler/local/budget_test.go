package local_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/warren-mesh/warren/billing"
	billingsqlite "github.com/warren-mesh/warren/billing/sqlite"
	"github.com/warren-mesh/warren/internal/registry/mem"
	"github.com/warren-mesh/warren/scheduler"
	"github.com/warren-mesh/warren/scheduler/local"
	placementsqlite "github.com/warren-mesh/warren/scheduler/sqlite"
)

// A sandbox whose user has spent the compute seconds of the window is stopped (it sleeps): the scheduler
// meters it in one-second buckets and checks the total after each record.
func TestComputeBudgetStopsTheSandbox(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a runner process under bubblewrap")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	d, err := local.New(local.Config{Binary: binary, DataDir: filepath.Join(dir, "data")})
	if err != nil {
		t.Fatal(err)
	}
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
	s, err := scheduler.New(scheduler.Config{
		Region: "r1", Placements: placements, Registry: mem.New(), Driver: d, Ledger: ledger,
		MeterInterval: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	acct := billing.Account{Issuer: "iss", User: "spender", Window: billing.Lifetime}
	begin := time.Now()
	if _, err := s.Ensure(ctx, scheduler.Request{Issuer: acct.Issuer, User: acct.User, Account: acct, ComputeLimit: 2}); err != nil {
		t.Fatal(err)
	}
	for s.Live() != 0 {
		if ctx.Err() != nil {
			t.Fatal("the sandbox was not stopped once its compute budget was spent")
		}
		time.Sleep(50 * time.Millisecond)
	}
	lived := time.Since(begin)
	p, err := placements.Get(ctx, acct.Issuer, acct.User)
	if err != nil || p.State != scheduler.StateAsleep {
		t.Fatalf("placement after the budget stop = %+v, %v; want asleep", p, err)
	}
	u, err := ledger.Usage(ctx, acct)
	if err != nil {
		t.Fatal(err)
	}
	// Stopped once 2 s were recorded; what it used while stopping is charged too, in started seconds.
	if u.ComputeSeconds < 2 || time.Duration(u.ComputeSeconds)*time.Second > lived+2*time.Second {
		t.Fatalf("charged %d s for a sandbox that lived %v with a budget of 2 s", u.ComputeSeconds, lived)
	}
}
