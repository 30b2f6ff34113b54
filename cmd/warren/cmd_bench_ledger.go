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
	"github.com/warren-mesh/warren/cmd/warren/internal/help"
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

// ledgerBench is one run of warren bench-ledger: its flags, the ledger, and what the spenders counted.
type ledgerBench struct {
	dsn, cpuprofile       string
	spenders, accounts    int
	dur                   time.Duration
	rate                  float64
	limit                 int64
	l                     benchLedger
	backend               string
	pool                  *pgxpool.Pool // nil on SQLite
	run                   string        // this run's issuer suffix
	start, deadline       time.Time
	interval              time.Duration  // with -rate: between one spender's cycles
	settled               []atomic.Int64 // by account
	done, refused, failed atomic.Int64
	mu                    sync.Mutex
	admits, reserves      []time.Duration // guarded by mu
}

func (b *ledgerBench) register(fs *flag.FlagSet) {
	fs.StringVar(&b.dsn, "dsn", "", "PostgreSQL/CockroachDB DSN (default: a temporary SQLite file)")
	fs.IntVar(&b.spenders, "spenders", 200, "concurrent spenders")
	fs.IntVar(&b.accounts, "accounts", 10, "accounts the spenders share")
	fs.DurationVar(&b.dur, "duration", 10*time.Second, "how long to run")
	fs.Float64Var(&b.rate, "rate", 0, "cycles per second to start, over all spenders (0: each spender as fast as it can)")
	fs.StringVar(&b.cpuprofile, "cpuprofile", "", "write a CPU profile of the run to this file")
	fs.Int64Var(&b.limit, "limit", 1<<50,
		"each account's AI limit in microdollars (the default is never reached; a small one is, and the spenders are then refused)")
}

// runBenchLedger drives one ledger with N spenders, each looping admit → reserve → settle (or release) for
// a while against a few accounts, and reports admission-check latency and reservation throughput. After
// the run it checks every account against its limit: used must equal what the spenders settled, nothing
// may stay held, and used never exceeds the limit (overspend).
func runBenchLedger(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench-ledger", flag.ContinueOnError)
	fs.SetOutput(stderr)
	help.Set(fs, "usage: warren bench-ledger [flags]\n\nMeasures the ledger's reservations under load.")
	var b ledgerBench
	b.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	closeLedger, err := b.open(ctx)
	if err != nil {
		return err
	}
	defer closeLedger()
	b.run = fmt.Sprintf("%d", time.Now().UnixNano())
	b.settled = make([]atomic.Int64, b.accounts)
	var before cockroach.Stats
	if st, ok := b.l.(ledgerStats); ok {
		before = st.Stats()
	}
	stopProfile, err := b.profile()
	if err != nil {
		return err
	}
	defer stopProfile()
	elapsed := b.spend(ctx)
	fmt.Fprintf(stdout, "warren bench-ledger: %s, %d spenders on %d accounts, %s\n\n", b.backend, b.spenders, b.accounts, elapsed.Round(time.Millisecond))
	if len(b.admits) == 0 {
		return fmt.Errorf("no reservation completed (%d refused, %d failed)", b.refused.Load(), b.failed.Load())
	}
	b.report(stdout, elapsed, before)
	return b.check(ctx, stdout)
}

// open opens the ledger: -dsn's, else a temporary SQLite file; closeLedger closes it.
func (b *ledgerBench) open(ctx context.Context) (closeLedger func(), err error) {
	if b.dsn != "" {
		pool, err := cockroachdb.Open(ctx, b.dsn)
		if err != nil {
			return nil, err
		}
		l, err := cockroach.New(ctx, cockroach.Config{Pool: pool})
		if err != nil {
			pool.Close()
			return nil, err
		}
		b.l, b.backend, b.pool = l, "postgres/cockroach", pool
		return pool.Close, nil
	}
	dir, err := os.MkdirTemp("", "warren-bench-ledger-")
	if err != nil {
		return nil, err
	}
	l, err := billingsqlite.New(ctx, billingsqlite.Config{Path: filepath.Join(dir, "ledger.db")})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	b.l, b.backend = l, "sqlite"
	return func() { l.Close(); os.RemoveAll(dir) }, nil
}

// profile starts -cpuprofile's CPU profile; stop stops it.
func (b *ledgerBench) profile() (stop func(), err error) {
	if b.cpuprofile == "" {
		return func() {}, nil
	}
	f, err := os.Create(b.cpuprofile)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

func (b *ledgerBench) account(i int) billing.Account {
	return billing.Account{Issuer: "bench-" + b.run, User: fmt.Sprint("u", i%b.accounts), Window: billing.Lifetime}
}

// spend runs the spenders until the deadline and returns how long they took. The spenders stop starting
// cycles at the deadline and finish the one they are in (ctx is not cut), so that what they settled is
// known exactly.
func (b *ledgerBench) spend(ctx context.Context) time.Duration {
	// With -rate, spender i starts a cycle every interval, the spenders' starts spread over it.
	if b.rate > 0 {
		b.interval = time.Duration(float64(b.spenders) / b.rate * float64(time.Second))
	}
	b.start = time.Now()
	b.deadline = b.start.Add(b.dur)
	var wg sync.WaitGroup
	for i := range b.spenders {
		wg.Go(func() { b.spender(ctx, i) })
	}
	wg.Wait()
	return time.Since(b.start)
}

// spender is spender i's loop: admit, reserve, then settle (or, one time in ten, release).
func (b *ledgerBench) spender(ctx context.Context, i int) {
	rng := rand.New(rand.NewPCG(uint64(i), 7))
	acct := b.account(i)
	var la, lr []time.Duration
	next := b.start.Add(b.interval * time.Duration(i) / time.Duration(b.spenders))
	for n := 0; ctx.Err() == nil; n++ {
		if b.interval > 0 {
			if d := time.Until(next); d > 0 {
				time.Sleep(d)
			}
			next = later(next.Add(b.interval), time.Now())
		}
		if !time.Now().Before(b.deadline) {
			break
		}
		admit, reserve, err := b.cycle(ctx, rng, acct, fmt.Sprintf("bench-%s-%d-%d", b.run, i, n), i)
		if err != nil {
			b.fail(err)
			continue
		}
		b.done.Add(1)
		la, lr = append(la, admit), append(lr, reserve)
	}
	b.mu.Lock()
	b.admits, b.reserves = append(b.admits, la...), append(b.reserves, lr...)
	b.mu.Unlock()
}

// cycle is one admit → reserve → settle or release of reservation id on acct; it answers the admission's
// and the reservation's latencies.
func (b *ledgerBench) cycle(ctx context.Context, rng *rand.Rand, acct billing.Account, id string, i int) (admit, reserve time.Duration, err error) {
	t0 := time.Now()
	if err := billing.Admit(ctx, b.l, acct, billing.Budget{AIMicros: b.limit, ComputeSeconds: -1}); err != nil {
		return 0, 0, err
	}
	t1 := time.Now()
	want := 1000 + rng.Int64N(100_000)
	granted, err := b.l.Reserve(ctx, id, acct, b.limit, want, time.Minute)
	if err != nil {
		return 0, 0, err
	}
	t2 := time.Now()
	if rng.IntN(10) == 0 {
		return t1.Sub(t0), t2.Sub(t1), b.l.Release(ctx, id)
	}
	spent := rng.Int64N(granted + 1)
	if err := b.l.Settle(ctx, id, billing.UsageEvent{Key: "ev/" + id, Account: acct, Kind: billing.KindAI,
		Model: "bench", AIMicros: spent}); err != nil {
		return 0, 0, err
	}
	b.settled[i%b.accounts].Add(spent)
	return t1.Sub(t0), t2.Sub(t1), nil
}

func (b *ledgerBench) fail(err error) {
	if errors.Is(err, billing.ErrBudgetExceeded) {
		b.refused.Add(1)
	} else {
		b.failed.Add(1)
	}
}

// report prints the throughput, the latencies, the ledger's retries and batches and the pool's waits.
func (b *ledgerBench) report(stdout io.Writer, elapsed time.Duration, before cockroach.Stats) {
	fmt.Fprintf(stdout, "%-44s %.0f/s (%d completed, %d refused, %d failed)\n", "reserve + settle cycles",
		float64(b.done.Load())/elapsed.Seconds(), b.done.Load(), b.refused.Load(), b.failed.Load())
	report(stdout, "admission check (usage read)", b.admits)
	report(stdout, "reserve (conditional hold)", b.reserves)
	if st, ok := b.l.(ledgerStats); ok {
		s := st.Stats()
		wb, w := s.WriteBatches-before.WriteBatches, s.Writes-before.Writes
		rb, r := s.ReadBatches-before.ReadBatches, s.Reads-before.Reads
		fmt.Fprintf(stdout, "%-44s %d retries; %d write transactions (%.1f calls each), %d usage reads (%.1f each)\n",
			"ledger", s.Retries-before.Retries, wb, float64(w)/float64(max(wb, 1)), rb, float64(r)/float64(max(rb, 1)))
	}
	if b.pool != nil {
		ps := b.pool.Stat()
		wait := ps.AcquireDuration() / time.Duration(max(ps.AcquireCount(), 1))
		fmt.Fprintf(stdout, "%-44s %d acquires, %d waited for a connection (%s on average), %d connections at most\n",
			"pool", ps.AcquireCount(), ps.EmptyAcquireCount(), wait.Round(time.Microsecond), ps.MaxConns())
	}
}

// check fails unless every account's used equals what was settled, within its limit, nothing held.
func (b *ledgerBench) check(ctx context.Context, stdout io.Writer) error {
	var over []string
	for a := range b.accounts {
		acct := b.account(a)
		u, err := b.l.Usage(ctx, acct)
		if err != nil {
			return err
		}
		if u.AIMicros > b.limit || u.AIMicros != b.settled[a].Load() || u.HeldAIMicros != 0 {
			over = append(over, fmt.Sprintf("%s: used %d (settled %d, limit %d), held %d",
				acct, u.AIMicros, b.settled[a].Load(), b.limit, u.HeldAIMicros))
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
