package snapshot

import "errors"

// Sentinel errors, tested with errors.Is.
var (
	// ErrConfig: the Config is invalid; the wrapped message says which field.
	ErrConfig = errors.New("invalid snapshot config")
	// ErrFenced: a snapshot of a newer epoch is already latest, so this runner is stale. Nothing it wrote
	// became latest; it should stop (DESIGN.md §4).
	ErrFenced = errors.New("snapshot fenced by a newer epoch")
	// ErrCorrupt: a manifest, the latest pointer or a blob read from the store is malformed, of an
	// unknown version, unsafe (a path leaving its directory), missing, or does not match its hash.
	ErrCorrupt = errors.New("corrupt snapshot")
)
