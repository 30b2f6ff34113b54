package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/warren-mesh/warren/internal/registry"
)

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
	id := registry.SandboxID(p.Issuer, p.User)
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
	l := newLive(e, sb, chargingOf(p))
	l.stored = p.Meter
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
	from := time.Now()
	if p.Meter.Bucket == int64(s.bucket()/time.Second) {
		from = from.Add(-AdoptBackfill)
		if e.Since.After(from) {
			from = e.Since
		}
	}
	s.renew(l, false, log) // the runner learns its lease from its new scheduler at once
	go s.supervise(l, from, log)
	s.metrics.adopted.Inc()
	log.Info("runner adopted", "addr", e.Addr, "metered", p.Meter.Set())
	return true, nil
}
