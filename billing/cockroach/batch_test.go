package cockroach_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/billing/cockroach"
	"github.com/warren-mesh/warren/billing/ledgertest"
	"github.com/warren-mesh/warren/internal/testenv"
)

// One write batch holds calls that must not affect one another: reservations grant in turn against what
// the ones before them hold and what the batch settled, a refused call (a settle of another account's
// hold, a reservation over the limit) changes nothing while the others commit, an event key twice counts
// once, and a reservation repeated in the batch answers the first one's grant. A call whose context ends
// while it waits leaves the queue and is not run. The batch is made deterministic by holding the write
// lane: a first call blocks on a table lock the test holds while the others queue, in a known order.
func TestWriteBatchMixed(t *testing.T) {
	ctx := context.Background()
	dsn := testenv.PostgreSQL(t)
	l := open(t, dsn, cockroach.Config{})
	other := ledgertest.Day
	other.User = "other-user"
	ledgertest.MustRecord(t, l, ledgertest.AI("u0", ledgertest.Day, 100))
	ledgertest.AssertGranted(t, l, "pre", ledgertest.Day, 1000, 300, 300)
	ledgertest.AssertGranted(t, l, "other", other, 1000, 50, 50)

	admin := openPool(t, dsn)
	lock, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback(ctx)
	if _, err := lock.Exec(ctx, `LOCK TABLE holds IN SHARE MODE`); err != nil {
		t.Fatal(err)
	}
	before := l.Stats()

	type result struct {
		granted int64
		err     error
	}
	queued := 0
	start := func(f func() (int64, error)) chan result {
		ch := make(chan result, 1)
		go func() {
			g, err := f()
			ch <- result{g, err}
		}()
		return ch
	}
	// queue starts f and waits until it is queued behind the ones before it.
	queue := func(f func() (int64, error)) chan result {
		t.Helper()
		ch := start(f)
		queued++
		waitFor(t, func() bool { return l.PendingWrites() == queued })
		return ch
	}
	reserve := func(id string, want int64) func() (int64, error) {
		return func() (int64, error) { return l.Reserve(ctx, id, ledgertest.Day, 1000, want, time.Minute) }
	}
	none := func(err error) func() (int64, error) { return func() (int64, error) { return 0, err } }

	blocked := start(func() (int64, error) { return 0, l.Release(ctx, "no-such-hold") })
	waitFor(t, func() bool { // its batch waits for the lock
		var n int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	})

	cancelled, cancel := context.WithCancel(ctx)
	gaveUp := make(chan error, 1)
	go func() {
		_, err := l.Reserve(cancelled, "gave-up", ledgertest.Day, 1000, 1, time.Minute)
		gaveUp <- err
	}()
	waitFor(t, func() bool { return l.PendingWrites() == 1 })
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) || !errors.Is(err, billing.ErrUnavailable) {
		t.Fatalf("a reservation given up while queued: %v, want canceled and unavailable", err)
	}
	waitFor(t, func() bool { return l.PendingWrites() == 0 })

	badSettle := queue(func() (int64, error) {
		return none(l.Settle(ctx, "other", ledgertest.AI("bad", ledgertest.Day, 1)))()
	})
	settle := queue(func() (int64, error) { return none(l.Settle(ctx, "pre", ledgertest.AI("e", ledgertest.Day, 200)))() })
	rec1 := queue(func() (int64, error) { return none(l.Record(ctx, ledgertest.AI("k", ledgertest.Day, 50)))() })
	rec2 := queue(func() (int64, error) { return none(l.Record(ctx, ledgertest.AI("k", ledgertest.Day, 50)))() })
	r1 := queue(reserve("r1", 600))
	r2 := queue(reserve("r2", 600))
	r3 := queue(reserve("r3", 1))
	again := queue(reserve("r1", 999))
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	if r := <-blocked; r.err != nil {
		t.Fatalf("release: %v", r.err)
	}
	if r := <-badSettle; !errors.Is(r.err, billing.ErrInvalid) {
		t.Errorf("settle of another account's hold: %v, want invalid", r.err)
	}
	for name, ch := range map[string]chan result{"settle": settle, "record": rec1, "record again": rec2} {
		if r := <-ch; r.err != nil {
			t.Errorf("%s: %v", name, r.err)
		}
	}
	// After the settle (used 300) and the record counted once (350): 650 remain.
	for _, c := range []struct {
		name string
		ch   chan result
		want int64
	}{{"r1", r1, 600}, {"r2", r2, 50}, {"r1 again", again, 600}} {
		if r := <-c.ch; r.err != nil || r.granted != c.want {
			t.Errorf("reserve %s: granted %d, %v; want %d", c.name, r.granted, r.err, c.want)
		}
	}
	if r := <-r3; !errors.Is(r.err, billing.ErrBudgetExceeded) {
		t.Errorf("reserve r3 over the limit: %d, %v; want budget exceeded", r.granted, r.err)
	}
	ledgertest.AssertUsage(t, l, ledgertest.Day, billing.Usage{AIMicros: 350, HeldAIMicros: 650})
	ledgertest.AssertUsage(t, l, other, billing.Usage{HeldAIMicros: 50})
	after := l.Stats()
	if b, w := after.WriteBatches-before.WriteBatches, after.Writes-before.Writes; b != 2 || w != 9 {
		t.Errorf("%d write batches of %d calls, want 2 of 9 (the blocked release, then the rest; not the reservation given up)", b, w)
	}
}

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10 s")
		}
		time.Sleep(time.Millisecond)
	}
}
