package billing

import (
	"context"
	"fmt"
	"strings"
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

// CheckUsage is Admit's decision on a usage already read: an error wrapping ErrBudgetExceeded when u has
// spent b (a part of b at or over its allowance), nil otherwise.
func CheckUsage(acct Account, u Usage, b Budget) error {
	var spent []string
	if b.AIMicros >= 0 && u.AIMicros >= b.AIMicros {
		spent = append(spent, fmt.Sprintf("ai %d of %d microdollars", u.AIMicros, b.AIMicros))
	}
	if b.ComputeSeconds >= 0 && u.ComputeSeconds >= b.ComputeSeconds {
		spent = append(spent, fmt.Sprintf("compute %d of %d seconds", u.ComputeSeconds, b.ComputeSeconds))
	}
	if len(spent) > 0 {
		return fmt.Errorf("admit %s: spent %s: %w", acct, strings.Join(spent, " and "), ErrBudgetExceeded)
	}
	return nil
}
