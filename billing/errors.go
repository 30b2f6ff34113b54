package billing

import (
	"errors"
	"fmt"
)

var (
	// ErrBudgetExceeded: the window's budget is spent.
	ErrBudgetExceeded = errors.New("budget exceeded")
	// ErrUnavailable: the ledger could not be reached.
	ErrUnavailable = errors.New("ledger unavailable")
	// ErrInvalid: an event or account is malformed.
	ErrInvalid = errors.New("invalid ledger input")
)

// ClassifyStore is how every adapter (billing/sqlite, billing/cockroach) reports the error of a failed
// operation, so that callers act on billing's sentinels alone. The policy:
//
//   - an error wrapping a request error (ErrInvalid, ErrNotFound, ErrConflict, ErrBudgetExceeded,
//     ErrConcurrencyLimit) answers the request and is returned as it is;
//   - any other error is the store failing. It wraps ErrUnavailable (trying again later may help: the edge
//     refuses new work, the runner spools usage, the admin API answers 503) when transient is nil or
//     transient(err) holds, and is otherwise returned as it is: an internal error (the admin API answers
//     500) that retrying will not mend.
//
// The ledger's own operations (Usage, Record, Reserve, Settle, session leases) pass nil on both stores: to
// their callers any store failure is an outage to fail closed or spool through. The admin stores pass the
// store's notion of transient: CockroachDB's driver tells an unreachable database, a commit of unknown
// outcome and serialization failures retried out from the rest (cockroachdb.Classify); database/sql's
// SQLite errors carry no such class (its failures are a file locked, closed or unwritable), so the SQLite
// admin store passes nil. ClassifyStore(nil, ...) is nil.
func ClassifyStore(err error, transient func(error) bool) error {
	if err == nil {
		return nil
	}
	for _, answer := range []error{ErrInvalid, ErrNotFound, ErrConflict, ErrBudgetExceeded, ErrConcurrencyLimit} {
		if errors.Is(err, answer) {
			return err
		}
	}
	if transient != nil && !transient(err) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}
