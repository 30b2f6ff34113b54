package billing

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Admit decides whether acct may start more work under b (docs/ARCHITECTURE.md#admission): nil while usage is
// below the budget in both dimensions, an error wrapping ErrBudgetExceeded naming the spent dimensions
// otherwise. A zero budget allows nothing; a negative one is unlimited. The ledger is asked even when both
// dimensions are unlimited, so an unreachable ledger refuses new sessions
// (docs/ARCHITECTURE.md#failure-behaviour); its error, wrapping ErrUnavailable, is passed through.
func Admit(ctx context.Context, l Ledger, acct Account, b Budget) error {
	u, err := l.Usage(ctx, acct)
	if err != nil {
		return fmt.Errorf("admit %s: %w", acct, err)
	}
	return CheckUsage(acct, u, b)
}

// CheckUsage is Admit's decision on a usage already read: a *BudgetError (wrapping ErrBudgetExceeded)
// when u has spent b (a part of b at or over its allowance), nil otherwise.
func CheckUsage(acct Account, u Usage, b Budget) error {
	e := &BudgetError{Account: acct, Budget: b, Usage: u,
		AI:      b.AIMicros >= 0 && u.AIMicros >= b.AIMicros,
		Compute: b.ComputeSeconds >= 0 && u.ComputeSeconds >= b.ComputeSeconds}
	if !e.AI && !e.Compute {
		return nil
	}
	return e
}

// BudgetError is a refusal because the budget of the account's window is spent: which parts (AI,
// compute), their limits and what is used, and when the window resets.
type BudgetError struct {
	Account Account
	Budget  Budget
	Usage   Usage
	// AI and Compute say which parts are spent (at least one).
	AI, Compute bool
	// ResetsAt is when the next window begins (zero: a lifetime budget, which never resets); the caller
	// that knows the window's anchor sets it (NextWindowStart).
	ResetsAt time.Time
}

func (e *BudgetError) Error() string {
	var spent []string
	if e.AI {
		spent = append(spent, fmt.Sprintf("ai %d of %d microdollars", e.Usage.AIMicros, e.Budget.AIMicros))
	}
	if e.Compute {
		spent = append(spent, fmt.Sprintf("compute %d of %d seconds", e.Usage.ComputeSeconds, e.Budget.ComputeSeconds))
	}
	return fmt.Sprintf("admit %s: spent %s: %s", e.Account, strings.Join(spent, " and "), ErrBudgetExceeded)
}

func (e *BudgetError) Unwrap() error { return ErrBudgetExceeded }

// Describe says the refusal in words for the person who meets it: which budget, used of its limit, the
// window, and when it resets, e.g. "the AI budget of this day is spent: $2.000000 of $2.000000 used
// (window from 2026-11-29T00:00:00Z; resets at 2026-11-30T00:00:00Z)".
func (e *BudgetError) Describe() string {
	var parts []string
	if e.AI {
		parts = append(parts, fmt.Sprintf("the AI budget %s is spent: %s of %s used", e.of(), dollars(e.Usage.AIMicros), dollars(e.Budget.AIMicros)))
	}
	if e.Compute {
		parts = append(parts, fmt.Sprintf("the compute budget %s is spent: %d of %d sandbox seconds used", e.of(), e.Usage.ComputeSeconds, e.Budget.ComputeSeconds))
	}
	msg := strings.Join(parts, "; ")
	switch {
	case e.Account.Window == Lifetime:
		msg += " (a lifetime budget: it does not reset; raise the quota or mint a larger budget)"
	case !e.ResetsAt.IsZero():
		msg += fmt.Sprintf(" (window from %s; resets at %s)", e.Account.WindowStart.UTC().Format(time.RFC3339), e.ResetsAt.UTC().Format(time.RFC3339))
	}
	return msg
}

func (e *BudgetError) of() string {
	if e.Account.Window == Lifetime {
		return "of this user"
	}
	return "of this " + string(e.Account.Window)
}

// Details are the refusal's fields for wire.Error.Details: budgets ("ai", "compute"), the limits and
// usage of each spent part, the window, its start and reset time (RFC 3339; none for lifetime).
func (e *BudgetError) Details() map[string]any {
	d := map[string]any{"window": string(e.Account.Window)}
	var budgets []string
	if e.AI {
		budgets = append(budgets, "ai")
		d["ai_limit_microdollars"], d["ai_used_microdollars"] = e.Budget.AIMicros, e.Usage.AIMicros
	}
	if e.Compute {
		budgets = append(budgets, "compute")
		d["compute_limit_seconds"], d["compute_used_seconds"] = e.Budget.ComputeSeconds, e.Usage.ComputeSeconds
	}
	d["budgets"] = budgets
	if e.Account.Window != Lifetime {
		d["window_start"] = e.Account.WindowStart.UTC().Format(time.RFC3339)
		if !e.ResetsAt.IsZero() {
			d["resets_at"] = e.ResetsAt.UTC().Format(time.RFC3339)
		}
	}
	return d
}

// dollars formats microdollars as dollars to the microdollar.
func dollars(micros int64) string {
	sign := ""
	if micros < 0 {
		sign, micros = "-", -micros
	}
	return fmt.Sprintf("%s$%d.%06d", sign, micros/1_000_000, micros%1_000_000)
}
