package scheduler

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/warren-mesh/warren/internal/registry"
)

// supervise meters l's runner while it lives (metering), then releases it: the driver cleans up after it,
// it is deregistered (or, when runners register themselves, its lock is awaited) and its placement marked
// asleep, fenced by its epoch. When the scheduler closes first, the runner is stopped (warren dev) or left
// serving for a successor (production, Config.RunnerRegisters: Adopt).
func (s *Scheduler) supervise(l *live, from time.Time, log *slog.Logger) {
	defer s.wg.Done()
	defer close(l.stopped)
	defer s.drop(l)
	stopLease := s.keepLease(l, log)
	defer stopLease()
	m := s.newMetering(l, from, log)
	if !s.watch(l, m, log) {
		return
	}
	m.exit(time.Now())
	if s.release(l, log) {
		log.Info("sandbox exited", "alloc", l.sb.Alloc)
	}
}

// drop ends the supervision of l (a newer runner of its user may be supervised already).
func (s *Scheduler) drop(l *live) {
	id := l.id()
	s.mu.Lock()
	if s.live[id] == l {
		delete(s.live, id)
	}
	s.mu.Unlock()
}

// watch meters l at every tick until its runner exits, or the scheduler closes. It reports whether the
// runner is gone: false when it keeps serving past the close.
func (s *Scheduler) watch(l *live, m *metering, log *slog.Logger) bool {
	tick := time.NewTicker(s.cfg.MeterInterval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			m.due(time.Now(), false)
		case <-l.sb.Exited:
			return true
		case <-s.stop:
			if s.cfg.RunnerRegisters {
				// Production: the runner holds its own lock and outlives this scheduler (a restart or
				// deploy must not end every session of the region). Record the buckets that are over and
				// stop supervising: the next scheduler of the region adopts it (Adopt) and meters the rest.
				m.due(time.Now(), false)
				// A last renewal gives the successor a whole lease to adopt it before it stops itself.
				s.renew(l, false, log)
				log.Info("scheduler closing: the runner keeps serving", "alloc", l.sb.Alloc)
				return false
			}
			s.stopOnClose(l, log)
			return true
		}
	}
}

// stopOnClose stops l's runner because the scheduler closes (warren dev) and waits a while for its exit.
func (s *Scheduler) stopOnClose(l *live, log *slog.Logger) {
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
}

// release lets go of what is left of l's runner, which is gone (slept, crashed or stopped): what the driver
// still keeps for it (on Nomad, the stopped job is purged), its registration, and its placement, which is
// marked asleep. Each step has its own deadline, so a slow one cannot starve the placement update. It
// reports false when the scheduler closed while the runner may still hold its lock: the placement stays
// running for the successor (Adopt), which finds out.
func (s *Scheduler) release(l *live, log *slog.Logger) bool {
	step := func(what string, f func(ctx context.Context) error) {
		ctx, cancel := context.WithTimeout(s.base, 5*time.Second)
		defer cancel()
		if err := f(ctx); err != nil && !errors.Is(err, ErrStaleEpoch) {
			log.Warn(what, "err", err)
		}
	}
	e := l.entry
	step("clean up after the runner", func(ctx context.Context) error { return s.cfg.Driver.Stop(ctx, l.sb.Alloc) })
	if s.cfg.RunnerRegisters {
		if !s.awaitUnlock(l) {
			return false
		}
	} else {
		step("deregister runner", func(ctx context.Context) error {
			return s.cfg.Registry.Deregister(ctx, e.Issuer, e.User, e.Epoch)
		})
	}
	step("mark placement asleep", func(ctx context.Context) error {
		return s.cfg.Placements.Update(ctx, e.Issuer, e.User, e.Epoch, StateAsleep, "")
	})
	return true
}

// awaitUnlock waits until l's runner no longer holds its registration. The driver may report an
// allocation gone (e.g. lost with its node) while the runner still runs and holds its lock: the placement
// sleeps only once the lock of this epoch is released, or after a bound (unlockWait), when the runner's own
// self-fencing has ended it. It reports false when the scheduler closes first.
func (s *Scheduler) awaitUnlock(l *live) bool {
	for deadline := time.Now().Add(unlockWait); time.Now().Before(deadline); {
		ctx, cancel := context.WithTimeout(s.base, 5*time.Second)
		e, err := s.cfg.Registry.Lookup(ctx, l.entry.Issuer, l.entry.User)
		cancel()
		if errors.Is(err, registry.ErrNotFound) || (err == nil && e.Epoch != l.entry.Epoch) {
			return true
		}
		select {
		case <-time.After(time.Second):
		case <-s.stop:
			return false
		}
	}
	return true
}

// unlockWait bounds how long a supervisor waits for an exited runner's registration to go.
const unlockWait = 2 * time.Minute

// keepLease renews l's lease every LeaseTTL/3 on a goroutine of its own, so that slow metering (a ledger
// outage's backlog) or a slow driver never delays it (start and adopt renewed it once already). The
// returned func stops it and waits.
func (s *Scheduler) keepLease(l *live, log *slog.Logger) func() {
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(s.cfg.LeaseTTL / 3)
		defer t.Stop()
		failing := false
		for {
			select {
			case <-done:
				return
			case <-t.C:
				failing = s.renew(l, failing, log)
			}
		}
	}()
	return func() { close(done); <-finished }
}

// renew extends the lease of l's placement by LeaseTTL and tells the runner (Config.Leases). A placement that moved on (another epoch, or
// gone) means this runner was fenced off: it is stopped. Other failures are logged when they begin
// (failing: the last renewal failed); it reports whether this one failed.
func (s *Scheduler) renew(l *live, failing bool, log *slog.Logger) bool {
	ctx, cancel := context.WithTimeout(s.base, 5*time.Second)
	defer cancel()
	until := time.Now().Add(s.cfg.LeaseTTL)
	err := s.cfg.Placements.Renew(ctx, l.entry.Issuer, l.entry.User, l.entry.Epoch, until)
	switch {
	case err == nil:
		if failing {
			log.Info("placement lease renewed again")
		}
		if s.cfg.Leases != nil {
			if err := s.cfg.Leases.NotifyLease(ctx, l.entry, until); err != nil {
				// The runner keeps its previous lease; a later renewal tells it again.
				log.Warn("tell the runner its lease", "err", err)
			}
		}
		return false
	case errors.Is(err, ErrStaleEpoch) || errors.Is(err, ErrNotFound):
		log.Warn("placement moved on: stopping the fenced runner", "err", err)
		if err := s.cfg.Driver.Stop(ctx, l.sb.Alloc); err != nil {
			log.Warn("stop the fenced runner", "err", err)
		}
		return true
	default:
		if !failing {
			log.Warn("renew the placement lease; retrying", "err", err)
		}
		return true
	}
}
