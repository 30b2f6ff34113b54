package spool

import (
	"context"
	"errors"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/internal/backoff"
)

// compactAfter is how many delivered events may stay in the file while the replay goes on (when the
// spool holds fewer): a rewrite costs the remaining events, so the spool compacts once it delivered at
// least as many as remain, and a crash replays at most that many again.
const compactAfter = 256

// replay delivers spooled events until ctx ends: at once when some are spooled, then after a backoff each
// time the ledger fails (MinBackoff doubling to MaxBackoff, jittered so that runners that lost one ledger
// do not come back in step; a Flush tries at once).
func (s *Spool) replay(ctx context.Context) {
	defer close(s.done)
	wait := backoff.New(s.opts.MinBackoff, s.opts.MaxBackoff)
	failed := false
	for {
		switch {
		case s.Depth() == 0:
			wait.Reset()
			failed = false
			select {
			case <-ctx.Done():
				return
			case <-s.kick:
			}
			continue
		case failed:
			select {
			case <-ctx.Done():
				return
			case <-s.kick: // Flush: try now
			case <-wait.After():
			}
		}
		if s.drain(ctx) {
			wait.Reset()
			failed = false
			continue
		}
		if ctx.Err() != nil {
			return
		}
		failed = true
	}
}

// drain delivers spooled events in order until none is left (true) or the ledger fails (false), and
// compacts the file.
func (s *Spool) drain(ctx context.Context) bool {
	defer s.compact()
	for {
		s.mu.Lock()
		if len(s.queue) == 0 {
			s.mu.Unlock()
			return true
		}
		e := s.queue[0]
		s.mu.Unlock()

		err := s.deliver(ctx, e)
		switch {
		case err == nil:
			s.setDown(false)
			s.m.replayed.WithLabelValues("ok").Inc()
		case ctx.Err() != nil:
			return false
		case errors.Is(err, billing.ErrInvalid) && !errors.Is(err, billing.ErrUnavailable):
			s.setDown(false)
			// It was valid when spooled, so a ledger with stricter rules refuses it: retrying cannot help,
			// and keeping it would hold up every event behind it. Logged in full for a replay by hand.
			s.m.replayed.WithLabelValues("dropped").Inc()
			s.log.Error("usage event dropped: the ledger refuses it", "err", err, "key", e.ev.Key, "hold", e.hold,
				"issuer", e.ev.Account.Issuer, "user", e.ev.Account.User, "window", e.ev.Account.Window,
				"window_start", e.ev.Account.WindowStart, "kind", e.ev.Kind, "model", e.ev.Model,
				"ai_micros", e.ev.AIMicros, "compute_seconds", e.ev.ComputeSeconds, "at", e.ev.At)
		default:
			s.setDown(true)
			s.m.failures.Inc()
			s.log.Debug("ledger still unavailable: replay postponed", "err", err, "depth", s.Depth())
			return false
		}

		s.mu.Lock()
		s.queue[0] = entry{}
		s.queue = s.queue[1:]
		s.delivered++
		full := len(s.queue) > 0 && s.delivered >= max(len(s.queue), compactAfter)
		s.mu.Unlock()
		if full {
			s.compact()
		}
	}
}

// deliver hands one spooled entry to the ledger: a settle settles its hold, so the hold stops counting at
// once instead of at its expiry.
func (s *Spool) deliver(ctx context.Context, e entry) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	if e.hold == "" || s.reserver == nil {
		return s.ledger.Record(ctx, e.ev)
	}
	err := s.reserver.Settle(ctx, e.hold, e.ev)
	if errors.Is(err, billing.ErrInvalid) && !errors.Is(err, billing.ErrUnavailable) {
		// The hold is another account's: a caller bug the ledger refuses. The usage happened all the same.
		s.log.Error("spooled settle refused: recording its usage without the hold", "err", err, "hold", e.hold, "key", e.ev.Key)
		return s.ledger.Record(ctx, e.ev)
	}
	return err
}

// compact removes delivered events from the file: it truncates an emptied spool and rewrites one that
// still holds events. A failed compaction only leaves delivered events in the file, which replay as
// no-ops.
func (s *Spool) compact() {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.compactLocked(); err != nil {
		s.log.Warn("cannot compact the usage spool: delivered events stay in it", "err", err)
	}
	if len(s.queue) == 0 {
		select {
		case <-s.empty:
		default:
			close(s.empty)
			s.log.Info("usage spool drained: the ledger has every spooled event")
		}
	}
}

// compactLocked is compact for a caller holding syncMu and mu. Every line written is then either
// delivered or in the new file, fsynced.
func (s *Spool) compactLocked() error {
	if s.delivered == 0 {
		return nil
	}
	if len(s.queue) == 0 {
		if err := s.f.Truncate(0); err != nil {
			return err
		}
		if err := s.f.Sync(); err != nil {
			return err
		}
		s.size = 0
	} else {
		f, size, err := rewrite(s.path, s.queue)
		if err != nil {
			return err
		}
		s.f.Close()
		s.f, s.size = f, size
	}
	s.delivered = 0
	s.synced = s.written
	return nil
}
