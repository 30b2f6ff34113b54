package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/singleflight"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/internal/registry"
	"github.com/warren-mesh/warren/internal/wire"
)

// Config configures a Scheduler.
type Config struct {
	Region     string
	Placements Placements
	Registry   registry.Registry
	Driver     Driver
	// RunnerRegisters: runners register themselves in Registry (production: the runner holds its Consul
	// lock, docs/ARCHITECTURE.md#owner-lock) and the driver's Start returns once they have; the scheduler then neither
	// registers nor deregisters them. False: the scheduler registers what the driver started (warren dev).
	RunnerRegisters bool
	Ledger          billing.Ledger // compute seconds are recorded here, best through a *spool.Spool (docs/ARCHITECTURE.md#spool); nil disables metering
	StartTimeout    time.Duration  // how long one sandbox may take to become ready (default 30s)
	MeterInterval   time.Duration  // how often live sandboxes' compute seconds are recorded (default 10s)
	// LeaseTTL is how long a placement stays held by this region without a renewal (default 30s): the
	// supervisor renews it every LeaseTTL/3, and a claim holds it for StartTimeout + LeaseTTL. No other
	// region may claim a user before the lease lapses (docs/ARCHITECTURE.md#leases).
	LeaseTTL time.Duration
	// Leases, when set, tells each runner its lease after every renewal (scheduler/runnerlease), so a
	// runner whose scheduler is gone stops itself before its lease ends and another region may claim its
	// user. Nil: runners are not told (they run until stopped or fenced otherwise).
	Leases  LeaseNotifier
	Logger  *slog.Logger
	Metrics prometheus.Registerer // nil: metrics are not registered
}

// Bounds of Config.LeaseTTL.
const (
	MinLeaseTTL = 10 * time.Second
	MaxLeaseTTL = 30 * time.Minute
)

// LeaseNotifier tells a runner until when its placement is held (runner.Lease).
type LeaseNotifier interface {
	NotifyLease(ctx context.Context, e registry.Entry, until time.Time) error
}

// Request asks for the sandbox of (Issuer, User); Account is charged for its compute time, up to
// ComputeLimit seconds in its window (<= 0: not enforced here — admission refuses a zero allowance), after which the sandbox is stopped (it sleeps).
type Request struct {
	Issuer       string
	User         string
	Account      billing.Account
	ComputeLimit int64
	// Anchor, when set, is the token's windowStart: Account's bounded window rolls over from it, so compute
	// of a sandbox that outlives a window is charged to the window it is used in.
	Anchor time.Time
	// Template, when set, is the workspace template a new sandbox starts from (the token's template
	// claim, a valid name): given to the runner, which uses it only without a snapshot of its own.
	Template string
}

// Scheduler gives every (issuer, user) at most one live runner. Safe for concurrent use.
type Scheduler struct {
	cfg     Config
	log     *slog.Logger
	sf      singleflight.Group
	metrics metrics

	mu       sync.Mutex
	live     map[string]*live // by SandboxID
	starting map[string]int   // by SandboxID: starts under way in this process (Adopt leaves those alone)
	closed   bool
	wg       sync.WaitGroup
	stop     chan struct{}
	// base is the parent of the supervisors' own deadlines (ledger writes, driver stops, cleanup). It is
	// cancelled only when a Close gives up waiting (its context ended), so that what is left unwinds
	// at once rather than after its timeouts.
	base  context.Context
	abort context.CancelFunc
}

type metrics struct {
	starts       *prometheus.CounterVec
	startLatency prometheus.Histogram
	live         prometheus.GaugeFunc
	computeSecs  prometheus.Counter
	adopted      prometheus.Counter
}

// New validates cfg and returns a Scheduler. Call Close to stop every sandbox it started.
func New(cfg Config) (*Scheduler, error) {
	if cfg.Placements == nil || cfg.Registry == nil || cfg.Driver == nil {
		return nil, errors.New("scheduler: placements, registry and driver are required")
	}
	if cfg.Region == "" {
		return nil, errors.New("scheduler: region is required")
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = 30 * time.Second
	}
	if cfg.MeterInterval <= 0 {
		cfg.MeterInterval = 10 * time.Second
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = 30 * time.Second
	}
	if cfg.LeaseTTL < MinLeaseTTL || cfg.LeaseTTL > MaxLeaseTTL {
		// Below: a renewal (5 s) and its push (5 s) could not both fit in a third of it beside the runner's
		// margin; above: the runner refuses leases that far ahead (runner.MaxLeaseAhead).
		return nil, fmt.Errorf("scheduler: lease TTL %v: want %v to %v", cfg.LeaseTTL, MinLeaseTTL, MaxLeaseTTL)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Scheduler{cfg: cfg, log: cfg.Logger, live: map[string]*live{}, starting: map[string]int{}, stop: make(chan struct{})}
	s.base, s.abort = context.WithCancel(context.Background())
	s.metrics = metrics{
		starts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warren_sandbox_starts_total", Help: "Sandbox starts by outcome.",
		}, []string{"outcome"}),
		startLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "warren_sandbox_start_seconds", Help: "Time from claim to a listening runner.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 12),
		}),
		live: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "warren_sandboxes_live", Help: "Sandboxes this scheduler supervises.",
		}, func() float64 { s.mu.Lock(); defer s.mu.Unlock(); return float64(len(s.live)) }),
		computeSecs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "warren_compute_seconds_total", Help: "Sandbox compute seconds recorded to the ledger.",
		}),
		adopted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "warren_sandboxes_adopted_total", Help: "Running sandboxes taken over from a previous scheduler process.",
		}),
	}
	if cfg.Metrics != nil {
		for _, c := range []prometheus.Collector{s.metrics.starts, s.metrics.startLatency, s.metrics.live, s.metrics.computeSecs, s.metrics.adopted} {
			if err := cfg.Metrics.Register(c); err != nil {
				return nil, fmt.Errorf("scheduler: register metrics: %w", err)
			}
		}
	}
	return s, nil
}

// Ensure returns the live runner of req's user, starting one if there is none. Concurrent calls for one user
// share one start; across processes the placement compare-and-set decides who starts it. Errors are
// *wire.Error (unavailable, timeout) ready for a client.
func (s *Scheduler) Ensure(ctx context.Context, req Request) (registry.Entry, error) {
	if e, err := s.cfg.Registry.Lookup(ctx, req.Issuer, req.User); err == nil {
		s.charge(ctx, registry.SandboxID(req.Issuer, req.User), req.charging())
		return e, nil
	} else if !errors.Is(err, registry.ErrNotFound) {
		return registry.Entry{}, wire.Wrap(wire.Unavailable, err, "sandbox registry unavailable")
	}
	id := registry.SandboxID(req.Issuer, req.User)
	ch := s.sf.DoChan(id, func() (any, error) {
		// The start outlives any one caller: others may be waiting on it.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.StartTimeout)
		defer cancel()
		return s.start(sctx, id, req)
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return registry.Entry{}, r.Err
		}
		return r.Val.(registry.Entry), nil
	case <-ctx.Done():
		return registry.Entry{}, wire.Wrap(wire.Timeout, ctx.Err(), "gave up waiting for the sandbox to start")
	}
}

// Forget tells the scheduler that e could not be reached: the runner is stopped and deregistered so the next
// Ensure starts a fresh one under a higher epoch.
func (s *Scheduler) Forget(ctx context.Context, e registry.Entry) {
	id := registry.SandboxID(e.Issuer, e.User)
	s.mu.Lock()
	l := s.live[id]
	s.mu.Unlock()
	if l != nil && l.entry.Epoch == e.Epoch {
		if err := s.cfg.Driver.Stop(ctx, l.sb.Alloc); err != nil {
			s.log.Warn("stop unreachable runner", "issuer", e.Issuer, "user", e.User, "epoch", e.Epoch, "err", err)
		}
		select {
		case <-l.stopped:
		case <-ctx.Done():
		}
		return
	}
	_ = s.cfg.Registry.Deregister(ctx, e.Issuer, e.User, e.Epoch)
}

func (s *Scheduler) start(ctx context.Context, id string, req Request) (registry.Entry, error) {
	log := s.log.With("issuer", req.Issuer, "user", req.User)
	// Another caller may have finished a start between our lookup and the singleflight.
	if e, err := s.cfg.Registry.Lookup(ctx, req.Issuer, req.User); err == nil {
		return e, nil
	} else if !errors.Is(err, registry.ErrNotFound) {
		return registry.Entry{}, wire.Wrap(wire.Unavailable, err, "sandbox registry unavailable")
	}
	// A runner we still supervise but that is no longer registered (forgotten, or its registration
	// failed) must be gone before a new epoch starts: never two live runners for one user.
	s.mu.Lock()
	old := s.live[id]
	s.mu.Unlock()
	if old != nil {
		if err := s.cfg.Driver.Stop(ctx, old.sb.Alloc); err != nil {
			return registry.Entry{}, wire.Wrap(wire.Unavailable, err, "stop the previous runner")
		}
		select {
		case <-old.stopped:
		case <-ctx.Done():
			return registry.Entry{}, wire.Wrap(wire.Timeout, ctx.Err(), "the previous runner did not stop in time")
		}
	}
	s.mu.Lock()
	s.starting[id]++
	s.mu.Unlock()
	var unmarkOnce sync.Once
	unmark := func() { // from here until the runner is supervised (or the start is given up)
		unmarkOnce.Do(func() {
			s.mu.Lock()
			if s.starting[id]--; s.starting[id] <= 0 {
				delete(s.starting, id)
			}
			s.mu.Unlock()
		})
	}
	defer unmark()
	begin := time.Now()
	expect := int64(0)
	p, err := s.cfg.Placements.Get(ctx, req.Issuer, req.User)
	switch {
	case err == nil:
		expect = p.Epoch
	case errors.Is(err, ErrNotFound):
	default:
		s.metrics.starts.WithLabelValues("error").Inc()
		return registry.Entry{}, wire.Wrap(wire.Unavailable, err, "placement store unavailable")
	}
	claimed, err := s.cfg.Placements.Claim(ctx, req.Issuer, req.User, s.cfg.Region, expect, time.Now().Add(s.cfg.StartTimeout+s.cfg.LeaseTTL))
	if owned, ok := errors.AsType[*OwnedError](err); ok {
		// Another region serves this user and its lease holds: never a second runner.
		s.metrics.starts.WithLabelValues("owned").Inc()
		return registry.Entry{}, ownedRefusal(owned)
	}
	if errors.Is(err, ErrConflict) {
		// Another claim won. From another region, it holds the user now: say so rather than wait for a
		// runner that will never register here.
		if p, gerr := s.cfg.Placements.Get(ctx, req.Issuer, req.User); gerr == nil && Holds(p, s.cfg.Region, time.Now()) {
			s.metrics.starts.WithLabelValues("owned").Inc()
			owned := &OwnedError{Region: p.Region, Epoch: p.Epoch, Lease: p.Lease}
			return registry.Entry{}, ownedRefusal(owned)
		}
		// Another scheduler of this region claimed it: wait for its runner to register (Adopt may take
		// it over).
		unmark()
		return s.awaitOther(ctx, req)
	}
	if err != nil {
		s.metrics.starts.WithLabelValues("error").Inc()
		return registry.Entry{}, wire.Wrap(wire.Unavailable, err, "claim sandbox placement")
	}
	log = log.With("epoch", claimed.Epoch)
	sb, err := s.cfg.Driver.Start(ctx, Spec{ID: id, Issuer: req.Issuer, User: req.User, Epoch: claimed.Epoch, Region: s.cfg.Region, Template: req.Template})
	if err != nil {
		s.metrics.starts.WithLabelValues("error").Inc()
		log.Error("start sandbox", "err", err)
		if uerr := s.cfg.Placements.Update(context.WithoutCancel(ctx), req.Issuer, req.User, claimed.Epoch, StateAsleep, ""); uerr != nil {
			log.Warn("mark failed placement asleep", "err", uerr)
		}
		if ctx.Err() != nil {
			return registry.Entry{}, wire.Wrap(wire.Timeout, err, "the sandbox did not start in time")
		}
		return registry.Entry{}, wire.Wrap(wire.Unavailable, err, "the sandbox could not be started")
	}
	entry := registry.Entry{
		Issuer: req.Issuer, User: req.User, Epoch: claimed.Epoch, Region: s.cfg.Region,
		Alloc: sb.Alloc, Addr: sb.Addr, Key: sb.Key, Since: time.Now(),
	}
	l := newLive(entry, sb, req.charging())
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = s.cfg.Driver.Stop(context.WithoutCancel(ctx), sb.Alloc)
		return registry.Entry{}, wire.Errorf(wire.Unavailable, "the scheduler is shutting down")
	}
	s.live[id] = l
	s.wg.Add(1)
	s.mu.Unlock()
	go s.supervise(l, entry.Since, log)

	// The meter first: a placement is running only with its meter, for a successor (Adopt).
	if req.Account.Issuer != "" {
		if err := s.storeMeter(ctx, l); err != nil {
			// Metering goes on here; only a successor would lack the account until the next Ensure.
			log.Warn("store the sandbox's meter", "err", err)
		}
	}
	if err := s.cfg.Placements.Update(ctx, req.Issuer, req.User, claimed.Epoch, StateRunning, sb.Alloc); err != nil {
		// A newer claim fenced us off: this runner must not serve.
		log.Warn("placement fenced after start", "err", err)
		_ = s.cfg.Driver.Stop(context.WithoutCancel(ctx), sb.Alloc)
		return registry.Entry{}, wire.Wrap(wire.Unavailable, err, "the sandbox moved while starting; retry")
	}

	if !s.cfg.RunnerRegisters {
		if err := s.cfg.Registry.Register(ctx, entry); err != nil {
			_ = s.cfg.Driver.Stop(context.WithoutCancel(ctx), sb.Alloc)
			return registry.Entry{}, wire.Wrap(wire.Unavailable, err, "register sandbox")
		}
	}
	s.renew(l, false, log) // the runner learns its lease (Config.Leases) from the start
	s.metrics.starts.WithLabelValues("ok").Inc()
	s.metrics.startLatency.Observe(time.Since(begin).Seconds())
	log.Info("sandbox started", "alloc", sb.Alloc, "addr", sb.Addr, "ms", time.Since(begin).Milliseconds())
	return entry, nil
}

// ownedRefusal is how Ensure refuses a user another region holds: unavailable, naming the region in the
// message and in details.region (an edge forwards there; a client may connect there).
func ownedRefusal(owned *OwnedError) error {
	return wire.Wrap(wire.Unavailable, owned, fmt.Sprintf("this user's sandbox is served in region %s", owned.Region)).
		WithDetails(map[string]any{"region": owned.Region})
}

// awaitOther polls the registry until a runner registered by another claimant shows up.
func (s *Scheduler) awaitOther(ctx context.Context, req Request) (registry.Entry, error) {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if e, err := s.cfg.Registry.Lookup(ctx, req.Issuer, req.User); err == nil {
			return e, nil
		}
		select {
		case <-ctx.Done():
			return registry.Entry{}, wire.Wrap(wire.Timeout, ctx.Err(), "another edge is starting this sandbox; it did not become ready in time")
		case <-t.C:
		}
	}
}

// Live is the number of sandboxes this scheduler supervises.
func (s *Scheduler) Live() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.live)
}

// Close stops supervising: without RunnerRegisters (warren dev) it stops every sandbox this scheduler
// started and records their last compute seconds; with it (production) the runners keep serving, the
// compute buckets that are over are recorded and a successor adopts them (Adopt). It waits for its
// goroutines until ctx ends; then it cancels what they still wait for (a driver stop, a ledger write,
// a runner's exit), so they unwind without their own timeouts, and returns ctx's error without waiting
// for them. It is idempotent: a later Close waits again.
func (s *Scheduler) Close(ctx context.Context) error {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.stop)
	}
	s.mu.Unlock()
	defer s.abort() // nothing is left to cancel once the goroutines are done
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("close scheduler: %d sandboxes still supervised: %w", s.Live(), ctx.Err())
	}
}
