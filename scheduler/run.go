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
	// lock, DESIGN.md §4) and the driver's Start returns once they have; the scheduler then neither
	// registers nor deregisters them. False: the scheduler registers what the driver started (warren dev).
	RunnerRegisters bool
	Ledger          billing.Ledger // compute seconds are recorded here, best through a *spool.Spool (DESIGN.md §5); nil disables metering
	StartTimeout    time.Duration  // how long one sandbox may take to become ready (default 30s)
	MeterInterval   time.Duration  // how often live sandboxes' compute seconds are recorded (default 10s)
	Logger          *slog.Logger
	Metrics         prometheus.Registerer // nil: metrics are not registered
	Now             func() time.Time
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
}

// Scheduler gives every (issuer, user) at most one live runner. Safe for concurrent use.
type Scheduler struct {
	cfg     Config
	log     *slog.Logger
	sf      singleflight.Group
	metrics metrics

	mu     sync.Mutex
	live   map[string]*live // by SandboxID
	closed bool
	wg     sync.WaitGroup
	stop   chan struct{}
}

type live struct {
	entry   registry.Entry
	sb      Sandbox
	account billing.Account // zero until known (an adopted runner without a stored meter): compute is carried
	anchor  time.Time       // non-zero: account's window rolls over from it
	limit   int64           // compute seconds of account's window; < 0 unlimited
	events  string          // usage event keys are events + sequence number
	stopped chan struct{}   // closed when the supervisor finished
}

// meter is what l's compute is charged to, as stored with its placement. Called with s.mu held.
func (l *live) meter() Meter {
	return Meter{Window: l.account.Window, WindowStart: l.account.WindowStart, Anchor: l.anchor, Limit: l.limit}
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
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Scheduler{cfg: cfg, log: cfg.Logger, live: map[string]*live{}, stop: make(chan struct{})}
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
		s.charge(ctx, SandboxID(req.Issuer, req.User), req.Account, req.Anchor, req.ComputeLimit)
		return e, nil
	} else if !errors.Is(err, registry.ErrNotFound) {
		return registry.Entry{}, wire.Wrap(wire.Unavailable, err, "sandbox registry unavailable")
	}
	id := SandboxID(req.Issuer, req.User)
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
	id := SandboxID(e.Issuer, e.User)
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
	claimed, err := s.cfg.Placements.Claim(ctx, req.Issuer, req.User, s.cfg.Region, expect)
	if errors.Is(err, ErrConflict) {
		// Another scheduler claimed it: wait for its runner to register.
		return s.awaitOther(ctx, req)
	}
	if err != nil {
		s.metrics.starts.WithLabelValues("error").Inc()
		return registry.Entry{}, wire.Wrap(wire.Unavailable, err, "claim sandbox placement")
	}
	log = log.With("epoch", claimed.Epoch)
	sb, err := s.cfg.Driver.Start(ctx, Spec{ID: id, Issuer: req.Issuer, User: req.User, Epoch: claimed.Epoch, Region: s.cfg.Region})
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
		Alloc: sb.Alloc, Addr: sb.Addr, Key: sb.Key, Since: s.cfg.Now(),
	}
	l := &live{entry: entry, sb: sb, account: req.Account, anchor: req.Anchor, limit: req.ComputeLimit,
		events: fmt.Sprintf("compute/%s/%d/", id, claimed.Epoch), stopped: make(chan struct{})}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = s.cfg.Driver.Stop(context.WithoutCancel(ctx), sb.Alloc)
		return registry.Entry{}, wire.Errorf(wire.Unavailable, "the scheduler is shutting down")
	}
	s.live[id] = l
	s.wg.Add(1)
	s.mu.Unlock()
	go s.supervise(id, l, log)

	if err := s.cfg.Placements.Update(ctx, req.Issuer, req.User, claimed.Epoch, StateRunning, sb.Alloc); err != nil {
		// A newer claim fenced us off: this runner must not serve.
		log.Warn("placement fenced after start", "err", err)
		_ = s.cfg.Driver.Stop(context.WithoutCancel(ctx), sb.Alloc)
		return registry.Entry{}, wire.Wrap(wire.Unavailable, err, "the sandbox moved while starting; retry")
	}
	if req.Account.Issuer != "" {
		s.mu.Lock()
		m := l.meter()
		s.mu.Unlock()
		if err := s.cfg.Placements.SetMeter(ctx, req.Issuer, req.User, claimed.Epoch, m); err != nil {
			// Metering goes on here; only a successor scheduler would lack the account until a reconnect.
			log.Warn("store the sandbox's meter", "err", err)
		}
	}
	if !s.cfg.RunnerRegisters {
		if err := s.cfg.Registry.Register(ctx, entry); err != nil {
			_ = s.cfg.Driver.Stop(context.WithoutCancel(ctx), sb.Alloc)
			return registry.Entry{}, wire.Wrap(wire.Unavailable, err, "register sandbox")
		}
	}
	s.metrics.starts.WithLabelValues("ok").Inc()
	s.metrics.startLatency.Observe(time.Since(begin).Seconds())
	log.Info("sandbox started", "alloc", sb.Alloc, "addr", sb.Addr, "ms", time.Since(begin).Milliseconds())
	return entry, nil
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

// supervise waits for the runner to exit (or the scheduler to close), meters its compute time meanwhile,
// then deregisters it and marks the placement asleep, fenced by its epoch.
func (s *Scheduler) supervise(id string, l *live, log *slog.Logger) {
	defer s.wg.Done()
	defer close(l.stopped)
	tick := time.NewTicker(s.cfg.MeterInterval)
	defer tick.Stop()
	last := s.cfg.Now()
	var carry time.Duration
	seq := 0
	// pending is an event whose write failed: it is retried unchanged under its own key (the write may
	// have committed before the error; a changed amount under the same key would then be lost). A spool as
	// Ledger takes what the ledger cannot, so with one only the spool's own disk failing leaves an event
	// here; without one this memory is all there is, and it is gone if the process is.
	var pending *billing.UsageEvent
	spent := false
	record := func(ev billing.UsageEvent) bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.cfg.Ledger.Record(ctx, ev); err != nil {
			if errors.Is(err, billing.ErrInvalid) {
				// Retrying cannot make it valid, and a pending event would hold up every later one.
				log.Error("compute usage event refused: dropped", "key", ev.Key, "compute_seconds", ev.ComputeSeconds, "err", err)
				return true
			}
			log.Warn("record compute usage", "key", ev.Key, "err", err)
			return false
		}
		s.metrics.computeSecs.Add(float64(ev.ComputeSeconds))
		return true
	}
	meter := func() {
		now := s.cfg.Now()
		carry += now.Sub(last)
		last = now
		if s.cfg.Ledger == nil {
			return
		}
		s.mu.Lock()
		known := l.account.Issuer != ""
		s.mu.Unlock()
		if !known {
			return // adopted without a stored meter: carried until an Ensure names the account
		}
		if pending != nil {
			if !record(*pending) {
				return
			}
			pending = nil
		}
		secs := int64(carry / time.Second)
		if secs <= 0 {
			return
		}
		s.mu.Lock()
		acct, anchor := l.account, l.anchor
		s.mu.Unlock()
		if !anchor.IsZero() && acct.Window != billing.Lifetime {
			acct.WindowStart = billing.CurrentWindowStart(acct.Window, anchor, now)
		}
		seq++
		ev := billing.UsageEvent{
			Key:     fmt.Sprintf("%s%d", l.events, seq),
			Account: acct, Kind: billing.KindCompute, ComputeSeconds: secs, At: now,
		}
		carry -= time.Duration(secs) * time.Second
		if !record(ev) {
			pending = &ev
			return
		}
		s.mu.Lock()
		limit := l.limit
		s.mu.Unlock()
		if limit > 0 && !spent { // 0 never gets past admission; < 0 is unlimited
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			u, err := s.cfg.Ledger.Usage(ctx, acct)
			cancel()
			if err == nil && u.ComputeSeconds >= limit {
				// The compute budget of the window is spent: the sandbox sleeps (snapshot, exit).
				spent = true
				log.Info("compute budget spent; stopping the sandbox", "used_s", u.ComputeSeconds, "limit_s", limit)
				go func() {
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					_ = s.cfg.Driver.Stop(ctx, l.sb.Alloc)
				}()
			}
		}
	}
	for done := false; !done; {
		select {
		case <-tick.C:
			meter()
		case <-l.sb.Exited:
			done = true
		case <-s.stop:
			if s.cfg.RunnerRegisters {
				// Production: the runner holds its own lock and outlives this scheduler (a restart or
				// deploy must not end every session of the region). Record what it used so far and stop
				// supervising: the next scheduler of the region adopts it (Adopt).
				meter()
				s.mu.Lock()
				if s.live[id] == l {
					delete(s.live, id)
				}
				s.mu.Unlock()
				log.Info("scheduler closing: the runner keeps serving", "alloc", l.sb.Alloc)
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if err := s.cfg.Driver.Stop(ctx, l.sb.Alloc); err != nil {
				log.Warn("stop sandbox on shutdown", "err", err)
			}
			cancel()
			select {
			case <-l.sb.Exited:
			case <-time.After(s.cfg.StartTimeout):
				log.Warn("sandbox did not report its exit on shutdown", "alloc", l.sb.Alloc)
			}
			done = true
		}
	}
	meter()
	// The runner is gone (slept, crashed or stopped): release what the driver still keeps for it (on
	// Nomad, the stopped job is purged). Each step has its own deadline, so a slow one cannot starve the
	// placement update.
	step := func(what string, f func(ctx context.Context) error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := f(ctx); err != nil && !errors.Is(err, ErrStaleEpoch) {
			log.Warn(what, "err", err)
		}
	}
	step("clean up after the runner", func(ctx context.Context) error { return s.cfg.Driver.Stop(ctx, l.sb.Alloc) })
	if s.cfg.RunnerRegisters {
		// The driver may report an allocation gone (e.g. lost with its node) while the runner still runs
		// and holds its lock: the placement sleeps only once the lock of this epoch is released (or after
		// a bound, when the runner's own self-fencing has ended it).
		deadline := time.Now().Add(2 * time.Minute)
		for time.Now().Before(deadline) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			e, err := s.cfg.Registry.Lookup(ctx, l.entry.Issuer, l.entry.User)
			cancel()
			if errors.Is(err, registry.ErrNotFound) || (err == nil && e.Epoch != l.entry.Epoch) {
				break
			}
			select {
			case <-time.After(time.Second):
			case <-s.stop:
				deadline = time.Time{} // shutting down: leave the placement to the next claim
			}
		}
	} else {
		step("deregister runner", func(ctx context.Context) error {
			return s.cfg.Registry.Deregister(ctx, l.entry.Issuer, l.entry.User, l.entry.Epoch)
		})
	}
	step("mark placement asleep", func(ctx context.Context) error {
		return s.cfg.Placements.Update(ctx, l.entry.Issuer, l.entry.User, l.entry.Epoch, StateAsleep, "")
	})
	s.mu.Lock()
	if s.live[id] == l {
		delete(s.live, id)
	}
	s.mu.Unlock()
	log.Info("sandbox exited", "alloc", l.sb.Alloc)
}

// charge makes later compute of the user's live sandbox count against acct (the newest token's window),
// and stores that with its placement when it changed, for a successor scheduler (Adopt).
func (s *Scheduler) charge(ctx context.Context, id string, acct billing.Account, anchor time.Time, limit int64) {
	if acct.Issuer == "" {
		return
	}
	s.mu.Lock()
	l := s.live[id]
	if l == nil || (l.account == acct && l.anchor.Equal(anchor) && l.limit == limit) {
		s.mu.Unlock()
		return
	}
	l.account, l.anchor, l.limit = acct, anchor, limit
	m, e := l.meter(), l.entry
	s.mu.Unlock()
	if err := s.cfg.Placements.SetMeter(ctx, e.Issuer, e.User, e.Epoch, m); err != nil && !errors.Is(err, ErrStaleEpoch) {
		s.log.Warn("store the sandbox's meter", "issuer", e.Issuer, "user", e.User, "epoch", e.Epoch, "err", err)
	}
}

// Adopt takes over the runners of this region that a previous scheduler process started and left serving
// (production, Config.RunnerRegisters, with a driver that is an Adopter): for each running placement of
// the region whose runner is still registered under the placement's epoch, it follows the allocation and
// meters its compute from now on, charged to the placement's stored meter (a placement stored without one
// carries its seconds until the next Ensure of its user names the account), and marks the placement
// asleep once the runner exits, like a runner it started. A running placement whose runner is no longer
// registered slept or died while no scheduler watched: its allocation is cleaned up and the placement
// marked asleep. The seconds between the previous scheduler's last record and the adoption are not
// charged.
//
// Call it once after New, before serving. It returns how many runners it adopted; an error means some
// placements were not examined (the registry, store or driver is unreachable) and a later call may be
// made for them — adopted ones are skipped.
func (s *Scheduler) Adopt(ctx context.Context) (int, error) {
	ad, ok := s.cfg.Driver.(Adopter)
	if !ok || !s.cfg.RunnerRegisters {
		return 0, nil
	}
	ps, err := s.cfg.Placements.Running(ctx, s.cfg.Region)
	if err != nil {
		return 0, fmt.Errorf("adopt runners: %w", err)
	}
	adopted := 0
	var errs []error
	for _, p := range ps {
		ok, err := s.adopt(ctx, ad, p)
		if ok {
			adopted++
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return adopted, fmt.Errorf("adopt runners: %w", errors.Join(errs...))
	}
	return adopted, nil
}

func (s *Scheduler) adopt(ctx context.Context, ad Adopter, p Placement) (bool, error) {
	id := SandboxID(p.Issuer, p.User)
	log := s.log.With("issuer", p.Issuer, "user", p.User, "epoch", p.Epoch, "alloc", p.Alloc)
	s.mu.Lock()
	_, known := s.live[id]
	s.mu.Unlock()
	if known {
		return false, nil
	}
	e, err := s.cfg.Registry.Lookup(ctx, p.Issuer, p.User)
	switch {
	case errors.Is(err, registry.ErrNotFound) || (err == nil && e.Epoch < p.Epoch):
		// Gone while nobody watched: release what the driver keeps for it and let the placement sleep.
		if err := s.cfg.Driver.Stop(ctx, p.Alloc); err != nil {
			return false, fmt.Errorf("%s/%s: clean up after the runner: %w", p.Issuer, p.User, err)
		}
		if err := s.cfg.Placements.Update(ctx, p.Issuer, p.User, p.Epoch, StateAsleep, ""); err != nil && !errors.Is(err, ErrStaleEpoch) {
			return false, fmt.Errorf("%s/%s: mark placement asleep: %w", p.Issuer, p.User, err)
		}
		log.Info("runner gone while no scheduler watched: placement asleep")
		return false, nil
	case err != nil:
		return false, fmt.Errorf("%s/%s: %w", p.Issuer, p.User, err)
	case e.Epoch > p.Epoch:
		return false, nil // a newer claim is under way; its scheduler supervises it
	}
	sb, err := ad.Adopt(ctx, Spec{ID: id, Issuer: p.Issuer, User: p.User, Epoch: p.Epoch, Region: p.Region}, p.Alloc)
	if err != nil {
		return false, fmt.Errorf("%s/%s: follow allocation %s: %w", p.Issuer, p.User, p.Alloc, err)
	}
	sb.Addr, sb.Key = e.Addr, e.Key
	l := &live{entry: e, sb: sb, anchor: p.Meter.Anchor, limit: p.Meter.Limit,
		events: fmt.Sprintf("compute/%s/%d/a%d/", id, p.Epoch, s.cfg.Now().UnixNano()), stopped: make(chan struct{})}
	if p.Meter.Set() {
		l.account = billing.Account{Issuer: p.Issuer, User: p.User, Window: p.Meter.Window, WindowStart: p.Meter.WindowStart}
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false, errors.New("the scheduler is shutting down")
	}
	if _, known := s.live[id]; known {
		s.mu.Unlock()
		return false, nil
	}
	s.live[id] = l
	s.wg.Add(1)
	s.mu.Unlock()
	go s.supervise(id, l, log)
	s.metrics.adopted.Inc()
	log.Info("runner adopted", "addr", e.Addr, "metered", p.Meter.Set())
	return true, nil
}

// Live is the number of sandboxes this scheduler supervises.
func (s *Scheduler) Live() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.live)
}

// Close stops every sandbox this scheduler started, records their last compute seconds, and waits. It is
// idempotent.
func (s *Scheduler) Close() error {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.stop)
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}
