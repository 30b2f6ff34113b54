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
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

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

// ledgerStats is a ledger that counts its retries and batches (billing/cockroach).
type ledgerStats interface{ Stats() cockroach.Stats }

// runBenchLedger drives one ledger with N spenders, each looping admit → reserve → settle (or release) for
// a while against a few accounts, and reports admission-check latency and reservation throughput. After
// the run it checks every account against its limit: used must equal what the spenders settled, nothing
// may stay held, and used never exceeds the limit (overspend).
func runBenchLedger(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench-ledger", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dsn := fs.String("dsn", "", "PostgreSQL/CockroachDB DSN (default: a temporary SQLite file)")
	spenders := fs.Int("spenders", 200, "concurrent spenders")
	accounts := fs.Int("accounts", 10, "accounts the spenders share")
	dur := fs.Duration("duration", 10*time.Second, "how long to run")
	rate := fs.Float64("rate", 0, "cycles per second to start, over all spenders (0: each spender as fast as it can)")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the run to this file")
	limit := fs.Int64("limit", 1<<50,
		"each account's AI limit in microdollars (the default is never reached; a small one is, and the spenders are then refused)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var (
		l       benchLedger
		backend string
		pool    *pgxpool.Pool
	)
	if *dsn != "" {
		var err error
		if pool, err = cockroachdb.Open(ctx, *dsn); err != nil {
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
	acctOf := func(i int) billing.Account {
		return billing.Account{Issuer: "bench-" + run, User: fmt.Sprint("u", i%*accounts), Window: billing.Lifetime}
	}
	var (
		mu       sync.Mutex
		admits   []time.Duration
		reserves []time.Duration
		settled  = make([]atomic.Int64, *accounts) // by account
		done     atomic.Int64
		refused  atomic.Int64
		failed   atomic.Int64
		wg       sync.WaitGroup
	)
	var before cockroach.Stats
	if st, ok := l.(ledgerStats); ok {
		before = st.Stats()
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	// With -rate, spender i starts a cycle every interval, the spenders' starts spread over it.
	var interval time.Duration
	if *rate > 0 {
		interval = time.Duration(float64(*spenders) / *rate * float64(time.Second))
	}
	// The spenders stop starting cycles at the deadline and finish the one they are in (ctx is not cut), so
	// that what they settled is known exactly.
	start := time.Now()
	deadline := start.Add(*dur)
	for i := range *spenders {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			acct := acctOf(i)
			var la, lr []time.Duration
			fail := func(err error) {
				if errors.Is(err, billing.ErrBudgetExceeded) {
					refused.Add(1)
				} else {
					failed.Add(1)
				}
			}
			next := start.Add(interval * time.Duration(i) / time.Duration(*spenders))
			for n := 0; ctx.Err() == nil; n++ {
				if interval > 0 {
					if d := time.Until(next); d > 0 {
						time.Sleep(d)
					}
					next = later(next.Add(interval), time.Now())
				}
				if !time.Now().Before(deadline) {
					break
				}
				t0 := time.Now()
				if err := billing.Admit(ctx, l, acct, billing.Budget{AIMicros: *limit, ComputeSeconds: -1}); err != nil {
					fail(err)
					continue
				}
				t1 := time.Now()
				id := fmt.Sprintf("bench-%s-%d-%d", run, i, n)
				want := 1000 + rng.Int64N(100_000)
				granted, err := l.Reserve(ctx, id, acct, *limit, want, time.Minute)
				if err != nil {
					fail(err)
					continue
				}
				t2 := time.Now()
				if rng.IntN(10) == 0 {
					err = l.Release(ctx, id)
				} else {
					spent := rng.Int64N(granted + 1)
					if err = l.Settle(ctx, id, billing.UsageEvent{Key: "ev/" + id, Account: acct, Kind: billing.KindAI,
						Model: "bench", AIMicros: spent}); err == nil {
						settled[i%*accounts].Add(spent)
					}
				}
				if err != nil {
					fail(err)
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
		return fmt.Errorf("no reservation completed (%d refused, %d failed)", refused.Load(), failed.Load())
	}
	fmt.Fprintf(stdout, "%-44s %.0f/s (%d completed, %d refused, %d failed)\n", "reserve + settle cycles",
		float64(done.Load())/elapsed.Seconds(), done.Load(), refused.Load(), failed.Load())
	report(stdout, "admission check (usage read)", admits)
	report(stdout, "reserve (conditional hold)", reserves)
	if st, ok := l.(ledgerStats); ok {
		s := st.Stats()
		wb, w := s.WriteBatches-before.WriteBatches, s.Writes-before.Writes
		rb, r := s.ReadBatches-before.ReadBatches, s.Reads-before.Reads
		fmt.Fprintf(stdout, "%-44s %d retries; %d write transactions (%.1f calls each), %d usage reads (%.1f each)\n",
			"ledger", s.Retries-before.Retries, wb, float64(w)/float64(max(wb, 1)), rb, float64(r)/float64(max(rb, 1)))
	}
	if pool != nil {
		ps := pool.Stat()
		wait := ps.AcquireDuration() / time.Duration(max(ps.AcquireCount(), 1))
		fmt.Fprintf(stdout, "%-44s %d acquires, %d waited for a connection (%s on average), %d connections at most\n",
			"pool", ps.AcquireCount(), ps.EmptyAcquireCount(), wait.Round(time.Microsecond), ps.MaxConns())
	}
	var over []string
	for a := range *accounts {
		acct := acctOf(a)
		u, err := l.Usage(ctx, acct)
		if err != nil {
			return err
		}
		if u.AIMicros > *limit || u.AIMicros != settled[a].Load() || u.HeldAIMicros != 0 {
			over = append(over, fmt.Sprintf("%s: used %d (settled %d, limit %d), held %d",
				acct, u.AIMicros, settled[a].Load(), *limit, u.HeldAIMicros))
		}
	}
	if len(over) > 0 {
		return fmt.Errorf("ledger check failed: %s", strings.Join(over, "; "))
	}
	fmt.Fprintf(stdout, "%-44s 0 overspend: each account's used equals what was settled, within its limit, nothing held\n",
		"check")
	return nil
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
