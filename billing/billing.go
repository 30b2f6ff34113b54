// Package billing holds Warren's money: the Ledger port (budgets, usage events), admission checks, and the
// billing role's admin HTTP API. Adapters: sqlite (warren dev) and cockroach (production); the ports and
// their adapters are listed in docs/ARCHITECTURE.md#ports-and-adapters.
package billing

import (
	"context"
	"time"
)

// Window is a budget window (docs/ARCHITECTURE.md#budget-claims).
type Window string

const (
	Hour     Window = "hour"
	Day      Window = "day"
	Week     Window = "week"
	Month    Window = "month"
	Lifetime Window = "lifetime"
)

// Account names one user's budget window: usage is summed per account.
type Account struct {
	Issuer      string
	User        string
	Window      Window
	WindowStart time.Time // zero for lifetime
}

// Budget is a limit; zero means "no allowance" and a negative value means unlimited.
type Budget struct {
	AIMicros       int64
	ComputeSeconds int64
}

// Usage is what an account has used; HeldAIMicros is what unexpired holds reserve on top.
type Usage struct {
	AIMicros       int64
	ComputeSeconds int64
	HeldAIMicros   int64
}

// Event kinds.
const (
	KindAI      = "ai"
	KindCompute = "compute"
)

// UsageEvent is one idempotent usage record. Key is unique per event (source and sequence); recording the
// same key twice counts once.
type UsageEvent struct {
	Key            string
	Account        Account
	Kind           string
	Model          string
	AIMicros       int64
	ComputeSeconds int64
	At             time.Time
}

// Ledger records usage and answers how much of a window is spent. Safe for concurrent use.
type Ledger interface {
	// Usage returns the usage summed over the account's window. A ledger that cannot be reached answers an
	// error wrapping ErrUnavailable.
	Usage(ctx context.Context, acct Account) (Usage, error)
	// Record stores ev once; a repeated Key is a no-op returning nil.
	Record(ctx context.Context, ev UsageEvent) error
}
