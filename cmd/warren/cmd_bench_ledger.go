package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/billing/cockroach"
	billingsqlite "github.com/warren-mesh/warren/billing/sqlite"
	"github.com/warren-mesh/warren/internal/cockroachdb"
)

func init() {
	register("bench-ledger", "load tool: admission latency and reservations/s with concurrent spenders (SQLite or -dsn PostgreSQL/CockroachDB)", runBenchLedger)
}

type benchLedger interface {
	billing.Ledger
	billing.Reserver
}

// runBenchLedger drives one ledger with N spenders, each looping admit → reserve → settle (or release) for
// a while against a few accounts, and reports admission-check latency and reservation throughput.
func runBenchLedger(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench-ledger", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dsn := fs.String("dsn", "", "PostgreSQL/CockroachDB DSN (default: a temporary SQLite file)")
	spenders := fs.Int("spenders", 200, "concurrent spenders")
	accounts := fs.Int("accounts", 10, "accounts the spenders share")
	dur := fs.Duration("duration", 10*time.Second, "how long to run")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var (
		l       benchLedger
		backend string
	)
	if *dsn != "" {
		pool, err := cockroachdb.Open(ctx, *dsn)
		if err != nil {
			return err
		}
		defer pool.Close()
		cl, err := cockroach.New(ctx, cockroach.Config{Pool: pool})
		if err != nil {
			return err
		}
		l, backend = cl, "postgres/cockroach"
	} else {
		dir, err := os.MkdirTemp("", "warren-bench-ledger-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		sl, err := billingsqlite.New(ctx, billingsqlite.Config{Path: filepath.Join(dir, "ledger.db")})
		if err != nil {
			return err
		}
		defer sl.Close()
		l, backend = sl, "sqlite"
	}
	run := fmt.Sprintf("%d", time.Now().UnixNano())
	const limit = int64(1) << 50 // spenders must not run dry during the measurement
	ctx, cancel := context.WithTimeout(ctx, *dur)
	defer cancel()
	var (
		mu       sync.Mutex
		admits   []time.Duration
		reserves []time.Duration
		done     atomic.Int64
		failed   atomic.Int64
		wg       sync.WaitGroup
	)
	start := time.Now()
	for i := range *spenders {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			acct := billing.Account{Issuer: "bench-" + run, User: fmt.Sprint("u", i%*accounts), Window: billing.Lifetime}
			var la, lr []time.Duration
			for n := 0; ctx.Err() == nil; n++ {
				t0 := time.Now()
				if err := billing.Admit(ctx, l, acct, billing.Budget{AIMicros: limit, ComputeSeconds: -1}); err != nil {
					if ctx.Err() == nil {
						failed.Add(1)
					}
					continue
				}
				t1 := time.Now()
				id := fmt.Sprintf("bench-%s-%d-%d", run, i, n)
				want := 1000 + rng.Int64N(100_000)
				granted, err := l.Reserve(ctx, id, acct, limit, want, time.Minute)
				if err != nil {
					if ctx.Err() == nil {
						failed.Add(1)
					}
					continue
				}
				t2 := time.Now()
				if rng.IntN(10) == 0 {
					err = l.Release(ctx, id)
				} else {
					err = l.Settle(ctx, id, billing.UsageEvent{Key: "ev/" + id, Account: acct, Kind: billing.KindAI,
						Model: "bench", AIMicros: rng.Int64N(granted + 1)})
				}
				if err != nil && !errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
					failed.Add(1)
					continue
				}
				done.Add(1)
				la, lr = append(la, t1.Sub(t0)), append(lr, t2.Sub(t1))
			}
			mu.Lock()
			admits, reserves = append(admits, la...), append(reserves, lr...)
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	fmt.Fprintf(stdout, "warren bench-ledger: %s, %d spenders on %d accounts, %s\n\n", backend, *spenders, *accounts, elapsed.Round(time.Millisecond))
	if len(admits) == 0 {
		return fmt.Errorf("no reservation completed (%d failures)", failed.Load())
	}
	fmt.Fprintf(stdout, "%-44s %.0f/s (%d completed, %d failed)\n", "reserve + settle cycles", float64(done.Load())/elapsed.Seconds(), done.Load(), failed.Load())
	report(stdout, "admission check (usage read)", admits)
	report(stdout, "reserve (conditional hold)", reserves)
	return nil
}
