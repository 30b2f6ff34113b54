package scheduler

import "errors"

var (
	// ErrNotFound: no placement row for that user (from a driver: no such allocation).
	ErrNotFound = errors.New("placement not found")
	// ErrConflict: a compare-and-set claim lost to another claimant.
	ErrConflict = errors.New("placement claimed concurrently")
	// ErrNotASandbox: a driver was asked about an allocation that is not a sandbox's.
	ErrNotASandbox = errors.New("not a sandbox allocation")
	// ErrStaleEpoch: a write carried an epoch older than the stored one.
	ErrStaleEpoch = errors.New("stale placement epoch")
)
