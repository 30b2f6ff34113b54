package billing

import (
	"context"
	"fmt"
	"strings"
)

// Admit decides whether acct may start more work under b (DESIGN.md §5): nil while usage is below the
// budget in both dimensions, an error wrapping ErrBudgetExceeded naming the spent dimensions otherwise. A
// zero budget allows nothing; a negative one is unlimited. The ledger is asked even when both dimensions are
// unlimited, so an unreachable ledger refuses new sessions (DESIGN.md §10); its error, wrapping
// ErrUnavailable, is passed through.
func Admit(ctx context.Context, l Ledger, acct Account, b Budget) error {
	u, err := l.Usage(ctx, acct)
	if err != nil {
		return fmt.Errorf("admit %s: %w", describe(acct), err)
	}
	var spent []string
	if b.AIMicros >= 0 && u.AIMicros >= b.AIMicros {
		spent = append(spent, fmt.Sprintf("ai %d of %d microdollars", u.AIMicros, b.AIMicros))
	}
	if b.ComputeSeconds >= 0 && u.ComputeSeconds >= b.ComputeSeconds {
		spent = append(spent, fmt.Sprintf("compute %d of %d seconds", u.ComputeSeconds, b.ComputeSeconds))
	}
	if len(spent) > 0 {
		return fmt.Errorf("admit %s: spent %s: %w", describe(acct), strings.Join(spent, " and "), ErrBudgetExceeded)
	}
	return nil
}

func describe(a Account) string {
	if a.Window == Lifetime {
		return fmt.Sprintf("%s/%s lifetime", a.Issuer, a.User)
	}
	return fmt.Sprintf("%s/%s %s from %s", a.Issuer, a.User, a.Window, a.WindowStart.UTC().Format("2006-01-02T15:04:05Z"))
}
