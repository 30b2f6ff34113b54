package cockroach_test

import (
	"context"
	"errors"
	"fmt"
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

	before := l.Stats()
	release, blocked := holdWriteLane(t, l, dsn)

	type result struct {
		granted int64
		err     error
	}
	queued := 0
	// queue starts f and waits until it is queued behind the ones before it.
	queue := func(f func() (int64, error)) chan result {
		t.Helper()
		ch := make(chan result, 1)
		go func() {
			g, err := f()
			ch <- result{g, err}
		}()
		queued++
		waitFor(t, func() bool { return l.PendingWrites() == queued })
		return ch
	}
	reserve := func(id string, want int64) func() (int64, error) {
		return func() (int64, error) { return l.Reserve(ctx, id, ledgertest.Day, 1000, want, time.Minute) }
	}
	none := func(err error) func() (int64, error) { return func() (int64, error) { return 0, err } }

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
	release()
	if err := <-blocked; err != nil {
		t.Fatalf("release: %v", err)
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

// A call the database refuses for what it carries (PostgreSQL stores no NUL in text; the model name of a
// usage event is the agent's) fails alone: its batch is run again call by call, and the calls queued with
// it succeed. The same for a usage read of such an account among others.
func TestBatchIsolatesRefusedCall(t *testing.T) {
	ctx := context.Background()
	dsn := testenv.PostgreSQL(t)
	l := open(t, dsn, cockroach.Config{})
	other := ledgertest.Day
	other.User = "other-user"
	bad := ledgertest.AI("bad", ledgertest.Day, 7)
	bad.Model = "model\x00"

	release, blocked := holdWriteLane(t, l, dsn)
	results := make([]chan error, 3)
	for i, ev := range []billing.UsageEvent{ledgertest.AI("good", ledgertest.Day, 10), bad, ledgertest.AI("good-other", other, 20)} {
		results[i] = make(chan error, 1)
		go func() { results[i] <- l.Record(ctx, ev) }()
		waitFor(t, func() bool { return l.PendingWrites() == i+1 })
	}
	release()
	if err := <-blocked; err != nil {
		t.Fatalf("release: %v", err)
	}
	if err := <-results[1]; err == nil {
		t.Error("an event with a NUL in its model was recorded")
	}
	for _, i := range []int{0, 2} {
		if err := <-results[i]; err != nil {
			t.Errorf("an event batched with a refused one: %v", err)
		}
	}
	ledgertest.AssertUsage(t, l, ledgertest.Day, billing.Usage{AIMicros: 10})
	ledgertest.AssertUsage(t, l, other, billing.Usage{AIMicros: 20})

	// Reads: both read lanes held by reads that wait for a lock on the totals, a refused account and a good
	// one queue for one batch.
	release, blockedReads := holdLanes(t, dsn, "usage_totals IN ACCESS EXCLUSIVE MODE", 2, func() error {
		_, err := l.Usage(ctx, ledgertest.Day)
		return err
	})
	badAcct := ledgertest.Day
	badAcct.User = "user\x00"
	badRead, goodRead := make(chan error, 1), make(chan error, 1)
	go func() { _, err := l.Usage(ctx, badAcct); badRead <- err }()
	waitFor(t, func() bool { return l.PendingReads() == 1 })
	go func() {
		u, err := l.Usage(ctx, other)
		if err == nil && u.AIMicros != 20 {
			err = fmt.Errorf("used %d, want 20", u.AIMicros)
		}
		goodRead <- err
	}()
	waitFor(t, func() bool { return l.PendingReads() == 2 })
	release()
	for range 2 {
		if err := <-blockedReads; err != nil {
			t.Errorf("usage read: %v", err)
		}
	}
	if err := <-badRead; err == nil {
		t.Error("usage of an account with a NUL in its user was read")
	}
	if err := <-goodRead; err != nil {
		t.Errorf("usage read batched with a refused one: %v", err)
	}
}

// holdWriteLane holds l's write lane: a Release that blocks on a table lock until release is called, so
// that calls made meanwhile queue for the next batch, in the order they are made. blocked answers the
// Release.
func holdWriteLane(t *testing.T, l *cockroach.Ledger, dsn string) (release func(), blocked chan error) {
	t.Helper()
	return holdLanes(t, dsn, "holds IN SHARE MODE", 1, func() error { return l.Release(context.Background(), "no-such-hold") })
}

// holdLanes locks a table (lock: "table IN mode") in a transaction of its own, starts n calls of f and
// waits until the database has them all waiting for the lock; release ends the transaction, and done
// answers the calls.
func holdLanes(t *testing.T, dsn, lock string, n int, f func() error) (release func(), done chan error) {
	t.Helper()
	ctx := context.Background()
	admin := openPool(t, dsn)
	tx, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback(ctx) })
	if _, err := tx.Exec(ctx, `LOCK TABLE `+lock); err != nil {
		t.Fatal(err)
	}
	done = make(chan error, n)
	for range n {
		go func() { done <- f() }()
	}
	waitFor(t, func() bool {
		var waiting int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		return waiting == n
	})
	return func() {
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
	}, done
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
