package spool_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/billing/cockroach"
	"github.com/warren-mesh/warren/billing/ledgertest"
	"github.com/warren-mesh/warren/billing/spool"
	"github.com/warren-mesh/warren/internal/cockroachdb"
	"github.com/warren-mesh/warren/internal/testenv"
)

// docs/ARCHITECTURE.md#failure-behaviour, "database unreachable": the ledger's database (PostgreSQL, standing
// in for CockroachDB) is stopped while runners keep recording compute time and settling model calls through
// their spool, then started again. Once the replay has drained, every account's totals are exactly the sum of
// its events — nothing lost, nothing counted twice, although some events were redelivered and some writes
// were cut mid-commit by the shutdown — and no hold is left behind.
func TestLedgerOutageUnderLoad(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartPostgreSQL(t)
	pool, err := cockroachdb.Open(ctx, srv.CreateDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	ledger, err := cockroach.New(ctx, cockroach.Config{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	s := openSpool(t, filepath.Join(t.TempDir(), "spool"), ledger,
		spool.Options{MinBackoff: 20 * time.Millisecond, MaxBackoff: 250 * time.Millisecond, Timeout: 5 * time.Second})

	var accounts []billing.Account
	for i := range 4 {
		a := ledgertest.Day
		a.User = fmt.Sprintf("u%d", i)
		accounts = append(accounts, a)
	}
	var (
		mu     sync.Mutex
		want   = map[string]billing.Usage{}
		acked  atomic.Int64 // events whose Record or Settle returned nil
		failed atomic.Bool
		stop   = make(chan struct{})
		wg     sync.WaitGroup
	)
	const workers = 12
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			tick := time.NewTicker(5 * time.Millisecond) // a runner's pace, not a wait
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				acct := accounts[(w+i)%len(accounts)]
				key := fmt.Sprintf("w%d/%d", w, i)
				var (
					ev  billing.UsageEvent
					err error
				)
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				if i%2 == 0 {
					// A model call: hold its worst case, settle its cost. While the ledger is down the
					// Reserve fails — or fails to say that it committed — and the settle names a hold that
					// may or may not exist: the replay records the event once either way.
					hold := "hold/" + key
					if _, rerr := s.Reserve(cctx, hold, acct, -1, 2000, time.Hour); rerr != nil && !errors.Is(rerr, billing.ErrUnavailable) {
						err = rerr
					} else {
						ev = ledgertest.AI(key, acct, 1+rng.Int64N(1000))
						err = s.Settle(cctx, hold, ev)
					}
				} else {
					ev = ledgertest.Compute(key, acct, 1+rng.Int64N(60))
					err = s.Record(cctx, ev)
					if err == nil && i%3 == 0 {
						err = s.Record(cctx, ev) // a redelivery counts once
					}
				}
				cancel()
				if err != nil {
					t.Errorf("%s: %v", key, err)
					failed.Store(true)
					return
				}
				mu.Lock()
				u := want[acct.User]
				u.AIMicros += ev.AIMicros
				u.ComputeSeconds += ev.ComputeSeconds
				want[acct.User] = u
				mu.Unlock()
				acked.Add(1)
			}
		})
	}
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()
	waitFor(t, &failed, "events recorded before the outage", func() bool { return acked.Load() >= 200 })

	srv.Stop(t)
	before := acked.Load()
	maxDepth := 0
	waitFor(t, &failed, "events spooled during the outage", func() bool {
		maxDepth = max(maxDepth, s.Depth())
		return maxDepth >= 300 && acked.Load() >= before+300
	})
	srv.Start(t)
	t.Logf("%d events acknowledged before the outage, %d during it; %d spooled", before, acked.Load()-before, s.Depth())

	// The backlog drains while the load goes on.
	after := acked.Load()
	waitFor(t, &failed, "the spool to drain under load", func() bool { return s.Depth() == 0 && acked.Load() >= after+300 })
	close(stop)
	wg.Wait()
	flush(t, s)

	var total int64
	for _, a := range accounts {
		ledgertest.AssertUsage(t, ledger, a, want[a.User])
		total += want[a.User].AIMicros
	}
	if total == 0 {
		t.Fatal("no model usage recorded")
	}
	t.Logf("%d events in all", acked.Load())
}

// waitFor polls cond until it holds, failing the test after 30 seconds or when a worker failed.
func waitFor(t testing.TB, failed *atomic.Bool, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if failed.Load() {
			t.Fatalf("a worker failed while waiting for %s", what)
		}
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
