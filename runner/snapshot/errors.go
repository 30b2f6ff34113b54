package snapshot

import "errors"

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
	// ErrStoredBytesQuota: the snapshot would take the bytes the prefix holds past Config.StoredBytesLimit.
	// It is refused before the upload that would cross the limit; the latest snapshot stays what it was.
	// The error is also a *wire.Error of code resource_exhausted.
	ErrStoredBytesQuota = errors.New("stored-bytes quota exceeded")
)
