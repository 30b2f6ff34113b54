package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
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

type live struct {
	entry   registry.Entry
	sb      Sandbox
	account billing.Account // zero until known (an adopted runner without a stored meter): compute is carried
	anchor  time.Time       // non-zero: account's window rolls over from it
	limit   int64           // compute seconds of account's window; < 0 unlimited
	events  string          // usage event keys are events + bucket number
	stored  bool            // the placement holds meter() (SetMeter succeeded)
	bucket  time.Duration   // the metering bucket of this scheduler (Scheduler.bucket)
	stopped chan struct{}   // closed when the supervisor finished
}

// computeKeys is the prefix of the compute events of a sandbox's epoch; supervise appends the bucket.
func computeKeys(id string, epoch int64) string {
	return fmt.Sprintf("compute/%s/%d/b", id, epoch)
}

// bucketPart is what one usage event of a bucket charges.
type bucketPart struct {
	acct    billing.Account
	seconds int64  // started seconds
	suffix  string // of the event key after the bucket number
}

// bucketParts charges the time [lo, hi) of one bucket to acct's window: one part, or two when a window
// boundary (rolling from anchor) falls inside it, each charged to its own window (the second keyed with
// suffix "w"). Empty when hi is not after lo.
func bucketParts(lo, hi time.Time, acct billing.Account, anchor time.Time) []bucketPart {
	if !hi.After(lo) {
		return nil
	}
	seconds := func(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }
	if anchor.IsZero() || acct.Window == billing.Lifetime {
		return []bucketPart{{acct: acct, seconds: seconds(hi.Sub(lo))}}
	}
	first, second := acct, acct
	first.WindowStart = billing.CurrentWindowStart(acct.Window, anchor, lo)
	second.WindowStart = billing.CurrentWindowStart(acct.Window, anchor, hi.Add(-1))
	if !second.WindowStart.After(lo) {
		return []bucketPart{{acct: first, seconds: seconds(hi.Sub(lo))}}
	}
	return []bucketPart{
		{acct: first, seconds: seconds(second.WindowStart.Sub(lo))},
		{acct: second, seconds: seconds(hi.Sub(second.WindowStart)), suffix: "w"},
	}
}

// maxBucketsPerTick bounds the buckets a supervisor records at one tick (a backlog after a ledger outage,
// or an adoption's re-metering, is caught up over several ticks).
const maxBucketsPerTick = 60

// exitMeterFor bounds how long a supervisor retries recording a runner's last buckets after it exited.
const exitMeterFor = time.Minute

// bucket is the length of the compute metering buckets: the meter interval in whole seconds, at least one.
func (s *Scheduler) bucket() time.Duration {
	return max(s.cfg.MeterInterval.Truncate(time.Second), time.Second)
}

// AdoptBackfill bounds how far back Adopt re-meters an adopted runner: the time no scheduler ran is
// charged up to this much.
const AdoptBackfill = 15 * time.Minute

// meter is what l's compute is charged to, as stored with its placement. Called with s.mu held.
func (l *live) meter() Meter {
	return Meter{Window: l.account.Window, WindowStart: l.account.WindowStart, Anchor: l.anchor, Limit: l.limit,
		Bucket: int64(l.bucket / time.Second)}
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
	claimed, err := s.cfg.Placements.Claim(ctx, req.Issuer, req.User, s.cfg.Region, expect)
	if errors.Is(err, ErrConflict) {
		// Another scheduler claimed it: wait for its runner to register (Adopt may take it over).
		unmark()
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
		events: computeKeys(id, claimed.Epoch), bucket: s.bucket(), stopped: make(chan struct{})}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = s.cfg.Driver.Stop(context.WithoutCancel(ctx), sb.Alloc)
		return registry.Entry{}, wire.Errorf(wire.Unavailable, "the scheduler is shutting down")
	}
	s.live[id] = l
	s.wg.Add(1)
	s.mu.Unlock()
	go s.supervise(id, l, entry.Since, log)

	// The meter first: a placement is running only with its meter, for a successor (Adopt).
	if req.Account.Issuer != "" {
		s.mu.Lock()
		m := l.meter()
		s.mu.Unlock()
		if err := s.cfg.Placements.SetMeter(ctx, req.Issuer, req.User, claimed.Epoch, m); err != nil {
			// Metering goes on here; only a successor would lack the account until the next Ensure.
			log.Warn("store the sandbox's meter", "err", err)
		} else {
			s.mu.Lock()
			l.stored = l.meter() == m
			s.mu.Unlock()
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
//
// Compute is metered in buckets aligned to the clock (bucket k is [k·B, (k+1)·B) with B the meter interval
// in whole seconds, Scheduler.bucket): the event of bucket k of a runner is keyed by its sandbox, epoch and
// k, and charges the part of the bucket the runner lived, in started seconds. Two supervisors of one
// runner (a scheduler and its successor overlapping during a deploy) therefore record each bucket once,
// and a successor can re-meter recent buckets (from) without counting any twice. A bucket is recorded once
// it is over; the runner's last one when it exits. A failed write is retried at the next tick under the
// same key (at most maxBucketsPerTick buckets a tick, so a ledger back from an outage is not flooded); at
// the runner's exit the rest is retried for up to exitMeterFor.
func (s *Scheduler) supervise(id string, l *live, from time.Time, log *slog.Logger) {
	defer s.wg.Done()
	defer close(l.stopped)
	tick := time.NewTicker(s.cfg.MeterInterval)
	defer tick.Stop()
	bucket := s.bucket()
	next := from.UnixNano() / int64(bucket) // the first bucket not yet recorded
	var spent atomic.Bool                   // a budget stop is under way
	failing := false                        // the last write failed (log state changes only)
	record := func(ev billing.UsageEvent) bool {
		ctx, cancel := context.WithTimeout(s.base, 5*time.Second)
		defer cancel()
		err := s.cfg.Ledger.Record(ctx, ev)
		switch {
		case err == nil:
		case errors.Is(err, billing.ErrInvalid):
			// Retrying cannot make it valid, and it would hold up every later bucket.
			log.Error("compute usage event refused: dropped", "key", ev.Key, "compute_seconds", ev.ComputeSeconds, "err", err)
		default:
			if !failing {
				log.Warn("record compute usage; retrying", "key", ev.Key, "err", err)
			}
			failing = true
			return false
		}
		if failing {
			log.Info("compute usage recorded again", "key", ev.Key)
		}
		failing = false
		if err == nil {
			s.metrics.computeSecs.Add(float64(ev.ComputeSeconds))
		}
		return true
	}
	// account is what the runner's compute is charged to. An adopted runner whose placement had no meter
	// yet (its start was under way) gets it from the placement once stored there, or from an Ensure.
	// An error means the placement could not be read (try again); an empty account without one, that the
	// placement has none for this epoch.
	account := func() (billing.Account, time.Time, int64, error) {
		s.mu.Lock()
		acct, anchor, limit := l.account, l.anchor, l.limit
		s.mu.Unlock()
		if acct.Issuer != "" {
			return acct, anchor, limit, nil
		}
		ctx, cancel := context.WithTimeout(s.base, 5*time.Second)
		p, err := s.cfg.Placements.Get(ctx, l.entry.Issuer, l.entry.User)
		cancel()
		switch {
		case err != nil && !errors.Is(err, ErrNotFound):
			return acct, anchor, limit, err
		case err != nil || p.Epoch != l.entry.Epoch || !p.Meter.Set():
			return acct, anchor, limit, nil
		}
		acct = billing.Account{Issuer: p.Issuer, User: p.User, Window: p.Meter.Window, WindowStart: p.Meter.WindowStart}
		s.mu.Lock()
		if l.account.Issuer == "" {
			l.account, l.anchor, l.limit = acct, p.Meter.Anchor, p.Meter.Limit
			l.stored = p.Meter == l.meter() // else charge() stores this scheduler's bucket length
		}
		acct, anchor, limit = l.account, l.anchor, l.limit
		s.mu.Unlock()
		return acct, anchor, limit, nil
	}
	// meter records the buckets that are over by now, and with last also the current one, up to now (the
	// runner's exit). It reports whether everything due was recorded.
	meter := func(now time.Time, last bool) bool {
		if s.cfg.Ledger == nil {
			return true
		}
		acct, anchor, limit, err := account()
		switch {
		case err != nil:
			if !failing {
				log.Warn("read the placement's meter; retrying", "err", err)
			}
			failing = true
			return false
		case acct.Issuer == "":
			if last {
				log.Warn("the runner exited before its account was known: its compute is not charged")
			}
			return last // not known yet: the buckets wait (next stays)
		}
		recorded := 0
		for {
			start := time.Unix(0, next*int64(bucket))
			end := start.Add(bucket)
			if end.After(now) {
				if !last || !now.After(start) {
					break
				}
				end = now
			}
			if !last && recorded >= maxBucketsPerTick {
				break
			}
			lo := start
			if from.After(lo) {
				lo = from
			}
			for _, part := range bucketParts(lo, end, acct, anchor) {
				ev := billing.UsageEvent{
					Key:     fmt.Sprintf("%s%d%s", l.events, next, part.suffix),
					Account: part.acct, Kind: billing.KindCompute, ComputeSeconds: part.seconds, At: end,
				}
				if !record(ev) {
					return false // the whole bucket again at the next tick: a recorded part is a no-op then
				}
				recorded++
			}
			next++
			if end.Equal(now) {
				break
			}
		}
		if recorded == 0 || limit <= 0 || spent.Load() { // 0 never gets past admission; < 0 is unlimited
			return true
		}
		a := acct
		if !anchor.IsZero() && a.Window != billing.Lifetime {
			a.WindowStart = billing.CurrentWindowStart(a.Window, anchor, now)
		}
		ctx, cancel := context.WithTimeout(s.base, 5*time.Second)
		u, err := s.cfg.Ledger.Usage(ctx, a)
		cancel()
		if err == nil && u.ComputeSeconds >= limit {
			// The compute budget of the window is spent: the sandbox sleeps (snapshot, exit).
			spent.Store(true)
			log.Info("compute budget spent; stopping the sandbox", "used_s", u.ComputeSeconds, "limit_s", limit)
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				ctx, cancel := context.WithTimeout(s.base, time.Minute)
				defer cancel()
				go func() { // a closing scheduler does not wait for it (a successor checks the budget again)
					select {
					case <-s.stop:
						cancel()
					case <-ctx.Done():
					}
				}()
				if err := s.cfg.Driver.Stop(ctx, l.sb.Alloc); err != nil {
					log.Warn("stop the sandbox whose compute budget is spent; retrying at the next record", "err", err)
					spent.Store(false)
				}
			}()
		}
		return true
	}
	for done := false; !done; {
		select {
		case <-tick.C:
			meter(s.cfg.Now(), false)
		case <-l.sb.Exited:
			done = true
		case <-s.stop:
			if s.cfg.RunnerRegisters {
				// Production: the runner holds its own lock and outlives this scheduler (a restart or
				// deploy must not end every session of the region). Record the buckets that are over and
				// stop supervising: the next scheduler of the region adopts it (Adopt) and meters the rest.
				meter(s.cfg.Now(), false)
				s.mu.Lock()
				if s.live[id] == l {
					delete(s.live, id)
				}
				s.mu.Unlock()
				log.Info("scheduler closing: the runner keeps serving", "alloc", l.sb.Alloc)
				return
			}
			ctx, cancel := context.WithTimeout(s.base, 10*time.Second)
			if err := s.cfg.Driver.Stop(ctx, l.sb.Alloc); err != nil {
				log.Warn("stop sandbox on shutdown", "err", err)
			}
			cancel()
			select {
			case <-l.sb.Exited:
			case <-time.After(s.cfg.StartTimeout):
				log.Warn("sandbox did not report its exit on shutdown", "alloc", l.sb.Alloc)
			case <-s.base.Done():
				log.Warn("scheduler close given up: the sandbox's exit is not awaited", "alloc", l.sb.Alloc)
			}
			done = true
		}
	}
	// The runner is gone: record the rest up to its exit, retrying a while if the ledger does not answer
	// (once more and no longer when the scheduler closes).
	exitAt := s.cfg.Now()
	for deadline := time.Now().Add(exitMeterFor); !meter(exitAt, true) && time.Now().Before(deadline); {
		select {
		case <-time.After(time.Second):
		case <-s.stop:
			if !meter(exitAt, true) {
				log.Warn("scheduler closing: the runner's last compute seconds are not recorded")
			}
			deadline = time.Time{}
		}
	}
	// The runner is gone (slept, crashed or stopped): release what the driver still keeps for it (on
	// Nomad, the stopped job is purged). Each step has its own deadline, so a slow one cannot starve the
	// placement update.
	step := func(what string, f func(ctx context.Context) error) {
		ctx, cancel := context.WithTimeout(s.base, 5*time.Second)
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
			ctx, cancel := context.WithTimeout(s.base, 5*time.Second)
			e, err := s.cfg.Registry.Lookup(ctx, l.entry.Issuer, l.entry.User)
			cancel()
			if errors.Is(err, registry.ErrNotFound) || (err == nil && e.Epoch != l.entry.Epoch) {
				break
			}
			select {
			case <-time.After(time.Second):
			case <-s.stop:
				// Shutting down while the runner may still hold its lock: the placement stays running
				// for the successor (Adopt), which finds out.
				s.mu.Lock()
				if s.live[id] == l {
					delete(s.live, id)
				}
				s.mu.Unlock()
				return
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
// and stores that with its placement when it changed, for a successor scheduler (Adopt). The supervisor
// uses it once stored (or, when the store fails, at once: metering goes on, only a successor would lack
// it, and the next Ensure tries again).
func (s *Scheduler) charge(ctx context.Context, id string, acct billing.Account, anchor time.Time, limit int64) {
	if acct.Issuer == "" {
		return
	}
	s.mu.Lock()
	l := s.live[id]
	if l == nil || (l.account == acct && l.anchor.Equal(anchor) && l.limit == limit && l.stored) {
		s.mu.Unlock()
		return
	}
	l.account, l.anchor, l.limit = acct, anchor, limit
	m, e := l.meter(), l.entry
	s.mu.Unlock()
	err := s.cfg.Placements.SetMeter(ctx, e.Issuer, e.User, e.Epoch, m)
	if err != nil && !errors.Is(err, ErrStaleEpoch) {
		s.log.Warn("store the sandbox's meter", "issuer", e.Issuer, "user", e.User, "epoch", e.Epoch, "err", err)
	}
	s.mu.Lock()
	if l.meter() == m {
		l.stored = err == nil
	}
	s.mu.Unlock()
}

// Adopt takes over the runners of this region that a previous scheduler process started and left serving
// (production, Config.RunnerRegisters, with a driver that is an Adopter): for each active placement of the
// region whose runner is registered under the placement's epoch and allocation, it follows the allocation,
// meters its compute (charged to the placement's stored meter; a placement stored without one is metered
// once the next Ensure of its user names the account) from up to AdoptBackfill ago — the buckets the
// predecessor recorded are not counted twice — and marks the placement asleep once the runner exits, like
// a runner it started. A running placement whose runner is no longer registered slept or died while no
// scheduler watched: its allocation is cleaned up and the placement marked asleep. A starting placement
// whose runner is not registered is left alone (its start may be under way).
//
// Call it after New; it may run while the scheduler serves. It returns how many runners it adopted. An
// error means some placements could not be examined because the placements, the registry or the driver
// could not be reached, and a later call should be made for them (adopted ones are skipped); a placement
// that cannot be adopted for good (its allocation is not a sandbox's, or unknown to the driver) is logged
// and skipped.
func (s *Scheduler) Adopt(ctx context.Context) (int, error) {
	ad, ok := s.cfg.Driver.(Adopter)
	if !ok || !s.cfg.RunnerRegisters {
		return 0, nil
	}
	ps, err := s.cfg.Placements.Active(ctx, s.cfg.Region)
	if err != nil {
		return 0, fmt.Errorf("adopt runners: %w", err)
	}
	adopted := 0
	var errs []error
	for _, p := range ps {
		// Each placement has its own bound, so one slow cleanup cannot hold up the others for long.
		pctx, cancel := context.WithTimeout(ctx, adoptTimeout)
		ok, err := s.adopt(pctx, ad, p)
		cancel()
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

// adoptTimeout bounds the adoption of one placement (a cleanup waits for the runner's graceful stop).
const adoptTimeout = time.Minute

// adopt adopts p's runner if it is still registered; it returns an error only for what a later attempt may
// get past.
func (s *Scheduler) adopt(ctx context.Context, ad Adopter, p Placement) (bool, error) {
	id := SandboxID(p.Issuer, p.User)
	log := s.log.With("issuer", p.Issuer, "user", p.User, "epoch", p.Epoch, "alloc", p.Alloc)
	s.mu.Lock()
	_, known := s.live[id]
	known = known || s.starting[id] > 0
	s.mu.Unlock()
	if known {
		return false, nil
	}
	e, err := s.cfg.Registry.Lookup(ctx, p.Issuer, p.User)
	switch {
	case (errors.Is(err, registry.ErrNotFound) || err == nil && e.Epoch < p.Epoch) && p.State == StateStarting:
		return false, nil // maybe still starting; the next claim of its user settles it
	case errors.Is(err, registry.ErrNotFound) || err == nil && e.Epoch < p.Epoch:
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
	case p.Alloc != "" && e.Alloc != p.Alloc:
		log.Warn("not adopted: the registered runner is another allocation than the placement's", "registered_alloc", e.Alloc)
		return false, nil
	}
	alloc := e.Alloc // a starting placement has no allocation stored yet
	sb, err := ad.Adopt(ctx, Spec{ID: id, Issuer: p.Issuer, User: p.User, Epoch: p.Epoch, Region: p.Region}, alloc)
	if err != nil {
		if errors.Is(err, ErrNotFound) || errors.Is(err, ErrNotASandbox) {
			log.Warn("not adopted", "err", err)
			return false, nil
		}
		return false, fmt.Errorf("%s/%s: follow allocation %s: %w", p.Issuer, p.User, alloc, err)
	}
	if p.State == StateStarting {
		if err := s.cfg.Placements.Update(ctx, p.Issuer, p.User, p.Epoch, StateRunning, alloc); err != nil {
			return false, fmt.Errorf("%s/%s: mark placement running: %w", p.Issuer, p.User, err)
		}
	}
	sb.Addr, sb.Key = e.Addr, e.Key
	l := &live{entry: e, sb: sb, anchor: p.Meter.Anchor, limit: p.Meter.Limit,
		events: computeKeys(id, p.Epoch), bucket: s.bucket(), stopped: make(chan struct{})}
	if p.Meter.Set() {
		l.account = billing.Account{Issuer: p.Issuer, User: p.User, Window: p.Meter.Window, WindowStart: p.Meter.WindowStart}
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false, errors.New("the scheduler is shutting down")
	}
	if _, known := s.live[id]; known || s.starting[id] > 0 {
		s.mu.Unlock()
		return false, nil
	}
	s.live[id] = l
	s.wg.Add(1)
	s.mu.Unlock()
	// Re-meter the recent past: the buckets the predecessor left (its last, unfinished one, and the time no
	// scheduler ran) are recorded now, those it recorded are not counted twice.
	// Only under the same buckets, though: other bucket numbers would charge again what the predecessor
	// recorded (a placement stored without a meter, or by a scheduler metering otherwise, starts now).
	from := s.cfg.Now()
	if p.Meter.Bucket == int64(s.bucket()/time.Second) {
		from = from.Add(-AdoptBackfill)
		if e.Since.After(from) {
			from = e.Since
		}
	}
	go s.supervise(id, l, from, log)
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
