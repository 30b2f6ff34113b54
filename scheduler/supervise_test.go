package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/warren-mesh/warren/billing"
	billingsqlite "github.com/warren-mesh/warren/billing/sqlite"
	"github.com/warren-mesh/warren/internal/registry"
	"github.com/warren-mesh/warren/internal/registry/mem"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/scheduler"
	"github.com/warren-mesh/warren/scheduler/sqlite"
)

// The scheduler core's tests run in a synctest bubble: time is the bubble's (it starts at midnight, so the
// first bucket starts with the sandbox) and only moves when every goroutine waits, so each test says to
// the second what must be charged. The ledger and the placements are the real SQLite adapters; the driver
// is memDriver, whose sandboxes live in memory (the real drivers pass scheduler/drivertest).

// memDriver is a Driver and Adopter whose sandboxes are in-memory. With reg set, a runner registers and
// deregisters itself, as production runners do (Config.RunnerRegisters).
type memDriver struct {
	reg registry.Registry

	mu    sync.Mutex
	n     int
	boxes map[string]*memBox
	stops []string
}

type memBox struct {
	entry  registry.Entry
	exited chan struct{}
	once   sync.Once
}

func newMemDriver(reg registry.Registry) *memDriver {
	return &memDriver{reg: reg, boxes: map[string]*memBox{}}
}

func (d *memDriver) Start(ctx context.Context, spec scheduler.Spec) (scheduler.Sandbox, error) {
	d.mu.Lock()
	d.n++
	alloc := fmt.Sprintf("alloc-%d", d.n)
	b := &memBox{exited: make(chan struct{}), entry: registry.Entry{Issuer: spec.Issuer, User: spec.User, Epoch: spec.Epoch,
		Region: spec.Region, Alloc: alloc, Addr: "127.0.0.1:1", Key: "k", Since: time.Now()}}
	d.boxes[alloc] = b
	d.mu.Unlock()
	if d.reg != nil {
		if err := d.reg.Register(ctx, b.entry); err != nil {
			return scheduler.Sandbox{}, err
		}
	}
	return scheduler.Sandbox{Alloc: alloc, Addr: b.entry.Addr, Key: b.entry.Key, Exited: b.exited}, nil
}

func (d *memDriver) Stop(ctx context.Context, alloc string) error {
	d.mu.Lock()
	d.stops = append(d.stops, alloc)
	d.mu.Unlock()
	d.end(alloc)
	return nil
}

func (d *memDriver) Adopt(ctx context.Context, spec scheduler.Spec, alloc string) (scheduler.Sandbox, error) {
	d.mu.Lock()
	b := d.boxes[alloc]
	d.mu.Unlock()
	if b == nil {
		return scheduler.Sandbox{}, scheduler.ErrNotFound
	}
	return scheduler.Sandbox{Alloc: alloc, Exited: b.exited}, nil
}

// end makes alloc's runner exit (a crash, a sleep, a stop).
func (d *memDriver) end(alloc string) {
	d.mu.Lock()
	b := d.boxes[alloc]
	d.mu.Unlock()
	if b == nil {
		return
	}
	b.once.Do(func() {
		if d.reg != nil {
			_ = d.reg.Deregister(context.Background(), b.entry.Issuer, b.entry.User, b.entry.Epoch)
		}
		close(b.exited)
	})
}

func (d *memDriver) stopped() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.stops...)
}

// failingLedger is the real ledger whose writes fail while down is set (an outage).
type failingLedger struct {
	billing.Ledger
	down atomic.Bool
}

func (l *failingLedger) Record(ctx context.Context, ev billing.UsageEvent) error {
	if l.down.Load() {
		return errors.New("ledger unreachable")
	}
	return l.Ledger.Record(ctx, ev)
}

// countingPlacements counts the meters stored through the real placements.
type countingPlacements struct {
	scheduler.Placements
	setMeters atomic.Int64
}

func (p *countingPlacements) SetMeter(ctx context.Context, issuer, user string, epoch int64, m scheduler.Meter) error {
	p.setMeters.Add(1)
	return p.Placements.SetMeter(ctx, issuer, user, epoch, m)
}

// core is one scheduler's world: real ledger and placements in a temporary directory, a registry, a driver.
type core struct {
	t          *testing.T
	ledger     *billingsqlite.Ledger
	placements *countingPlacements
	reg        *mem.Registry
	driver     *memDriver
}

func newCore(t *testing.T, runnersRegister bool) *core {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	ledger, err := billingsqlite.New(ctx, billingsqlite.Config{Path: filepath.Join(dir, "ledger.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ledger.Close() })
	p, err := sqlite.New(ctx, sqlite.Config{Path: filepath.Join(dir, "placements.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	c := &core{t: t, ledger: ledger, placements: &countingPlacements{Placements: p}, reg: mem.New()}
	if runnersRegister {
		c.driver = newMemDriver(c.reg)
	} else {
		c.driver = newMemDriver(nil)
	}
	return c
}

// start starts a scheduler over c: cfg's zero fields are c's (region r1), metering in 10-second buckets.
func (c *core) start(cfg scheduler.Config) *scheduler.Scheduler {
	c.t.Helper()
	if cfg.Region == "" {
		cfg.Region = "r1"
	}
	if cfg.Placements == nil {
		cfg.Placements = c.placements
	}
	if cfg.Registry == nil {
		cfg.Registry = c.reg
	}
	if cfg.Driver == nil {
		cfg.Driver = c.driver
	}
	if cfg.Ledger == nil {
		cfg.Ledger = c.ledger
	}
	cfg.MeterInterval, cfg.StartTimeout = 10*time.Second, time.Minute
	s, err := scheduler.New(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// used is the compute seconds recorded for acct.
func (c *core) used(acct billing.Account) int64 {
	c.t.Helper()
	u, err := c.ledger.Usage(context.Background(), acct)
	if err != nil {
		c.t.Fatal(err)
	}
	return u.ComputeSeconds
}

func (c *core) placement(user string) scheduler.Placement {
	c.t.Helper()
	p, err := c.placements.Get(context.Background(), "iss", user)
	if err != nil {
		c.t.Fatal(err)
	}
	return p
}

func lifetime(user string) billing.Account {
	return billing.Account{Issuer: "iss", User: user, Window: billing.Lifetime}
}

func TestMeteringChargesWhatTheRunnerLived(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCore(t, false)
		s := c.start(scheduler.Config{})
		acct := lifetime("u")
		e, err := s.Ensure(t.Context(), scheduler.Request{Issuer: "iss", User: "u", Account: acct, ComputeLimit: -1})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(35 * time.Second)
		synctest.Wait()
		if got := c.used(acct); got != 30 {
			t.Fatalf("after 35 s, %d compute seconds recorded, want the 3 buckets that are over (30)", got)
		}
		c.driver.end(e.Alloc)
		synctest.Wait()
		if got := c.used(acct); got != 35 {
			t.Fatalf("after the exit at 35 s, %d compute seconds recorded, want 35", got)
		}
		if p := c.placement("u"); p.State != scheduler.StateAsleep {
			t.Errorf("placement after the exit: %s, want asleep", p.State)
		}
		if _, err := c.reg.Lookup(t.Context(), "iss", "u"); !errors.Is(err, registry.ErrNotFound) {
			t.Errorf("registry after the exit: %v, want not found", err)
		}
		if n := s.Live(); n != 0 {
			t.Errorf("%d sandboxes supervised after the exit", n)
		}
	})
}

func TestMeteringSplitsAtTheWindowBoundary(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCore(t, false)
		s := c.start(scheduler.Config{})
		// Hour windows rolling from an anchor 59m55s ago: the window changes 5 s into the first bucket.
		anchor := time.Now().Add(-time.Hour + 5*time.Second)
		first := billing.Account{Issuer: "iss", User: "u", Window: billing.Hour, WindowStart: anchor}
		e, err := s.Ensure(t.Context(), scheduler.Request{Issuer: "iss", User: "u", Account: first, Anchor: anchor, ComputeLimit: -1})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Second)
		c.driver.end(e.Alloc)
		synctest.Wait()
		second := first
		second.WindowStart = anchor.Add(time.Hour)
		if a, b := c.used(first), c.used(second); a != 5 || b != 15 {
			t.Fatalf("20 s across a window boundary at 5 s charged %d + %d, want 5 + 15", a, b)
		}
	})
}

func TestMeteringStopsASpentBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCore(t, false)
		s := c.start(scheduler.Config{})
		acct := lifetime("u")
		e, err := s.Ensure(t.Context(), scheduler.Request{Issuer: "iss", User: "u", Account: acct, ComputeLimit: 20})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if got := c.driver.stopped(); len(got) == 0 || got[0] != e.Alloc {
			t.Fatalf("stops: %v, want %s stopped for its spent budget", got, e.Alloc)
		}
		if got := c.used(acct); got != 20 {
			t.Fatalf("%d compute seconds recorded for a budget of 20 spent at 20 s", got)
		}
		if p := c.placement("u"); p.State != scheduler.StateAsleep {
			t.Errorf("placement after the budget stop: %s, want asleep", p.State)
		}
	})
}

func TestMeteringRetriesThroughALedgerOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCore(t, false)
		ledger := &failingLedger{Ledger: c.ledger}
		ledger.down.Store(true)
		s := c.start(scheduler.Config{Ledger: ledger})
		acct := lifetime("u")
		e, err := s.Ensure(t.Context(), scheduler.Request{Issuer: "iss", User: "u", Account: acct, ComputeLimit: -1})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(25 * time.Second)
		synctest.Wait()
		if got := c.used(acct); got != 0 {
			t.Fatalf("%d compute seconds recorded while the ledger was down", got)
		}
		ledger.down.Store(false)
		time.Sleep(10 * time.Second) // the tick at 30 s records the backlog: three buckets
		synctest.Wait()
		if got := c.used(acct); got != 30 {
			t.Fatalf("after the outage, %d compute seconds recorded, want 30", got)
		}
		ledger.down.Store(true)
		time.Sleep(5 * time.Second)
		c.driver.end(e.Alloc) // exits at 40 s while the ledger is down: retried for a while
		time.Sleep(3 * time.Second)
		ledger.down.Store(false)
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if got := c.used(acct); got != 40 {
			t.Fatalf("after the exit at 40 s and a second outage, %d compute seconds recorded, want 40 (each once)", got)
		}
	})
}

func TestChargeStoresAChangedMeterOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCore(t, false)
		s := c.start(scheduler.Config{})
		req := scheduler.Request{Issuer: "iss", User: "u", Account: lifetime("u"), ComputeLimit: 100}
		if _, err := s.Ensure(t.Context(), req); err != nil {
			t.Fatal(err)
		}
		if n := c.placements.setMeters.Load(); n != 1 {
			t.Fatalf("a start stored %d meters, want 1", n)
		}
		if _, err := s.Ensure(t.Context(), req); err != nil {
			t.Fatal(err)
		}
		if n := c.placements.setMeters.Load(); n != 1 {
			t.Fatalf("an Ensure with the same account stored the meter again (%d stores)", n)
		}
		req.ComputeLimit = 200
		if _, err := s.Ensure(t.Context(), req); err != nil {
			t.Fatal(err)
		}
		if n := c.placements.setMeters.Load(); n != 2 {
			t.Fatalf("an Ensure with a new limit: %d stores, want 2", n)
		}
		if m := c.placement("u").Meter; m.Limit != 200 || m.Window != billing.Lifetime || m.Bucket != 10 {
			t.Fatalf("stored meter %+v, want the newest limit (200) in 10 s buckets", m)
		}
	})
}

// A scheduler that closes leaves its runners serving (production); its successor adopts them and meters
// the rest, the time no scheduler ran included, each bucket once.
func TestAdoptionMetersEachBucketOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCore(t, true)
		first := c.start(scheduler.Config{RunnerRegisters: true})
		acct := lifetime("u")
		e, err := first.Ensure(t.Context(), scheduler.Request{Issuer: "iss", User: "u", Account: acct, ComputeLimit: -1})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(25 * time.Second)
		if err := first.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		if got := c.used(acct); got != 20 {
			t.Fatalf("the first scheduler recorded %d s before closing at 25 s, want 20", got)
		}
		if len(c.driver.stopped()) != 0 {
			t.Fatalf("a closing production scheduler stopped its runner: %v", c.driver.stopped())
		}
		time.Sleep(10 * time.Second) // no scheduler runs
		second := c.start(scheduler.Config{RunnerRegisters: true})
		if n, err := second.Adopt(t.Context()); err != nil || n != 1 {
			t.Fatalf("Adopt = %d, %v; want the one runner", n, err)
		}
		time.Sleep(10 * time.Second)
		c.driver.end(e.Alloc) // exits at 45 s
		synctest.Wait()
		if got := c.used(acct); got != 45 {
			t.Fatalf("a runner that lived 45 s under two schedulers was charged %d s", got)
		}
		if p := c.placement("u"); p.State != scheduler.StateAsleep {
			t.Errorf("placement after the adopted runner exited: %s, want asleep", p.State)
		}
	})
}

// A region's lease keeps every other region from claiming its user while its runner lives; it is renewed
// as long as the runner is supervised.
func TestLeaseKeepsOtherRegionsOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCore(t, false)
		r1 := c.start(scheduler.Config{LeaseTTL: 30 * time.Second})
		if _, err := r1.Ensure(t.Context(), scheduler.Request{Issuer: "iss", User: "u"}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Minute) // ten lease lengths: only renewals keep it
		synctest.Wait()
		if p := c.placement("u"); !p.Lease.After(time.Now()) {
			t.Fatalf("lease %v lapsed at %v while the runner lives", p.Lease, time.Now())
		}
		other := newMemDriver(nil)
		r2 := c.start(scheduler.Config{Region: "r2", Registry: mem.New(), Driver: other})
		_, err := r2.Ensure(t.Context(), scheduler.Request{Issuer: "iss", User: "u"})
		if !errors.Is(err, scheduler.ErrOwned) || !strings.Contains(err.Error(), "region r1") {
			t.Fatalf("Ensure in another region while r1 holds the user: %v, want a refusal naming r1", err)
		}
		if we, ok := errors.AsType[*wire.Error](err); !ok || we.Code != wire.Unavailable || we.Details["region"] != "r1" {
			t.Fatalf("refusal %#v, want unavailable with details.region r1 (the edge forwards there)", err)
		}
		if other.n != 0 {
			t.Fatalf("the other region started %d runners for a user r1 serves", other.n)
		}
		if p := c.placement("u"); p.Region != "r1" || p.Epoch != 1 {
			t.Fatalf("placement after the refused claim: %+v", p)
		}
	})
}

// A region that stops renewing (its scheduler gone; production runners keep serving) lets another region
// claim the user once the lease lapsed, not before.
func TestLeaseLapsesWithoutRenewals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCore(t, true)
		r1 := c.start(scheduler.Config{RunnerRegisters: true, LeaseTTL: 30 * time.Second})
		if _, err := r1.Ensure(t.Context(), scheduler.Request{Issuer: "iss", User: "u"}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute)
		if err := r1.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		lease := c.placement("u").Lease
		r2 := c.start(scheduler.Config{Region: "r2", Registry: mem.New(), Driver: newMemDriver(nil)})
		if _, err := r2.Ensure(t.Context(), scheduler.Request{Issuer: "iss", User: "u"}); !errors.Is(err, scheduler.ErrOwned) {
			t.Fatalf("Ensure in r2 before r1's lease lapsed: %v, want ErrOwned", err)
		}
		time.Sleep(time.Until(lease) + time.Second)
		e, err := r2.Ensure(t.Context(), scheduler.Request{Issuer: "iss", User: "u"})
		if err != nil {
			t.Fatalf("Ensure in r2 after r1's lease lapsed: %v", err)
		}
		if p := c.placement("u"); p.Region != "r2" || p.Epoch != 2 || e.Epoch != 2 {
			t.Fatalf("placement after the takeover: %+v (entry epoch %d), want r2 at epoch 2", p, e.Epoch)
		}
	})
}

// A runner whose placement moved on (a newer claim) is stopped at the next renewal, and its supervisor's
// cleanup does not touch the newer placement.
func TestFencedRunnerIsStopped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCore(t, false)
		s := c.start(scheduler.Config{LeaseTTL: 30 * time.Second})
		e, err := s.Ensure(t.Context(), scheduler.Request{Issuer: "iss", User: "u"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.placements.Claim(t.Context(), "iss", "u", "r1", 1, time.Time{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(11 * time.Second) // the next renewal (every 10 s) finds epoch 2
		synctest.Wait()
		if got := c.driver.stopped(); len(got) == 0 || got[0] != e.Alloc {
			t.Fatalf("stops %v: the fenced runner %s was not stopped", got, e.Alloc)
		}
		if p := c.placement("u"); p.Epoch != 2 || p.State != scheduler.StateStarting {
			t.Fatalf("the newer placement was touched: %+v", p)
		}
		if n := s.Live(); n != 0 {
			t.Fatalf("%d runners supervised after the fenced one stopped", n)
		}
	})
}

// leaseLog is a LeaseNotifier that records what runners were told.
type leaseLog struct {
	mu     sync.Mutex
	leases []time.Time
}

func (l *leaseLog) NotifyLease(_ context.Context, e registry.Entry, until time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.leases = append(l.leases, until)
	return nil
}

func (l *leaseLog) told() []time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]time.Time(nil), l.leases...)
}

// The runner is told its lease when supervision starts and after every renewal (every LeaseTTL/3), each
// time the lease just stored.
func TestRunnersAreToldTheirLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCore(t, false)
		leases := &leaseLog{}
		s := c.start(scheduler.Config{LeaseTTL: 30 * time.Second, Leases: leases})
		start := time.Now()
		if _, err := s.Ensure(t.Context(), scheduler.Request{Issuer: "iss", User: "u"}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(25 * time.Second)
		synctest.Wait()
		got := leases.told()
		if len(got) != 3 {
			t.Fatalf("told %d leases in 25 s (%v), want 3: at the start, 10 s and 20 s", len(got), got)
		}
		for i, until := range got {
			if want := start.Add(time.Duration(i)*10*time.Second + 30*time.Second); !until.Equal(want) {
				t.Errorf("lease %d until %v, want %v", i, until, want)
			}
		}
		// The runner never believes in a longer lease than the store holds (the claim's, here, until
		// renewals pass it: a renewal never shortens it).
		if p := c.placement("u"); p.Lease.Before(got[2]) {
			t.Errorf("stored lease %v, before the one the runner was told (%v)", p.Lease, got[2])
		}
	})
}

// slowLedger is the real ledger behind a slow network: every write takes delay (after an outage).
type slowLedger struct {
	billing.Ledger
	down  atomic.Bool
	delay time.Duration
}

func (l *slowLedger) Record(ctx context.Context, ev billing.UsageEvent) error {
	if l.down.Load() {
		return errors.New("ledger unreachable")
	}
	select {
	case <-time.After(l.delay):
	case <-ctx.Done():
		return ctx.Err()
	}
	return l.Ledger.Record(ctx, ev)
}

// stampedLeases records when each lease was told.
type stampedLeases struct {
	mu  sync.Mutex
	at  []time.Time
	end []time.Time
}

func (l *stampedLeases) NotifyLease(_ context.Context, _ registry.Entry, until time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.at, l.end = append(l.at, time.Now()), append(l.end, until)
	return nil
}

// Metering a backlog through a slow ledger (minutes of work at a tick) never delays the lease: the runner
// is told a new lease every LeaseTTL/3 all the same, so it never stops itself while its scheduler lives.
func TestSlowMeteringDoesNotStarveTheLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCore(t, false)
		ledger := &slowLedger{Ledger: c.ledger, delay: 2 * time.Second}
		ledger.down.Store(true)
		leases := &stampedLeases{}
		s := c.start(scheduler.Config{Ledger: ledger, LeaseTTL: 30 * time.Second, Leases: leases})
		if _, err := s.Ensure(t.Context(), scheduler.Request{Issuer: "iss", User: "u", Account: lifetime("u"), ComputeLimit: -1}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Minute) // a backlog of 18 buckets
		ledger.down.Store(false)
		time.Sleep(3 * time.Minute) // caught up at 2 s a write
		synctest.Wait()
		leases.mu.Lock()
		defer leases.mu.Unlock()
		for i := 1; i < len(leases.at); i++ {
			if gap := leases.at[i].Sub(leases.at[i-1]); gap > 10*time.Second {
				t.Fatalf("lease %d told %v after the previous one (want every 10 s): the runner's deadline came within %v", i, gap, leases.end[i-1].Sub(leases.at[i]))
			}
		}
		if n := len(leases.at); n < 36 {
			t.Fatalf("%d leases told in 6 minutes, want one every 10 s", n)
		}
	})
}

// racingPlacements lets another region's claim land just before this one's (between its Get and Claim).
type racingPlacements struct {
	scheduler.Placements
	once sync.Once
}

func (p *racingPlacements) Claim(ctx context.Context, issuer, user, region string, expect int64, lease time.Time) (scheduler.Placement, error) {
	p.once.Do(func() { _, _ = p.Placements.Claim(ctx, issuer, user, "r1", expect, time.Now().Add(time.Hour)) })
	return p.Placements.Claim(ctx, issuer, user, region, expect, lease)
}

// A claim that loses the race to another region is told the user is served there (and where), at once,
// rather than waiting its start timeout for a runner that will never register in its own region.
func TestLostClaimRaceNamesTheRegion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCore(t, false)
		r2 := c.start(scheduler.Config{Region: "r2", Placements: &racingPlacements{Placements: c.placements}})
		start := time.Now()
		_, err := r2.Ensure(t.Context(), scheduler.Request{Issuer: "iss", User: "u"})
		var we *wire.Error
		if !errors.Is(err, scheduler.ErrOwned) || !errors.As(err, &we) || we.Details["region"] != "r1" {
			t.Fatalf("Ensure after losing the claim to r1: %v, want unavailable naming r1", err)
		}
		if waited := time.Since(start); waited > 0 {
			t.Fatalf("waited %v before answering", waited)
		}
	})
}
