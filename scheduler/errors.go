package scheduler

import (
	"errors"
	"fmt"
	"time"
)

var (
	// ErrNotFound: no placement row for that user (from a driver: no such allocation).
	ErrNotFound = errors.New("placement not found")
	// ErrConflict: a compare-and-set claim lost to another claimant.
	ErrConflict = errors.New("placement claimed concurrently")
	// ErrNotASandbox: a driver was asked about an allocation that is not a sandbox's.
	ErrNotASandbox = errors.New("not a sandbox allocation")
	// ErrStaleEpoch: a write carried an epoch older than the stored one.
	ErrStaleEpoch = errors.New("stale placement epoch")
	// ErrOwned: a claim was refused because another region holds the placement (*OwnedError).
	ErrOwned = errors.New("placement held by another region")
)

// OwnedError is a claim refused because Region holds the placement at Epoch until Lease: the user is
// served there.
type OwnedError struct {
	Region string
	Epoch  int64
	Lease  time.Time
}

func (e *OwnedError) Error() string {
	return fmt.Sprintf("placement held by region %s at epoch %d until %s", e.Region, e.Epoch, e.Lease.UTC().Format(time.RFC3339Nano))
}

// Is makes errors.Is(err, ErrOwned) true.
func (e *OwnedError) Is(target error) bool { return target == ErrOwned }

// Holds reports whether p, as stored, keeps a claim from region out at now: another region holds it,
// starting or running, under a lease that has not lapsed. Adapters decide claims by it.
func Holds(p Placement, region string, now time.Time) bool {
	return p.Region != region && p.State != StateAsleep && p.Lease.After(now)
}
