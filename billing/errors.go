package billing

import "errors"

var (
	// ErrBudgetExceeded: the window's budget is spent.
	ErrBudgetExceeded = errors.New("budget exceeded")
	// ErrUnavailable: the ledger could not be reached.
	ErrUnavailable = errors.New("ledger unavailable")
	// ErrInvalid: an event or account is malformed.
	ErrInvalid = errors.New("invalid ledger input")
)
