// Package placementstest is the contract suite for scheduler.Placements. Every adapter's tests call Run
// (litestream's RunWithReplicaClient pattern), so the embedded and production stores promise the same thing.
package placementstest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/scheduler"
)

// Racers is how many goroutines ClaimRace sets against each other.
const Racers = 50

// Run runs the contract suite. open returns a new, empty store for each subtest and arranges its closing
// with t.Cleanup.
func Run(t *testing.T, open func(t *testing.T) scheduler.Placements) {
	t.Helper()
	t.Run("GetMissing", func(t *testing.T) {
		p := open(t)
		_, err := p.Get(context.Background(), "iss", "nobody")
		if !errors.Is(err, scheduler.ErrNotFound) {
			t.Fatalf("Get missing: %v, want ErrNotFound", err)
		}
	})
	t.Run("FirstClaim", func(t *testing.T) { testFirstClaim(t, open(t)) })
	t.Run("ClaimWrongExpect", func(t *testing.T) { testClaimWrongExpect(t, open(t)) })
	t.Run("SuccessiveClaims", func(t *testing.T) { testSuccessiveClaims(t, open(t)) })
	t.Run("Update", func(t *testing.T) { testUpdate(t, open(t)) })
	t.Run("UpdateStale", func(t *testing.T) { testUpdateStale(t, open(t)) })
	t.Run("ConcurrentClaims", func(t *testing.T) { ClaimRace(t, open(t)) })
	t.Run("UsersIndependent", func(t *testing.T) { testUsersIndependent(t, open(t)) })
	t.Run("Meter", func(t *testing.T) { testMeter(t, open(t)) })
	t.Run("Active", func(t *testing.T) { testActive(t, open(t)) })
	t.Run("Lease", func(t *testing.T) { testLease(t, open(t)) })
}

// testLease: a placement another region holds under a lease that has not lapsed is not claimed (the
// refusal names the holder); the holder's own region, a lapsed lease, an asleep placement or no lease at
// all let the claim through; renewals are fenced by the epoch.
func testLease(t *testing.T, p scheduler.Placements) {
	ctx := context.Background()
	later := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	claim := func(region string, expect int64, lease time.Time) (scheduler.Placement, error) {
		return p.Claim(ctx, "iss", "u", region, expect, lease)
	}
	if _, err := claim("eu", 0, later); err != nil {
		t.Fatal(err)
	}
	if err := p.Update(ctx, "iss", "u", 1, scheduler.StateRunning, "a1"); err != nil {
		t.Fatal(err)
	}
	_, err := claim("us", 1, later)
	owned, ok := errors.AsType[*scheduler.OwnedError](err)
	if !ok || !errors.Is(err, scheduler.ErrOwned) {
		t.Fatalf("claim from another region while held: %v, want an OwnedError", err)
	}
	if owned.Region != "eu" || owned.Epoch != 1 || !owned.Lease.Equal(later) {
		t.Fatalf("refusal names %+v, want region eu, epoch 1, lease %v", owned, later)
	}
	AssertStored(t, p, scheduler.Placement{Issuer: "iss", User: "u", Region: "eu", Epoch: 1, State: scheduler.StateRunning, Alloc: "a1", Lease: later})
	if _, err := claim("us", 0, later); !errors.Is(err, scheduler.ErrConflict) || errors.Is(err, scheduler.ErrOwned) {
		t.Fatalf("claim with a wrong expect on a held placement: %v, want ErrConflict", err)
	}
	// The holder's region claims again (its runner is gone, its registry says so), with a lease that has
	// lapsed already.
	lapsed := time.Now().Add(-time.Second).Truncate(time.Microsecond)
	if pl, err := claim("eu", 1, lapsed); err != nil || pl.Epoch != 2 || !pl.Lease.Equal(lapsed) {
		t.Fatalf("claim by the holder's region: %+v, %v", pl, err)
	}
	// Renewals: fenced by the epoch, and they never shorten a lease.
	if err := p.Renew(ctx, "iss", "u", 1, later); !errors.Is(err, scheduler.ErrStaleEpoch) {
		t.Fatalf("renew at an old epoch: %v, want ErrStaleEpoch", err)
	}
	if err := p.Renew(ctx, "iss", "nobody", 1, later); !errors.Is(err, scheduler.ErrNotFound) {
		t.Fatalf("renew of a missing placement: %v, want ErrNotFound", err)
	}
	if err := p.Renew(ctx, "iss", "u", 2, lapsed.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	AssertStored(t, p, scheduler.Placement{Issuer: "iss", User: "u", Region: "eu", Epoch: 2, State: scheduler.StateStarting, Lease: lapsed})
	// A lapsed lease lets another region claim; its renewals extend it.
	if pl, err := claim("us", 2, later); err != nil || pl.Region != "us" || pl.Epoch != 3 {
		t.Fatalf("claim after the lease lapsed: %+v, %v", pl, err)
	}
	if err := p.Renew(ctx, "iss", "u", 3, later.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	AssertStored(t, p, scheduler.Placement{Issuer: "iss", User: "u", Region: "us", Epoch: 3, State: scheduler.StateStarting, Lease: later.Add(time.Minute)})
	// Asleep: held no more, whatever the lease says.
	if err := p.Update(ctx, "iss", "u", 3, scheduler.StateAsleep, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := claim("eu", 3, time.Time{}); err != nil {
		t.Fatalf("claim of an asleep placement: %v", err)
	}
	// No lease: never held.
	AssertStored(t, p, scheduler.Placement{Issuer: "iss", User: "u", Region: "eu", Epoch: 4, State: scheduler.StateStarting})
	if _, err := claim("us", 4, later); err != nil {
		t.Fatalf("claim of a placement held without a lease: %v", err)
	}
}

func testMeter(t *testing.T, p scheduler.Placements) {
	ctx := context.Background()
	pl := MustClaim(t, p, "iss", "u", "eu", 0)
	anchor := time.Date(2026, 1, 31, 10, 0, 0, 0, time.UTC)
	meters := []scheduler.Meter{
		{Window: billing.Month, Anchor: anchor, Limit: 3600},
		{Window: billing.Day, WindowStart: anchor.Add(24 * time.Hour), Limit: -1},
		{Window: billing.Lifetime},
	}
	want := scheduler.Placement{Issuer: "iss", User: "u", Region: "eu", Epoch: 1, State: scheduler.StateStarting}
	for _, m := range meters {
		if err := p.SetMeter(ctx, "iss", "u", pl.Epoch, m); err != nil {
			t.Fatalf("SetMeter(%+v): %v", m, err)
		}
		want.Meter = m
		AssertStored(t, p, want)
	}
	// Changing the state keeps the meter.
	if err := p.Update(ctx, "iss", "u", pl.Epoch, scheduler.StateRunning, "a1"); err != nil {
		t.Fatal(err)
	}
	want.State, want.Alloc = scheduler.StateRunning, "a1"
	AssertStored(t, p, want)
	if err := p.SetMeter(ctx, "iss", "u", pl.Epoch, scheduler.Meter{Window: "fortnight"}); err == nil {
		t.Error("SetMeter with an unknown window succeeded")
	}
	if err := p.SetMeter(ctx, "iss", "nobody", 1, meters[0]); !errors.Is(err, scheduler.ErrNotFound) {
		t.Errorf("SetMeter missing: %v, want ErrNotFound", err)
	}
	// A claim clears the meter; the old epoch can no longer set one.
	cur := MustClaim(t, p, "iss", "u", "us", pl.Epoch)
	want = scheduler.Placement{Issuer: "iss", User: "u", Region: "us", Epoch: cur.Epoch, State: scheduler.StateStarting}
	AssertStored(t, p, want)
	if err := p.SetMeter(ctx, "iss", "u", pl.Epoch, meters[0]); !errors.Is(err, scheduler.ErrStaleEpoch) {
		t.Errorf("SetMeter at a stale epoch: %v, want ErrStaleEpoch", err)
	}
	AssertStored(t, p, want)
}

func testActive(t *testing.T, p scheduler.Placements) {
	ctx := context.Background()
	if got, err := p.Active(ctx, "eu"); err != nil || len(got) != 0 {
		t.Fatalf("Active on an empty store = %v, %v", got, err)
	}
	m := scheduler.Meter{Window: billing.Week, Anchor: time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC), Limit: 60}
	for _, u := range []struct {
		user, region string
		state        scheduler.State
		meter        bool
	}{
		{"a", "eu", scheduler.StateRunning, true},
		{"b", "eu", scheduler.StateRunning, false},
		{"c", "eu", scheduler.StateAsleep, true},
		{"d", "eu", scheduler.StateStarting, false},
		{"e", "us", scheduler.StateRunning, true},
	} {
		pl := MustClaim(t, p, "iss", u.user, u.region, 0)
		if err := p.Update(ctx, "iss", u.user, pl.Epoch, u.state, "alloc-"+u.user); err != nil {
			t.Fatal(err)
		}
		if u.meter {
			if err := p.SetMeter(ctx, "iss", u.user, pl.Epoch, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	got, err := p.Active(ctx, "eu")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("Active(eu) = %+v, want users a, b and d", got)
	}
	AssertPlacement(t, got[0], scheduler.Placement{Issuer: "iss", User: "a", Region: "eu", Epoch: 1, State: scheduler.StateRunning, Alloc: "alloc-a", Meter: m})
	AssertPlacement(t, got[1], scheduler.Placement{Issuer: "iss", User: "b", Region: "eu", Epoch: 1, State: scheduler.StateRunning, Alloc: "alloc-b"})
	AssertPlacement(t, got[2], scheduler.Placement{Issuer: "iss", User: "d", Region: "eu", Epoch: 1, State: scheduler.StateStarting, Alloc: "alloc-d"})
	if got[0].Updated.IsZero() {
		t.Error("Active returned a zero Updated")
	}
}

func testFirstClaim(t *testing.T, p scheduler.Placements) {
	ctx := context.Background()
	got := MustClaim(t, p, "iss", "u", "eu", 0)
	want := scheduler.Placement{Issuer: "iss", User: "u", Region: "eu", Epoch: 1, State: scheduler.StateStarting}
	AssertPlacement(t, got, want)
	if got.Updated.IsZero() {
		t.Error("claim returned a zero Updated")
	}
	stored, err := p.Get(ctx, "iss", "u")
	if err != nil {
		t.Fatal(err)
	}
	AssertPlacement(t, stored, want)
	if stored.Updated.IsZero() {
		t.Error("stored placement has a zero Updated")
	}
}

func testClaimWrongExpect(t *testing.T, p scheduler.Placements) {
	ctx := context.Background()
	// No row yet: only expect 0 may claim.
	for _, expect := range []int64{1, 2, -1} {
		if _, err := p.Claim(ctx, "iss", "u", "eu", expect, time.Time{}); !errors.Is(err, scheduler.ErrConflict) {
			t.Errorf("Claim(expect %d) on missing row: %v, want ErrConflict", expect, err)
		}
	}
	if _, err := p.Get(ctx, "iss", "u"); !errors.Is(err, scheduler.ErrNotFound) {
		t.Fatalf("failed claims created a row: %v", err)
	}
	MustClaim(t, p, "iss", "u", "eu", 0)
	for _, expect := range []int64{0, 2, 7} {
		if _, err := p.Claim(ctx, "iss", "u", "us", expect, time.Time{}); !errors.Is(err, scheduler.ErrConflict) {
			t.Errorf("Claim(expect %d) at epoch 1: %v, want ErrConflict", expect, err)
		}
	}
	AssertStored(t, p, scheduler.Placement{Issuer: "iss", User: "u", Region: "eu", Epoch: 1, State: scheduler.StateStarting})
}

func testSuccessiveClaims(t *testing.T, p scheduler.Placements) {
	ctx := context.Background()
	regions := []string{"eu", "us", "ap", "eu", "us"}
	for i, region := range regions {
		expect := int64(i)
		got := MustClaim(t, p, "iss", "u", region, expect)
		want := scheduler.Placement{Issuer: "iss", User: "u", Region: region, Epoch: expect + 1, State: scheduler.StateStarting}
		AssertPlacement(t, got, want)
		AssertStored(t, p, want)
		// A claim resets whatever the previous owner left.
		if err := p.Update(ctx, "iss", "u", got.Epoch, scheduler.StateRunning, fmt.Sprintf("alloc-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
}

func testUpdate(t *testing.T, p scheduler.Placements) {
	ctx := context.Background()
	pl := MustClaim(t, p, "iss", "u", "eu", 0)
	steps := []struct {
		state scheduler.State
		alloc string
	}{
		{scheduler.StateRunning, "alloc-1"},
		{scheduler.StateRunning, "alloc-2"},
		{scheduler.StateAsleep, ""},
		{scheduler.StateStarting, "alloc-3"},
	}
	for _, s := range steps {
		if err := p.Update(ctx, "iss", "u", pl.Epoch, s.state, s.alloc); err != nil {
			t.Fatalf("Update(%s, %q): %v", s.state, s.alloc, err)
		}
		AssertStored(t, p, scheduler.Placement{Issuer: "iss", User: "u", Region: "eu", Epoch: 1, State: s.state, Alloc: s.alloc})
	}
	if err := p.Update(ctx, "iss", "nobody", 1, scheduler.StateRunning, "a"); !errors.Is(err, scheduler.ErrNotFound) {
		t.Errorf("Update missing: %v, want ErrNotFound", err)
	}
}

func testUpdateStale(t *testing.T, p scheduler.Placements) {
	ctx := context.Background()
	old := MustClaim(t, p, "iss", "u", "eu", 0)
	if err := p.Update(ctx, "iss", "u", old.Epoch, scheduler.StateRunning, "old"); err != nil {
		t.Fatal(err)
	}
	cur := MustClaim(t, p, "iss", "u", "us", old.Epoch)
	if err := p.Update(ctx, "iss", "u", cur.Epoch, scheduler.StateRunning, "new"); err != nil {
		t.Fatal(err)
	}
	want := scheduler.Placement{Issuer: "iss", User: "u", Region: "us", Epoch: 2, State: scheduler.StateRunning, Alloc: "new"}
	for _, epoch := range []int64{old.Epoch, cur.Epoch + 1, 0} {
		err := p.Update(ctx, "iss", "u", epoch, scheduler.StateAsleep, "stale")
		if !errors.Is(err, scheduler.ErrStaleEpoch) {
			t.Errorf("Update at epoch %d with stored %d: %v, want ErrStaleEpoch", epoch, cur.Epoch, err)
		}
		AssertStored(t, p, want)
	}
}

func testUsersIndependent(t *testing.T, p scheduler.Placements) {
	ctx := context.Background()
	keys := []struct{ iss, user string }{{"iss", "a"}, {"iss", "b"}, {"iss2", "a"}}
	for _, k := range keys {
		AssertPlacement(t, MustClaim(t, p, k.iss, k.user, "eu", 0),
			scheduler.Placement{Issuer: k.iss, User: k.user, Region: "eu", Epoch: 1, State: scheduler.StateStarting})
	}
	MustClaim(t, p, "iss", "a", "us", 1)
	if err := p.Update(ctx, "iss", "a", 2, scheduler.StateRunning, "x"); err != nil {
		t.Fatal(err)
	}
	AssertStored(t, p, scheduler.Placement{Issuer: "iss", User: "a", Region: "us", Epoch: 2, State: scheduler.StateRunning, Alloc: "x"})
	for _, k := range keys[1:] {
		AssertStored(t, p, scheduler.Placement{Issuer: k.iss, User: k.user, Region: "eu", Epoch: 1, State: scheduler.StateStarting})
	}
}

// ClaimRace sets Racers goroutines, spread over stores (which must share one database, as several processes
// would), claiming one user with the same expected epoch, twice over: exactly one claim may win each round,
// the rest must fail with ErrConflict.
func ClaimRace(t *testing.T, stores ...scheduler.Placements) {
	t.Helper()
	if len(stores) == 0 {
		t.Fatal("ClaimRace: no stores")
	}
	ctx := context.Background()
	for expect := range int64(2) {
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			winners []scheduler.Placement
			errs    []error
		)
		for i := range Racers {
			p := stores[i%len(stores)]
			region := fmt.Sprintf("r%d", i)
			wg.Go(func() {
				pl, err := p.Claim(ctx, "iss", "contended", region, expect, time.Time{})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					winners = append(winners, pl)
				case !errors.Is(err, scheduler.ErrConflict):
					errs = append(errs, err)
				}
			})
		}
		wg.Wait()
		for _, err := range errs {
			t.Errorf("claim at %d: %v, want nil or ErrConflict", expect, err)
		}
		if len(winners) != 1 {
			t.Fatalf("claim at %d: %d winners, want exactly 1", expect, len(winners))
		}
		w := winners[0]
		if w.Epoch != expect+1 {
			t.Fatalf("winner's epoch = %d, want %d", w.Epoch, expect+1)
		}
		for _, p := range stores {
			AssertStored(t, p, scheduler.Placement{Issuer: "iss", User: "contended", Region: w.Region, Epoch: expect + 1, State: scheduler.StateStarting})
		}
	}
}

// MustClaim claims or fails the test.
func MustClaim(t testing.TB, p scheduler.Placements, issuer, user, region string, expect int64) scheduler.Placement {
	t.Helper()
	pl, err := p.Claim(context.Background(), issuer, user, region, expect, time.Time{})
	if err != nil {
		t.Fatalf("Claim(%s/%s, %s, %d): %v", issuer, user, region, expect, err)
	}
	return pl
}

// AssertStored checks what Get returns for want's issuer and user, ignoring Updated.
func AssertStored(t testing.TB, p scheduler.Placements, want scheduler.Placement) {
	t.Helper()
	got, err := p.Get(context.Background(), want.Issuer, want.User)
	if err != nil {
		t.Fatalf("Get(%s/%s): %v", want.Issuer, want.User, err)
	}
	AssertPlacement(t, got, want)
}

// AssertPlacement compares every field but Updated, whose precision depends on the store; the meter's
// times and the lease are compared as instants.
func AssertPlacement(t testing.TB, got, want scheduler.Placement) {
	t.Helper()
	got.Updated = want.Updated
	gm, wm := got.Meter, want.Meter
	if gm.WindowStart.Equal(wm.WindowStart) && gm.Anchor.Equal(wm.Anchor) {
		got.Meter.WindowStart, got.Meter.Anchor = wm.WindowStart, wm.Anchor
	}
	if got.Lease.Equal(want.Lease) {
		got.Lease = want.Lease
	}
	if got != want {
		t.Fatalf("placement = %+v, want %+v", got, want)
	}
}
