package roles

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/warren-mesh/warren/billing"
	billingsqlite "github.com/warren-mesh/warren/billing/sqlite"
	"github.com/warren-mesh/warren/internal/registry"
)

// errFenced is how a fenced runner ends (its lock lost, its lease lapsed, a newer snapshot): a non-zero exit,
// so the driver sees a failure.
var errFenced = errors.New("runner fenced: it may no longer serve its user (owner lock lost, lease lapsed, or a newer epoch's snapshot)")

// runnerLedger is what a runner's model proxy needs: recording, reservations and the price overrides.
type runnerLedger interface {
	billing.Ledger
	billing.Reserver
	billing.PriceStore
}

// openRunnerLedger opens the SQLite ledger of warren dev (-ledger-sqlite) or the CockroachDB one (-db).
func openRunnerLedger(ctx context.Context, sqlitePath string, prod *prodFlags) (runnerLedger, func(), error) {
	switch {
	case sqlitePath != "" && prod.db != "":
		return nil, nil, errors.New("-ledger-sqlite and -db exclude each other")
	case sqlitePath != "":
		l, err := billingsqlite.New(ctx, billingsqlite.Config{Path: sqlitePath})
		if err != nil {
			return nil, nil, fmt.Errorf("ledger: %w", err)
		}
		return l, func() { _ = l.Close() }, nil
	case prod.db != "":
		pool, l, err := prod.openLedger(ctx)
		if err != nil {
			return nil, nil, fmt.Errorf("ledger: %w", err)
		}
		return l, pool.Close, nil
	}
	return nil, nil, errors.New("-claude-cli needs a ledger to meter model calls (-ledger-sqlite or -db)")
}

// holdOwnerLock registers the runner in Consul and holds its user's owner lock. lost is closed when the
// lock is gone; release gives it up (on a normal exit).
func holdOwnerLock(ctx context.Context, prod *prodFlags, e registry.Entry, log *slog.Logger) (lost <-chan struct{}, release func(), err error) {
	reg, err := prod.openConsul(false)
	if err != nil {
		return nil, nil, err
	}
	hctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	lease, err := reg.Hold(hctx, e)
	if err != nil {
		_ = reg.Close(context.WithoutCancel(ctx))
		return nil, nil, fmt.Errorf("hold the owner lock (epoch %d): %w", e.Epoch, err)
	}
	log.Info("owner lock held", "alloc", e.Alloc, "addr", e.Addr, "lock_index", lease.LockIndex())
	return lease.Lost(), func() {
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := lease.Release(rctx); err != nil {
			log.Warn("release the owner lock", "err", err)
		}
		_ = reg.Close(context.Background())
	}, nil
}
