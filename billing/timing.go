package billing

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// LedgerTimer observes how long ledger calls take, by operation and outcome, in the histogram
// warren_ledger_seconds (issue 5: ledger latency). It wraps any Ledger or Reserver; the wrappers change
// nothing else. Safe for concurrent use.
type LedgerTimer struct{ h *prometheus.HistogramVec }

// NewLedgerTimer registers the histogram with reg (nil: not registered, still observed).
func NewLedgerTimer(reg prometheus.Registerer) (*LedgerTimer, error) {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "warren_ledger_seconds",
		Help:    "Latency of ledger calls by operation (record, usage, reserve, settle, release) and outcome (ok, rejected, unavailable, error).",
		Buckets: prometheus.ExponentialBuckets(0.0002, 2, 14), // 0.2 ms … 1.6 s
	}, []string{"op", "outcome"})
	if reg != nil {
		if err := reg.Register(h); err != nil {
			return nil, fmt.Errorf("register ledger latency: %w", err)
		}
	}
	return &LedgerTimer{h: h}, nil
}

func (t *LedgerTimer) observe(op string, begin time.Time, err error) {
	outcome := "ok"
	switch {
	case err == nil:
	case errors.Is(err, ErrUnavailable):
		outcome = "unavailable"
	case errors.Is(err, ErrBudgetExceeded), errors.Is(err, ErrInvalid), errors.Is(err, ErrNotFound):
		outcome = "rejected"
	default:
		outcome = "error"
	}
	t.h.WithLabelValues(op, outcome).Observe(time.Since(begin).Seconds())
}

// Ledger wraps l.
func (t *LedgerTimer) Ledger(l Ledger) Ledger { return timedLedger{l: l, t: t} }

// Reserver wraps r.
func (t *LedgerTimer) Reserver(r Reserver) Reserver { return timedReserver{r: r, t: t} }

type timedLedger struct {
	l Ledger
	t *LedgerTimer
}

func (w timedLedger) Record(ctx context.Context, ev UsageEvent) error {
	begin := time.Now()
	err := w.l.Record(ctx, ev)
	w.t.observe("record", begin, err)
	return err
}

func (w timedLedger) Usage(ctx context.Context, acct Account) (Usage, error) {
	begin := time.Now()
	u, err := w.l.Usage(ctx, acct)
	w.t.observe("usage", begin, err)
	return u, err
}

type timedReserver struct {
	r Reserver
	t *LedgerTimer
}

func (w timedReserver) Reserve(ctx context.Context, id string, acct Account, limit, want int64, ttl time.Duration) (int64, error) {
	begin := time.Now()
	n, err := w.r.Reserve(ctx, id, acct, limit, want, ttl)
	w.t.observe("reserve", begin, err)
	return n, err
}

func (w timedReserver) Settle(ctx context.Context, id string, ev UsageEvent) error {
	begin := time.Now()
	err := w.r.Settle(ctx, id, ev)
	w.t.observe("settle", begin, err)
	return err
}

func (w timedReserver) Release(ctx context.Context, id string) error {
	begin := time.Now()
	err := w.r.Release(ctx, id)
	w.t.observe("release", begin, err)
	return err
}
