package snapshot

import (
	"context"
	"errors"
	"fmt"

	"github.com/warren-mesh/warren/internal/blob"
	"github.com/warren-mesh/warren/internal/wire"
)

// Sentinel errors, tested with errors.Is.
var (
	// ErrConfig: the Config is invalid; the wrapped message says which field.
	ErrConfig = errors.New("invalid snapshot config")
	// ErrFenced: a snapshot of a newer epoch is already latest, so this runner is stale. Nothing it wrote
	// became latest; it should stop (docs/ARCHITECTURE.md#self-fencing).
	ErrFenced = errors.New("snapshot fenced by a newer epoch")
	// ErrCorrupt: a manifest, the latest pointer or a blob read from the store is malformed, of an
	// unknown version, unsafe (a path leaving its directory), missing, or does not match its hash.
	ErrCorrupt = errors.New("corrupt snapshot")
	// ErrTooSlow: the snapshot took more than half the garbage collector's grace period, after which a
	// collector may delete blobs it relies on, so it was not committed; the previous one stays latest and
	// the next snapshot tries again.
	ErrTooSlow = errors.New("snapshot too slow to commit safely")
	// ErrStoredBytesQuota: the snapshot would take the bytes the prefix holds past Config.StoredBytesLimit.
	// It is refused before the upload that would cross the limit; the latest snapshot stays what it was.
	// The error is also a *wire.Error of code resource_exhausted.
	ErrStoredBytesQuota = errors.New("stored-bytes quota exceeded")
)

// RegionUnavailableError: the blob store of Region could not be read. Its latest snapshot may be the
// newest of the sandbox, so Latest and Restore fail rather than restore an older one or nothing: the
// runner does not start until the region's store answers again (docs/ARCHITECTURE.md#regions). Err is
// the store's error (errors.Is(err, blob.ErrUnavailable) for a connection failure or a timeout). Its wire
// code is unavailable, with the region in the details. Region is "" in a single-region deployment.
type RegionUnavailableError struct {
	Region string
	Err    error
}

func (e *RegionUnavailableError) Error() string {
	if e.Region == "" {
		return fmt.Sprintf("snapshot store unavailable: %v", e.Err)
	}
	return fmt.Sprintf("snapshot store of region %s unavailable: %v", e.Region, e.Err)
}

func (e *RegionUnavailableError) Unwrap() error { return e.Err }

// As makes the error a *wire.Error of code unavailable (wire.CodeOf, wire.Public).
func (e *RegionUnavailableError) As(target any) bool {
	p, ok := target.(**wire.Error)
	if !ok {
		return false
	}
	msg := "the snapshot store is unavailable; the sandbox cannot resume until it answers"
	if e.Region != "" {
		msg = fmt.Sprintf("the snapshot store of region %s is unavailable; the sandbox cannot resume until it answers", e.Region)
	}
	*p = wire.Wrap(wire.Unavailable, e.Err, msg).WithDetails(map[string]any{"region": e.Region})
	return true
}

// unavailable wraps err, from a call to region's store, as a *RegionUnavailableError, unless it is nil,
// a missing object (the caller's to judge) or the end of ctx (the caller gave up, the store did not
// fail).
func unavailable(ctx context.Context, region string, err error) error {
	if err == nil || errors.Is(err, blob.ErrNotFound) || ctx.Err() != nil {
		return err
	}
	var ru *RegionUnavailableError
	if errors.As(err, &ru) {
		return err
	}
	return &RegionUnavailableError{Region: region, Err: err}
}
