package regions

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Announcer keeps one edge's entry in a Directory: Run announces it every TTL/3 until its context ends,
// then withdraws it. Drain marks the edge draining at once (clients are steered to other regions).
type Announcer struct {
	Dir    Directory
	Edge   Edge
	TTL    time.Duration // default 30s
	Logger *slog.Logger

	mu       sync.Mutex
	draining bool
	wake     chan struct{}
}

func (a *Announcer) ttl() time.Duration {
	if a.TTL <= 0 {
		return 30 * time.Second
	}
	return a.TTL
}

// Run announces the edge until ctx ends, retrying failures at the next period (failures are logged when
// they begin), then withdraws it (bounded by 5 s). The first announcement's error is returned at once if
// the entry is invalid.
func (a *Announcer) Run(ctx context.Context) error {
	log := a.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := a.Edge.Validate(); err != nil {
		return err
	}
	a.mu.Lock()
	if a.wake == nil {
		a.wake = make(chan struct{}, 1)
	}
	wake := a.wake
	a.mu.Unlock()
	t := time.NewTicker(a.ttl() / 3)
	defer t.Stop()
	failing := false
	for {
		e := a.Edge
		a.mu.Lock()
		e.Draining = a.draining
		a.mu.Unlock()
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := a.Dir.Announce(actx, e, a.ttl())
		cancel()
		switch {
		case err != nil && !failing:
			log.Warn("announce this edge; retrying", "err", err)
			failing = true
		case err == nil && failing:
			log.Info("edge announced again")
			failing = false
		}
		select {
		case <-ctx.Done():
			wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := a.Dir.Withdraw(wctx, e.Region, e.ID); err != nil {
				log.Warn("withdraw this edge (it expires on its own)", "err", err)
			}
			return nil
		case <-t.C:
		case <-wake:
		}
	}
}

// Drain marks the edge draining; Run announces it at once.
func (a *Announcer) Drain() {
	a.mu.Lock()
	a.draining = true
	if a.wake == nil {
		a.wake = make(chan struct{}, 1)
	}
	wake := a.wake
	a.mu.Unlock()
	select {
	case wake <- struct{}{}:
	default:
	}
}
