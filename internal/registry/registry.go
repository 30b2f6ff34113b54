// Package registry is the Registry port (docs/ARCHITECTURE.md#owner-lock): where a user's runner listens and
// which epoch owns it. The edge resolves users through it, the scheduler (or the runner itself in production)
// registers them. Adapters: mem (in-process, warren dev) and consul (production: runners hold their owner
// key).
package registry

import (
	"context"
	"errors"
	"time"
)

// Entry is one live runner.
type Entry struct {
	Issuer string
	User   string
	Epoch  int64
	Region string
	Alloc  string // the driver's id for the sandbox (a pid locally, an allocation id on Nomad)
	Addr   string // host:port of the runner's internal API
	Key    string // bearer key the edge presents to the runner; never sent to clients
	Since  time.Time
}

// Registry maps (issuer, user) to its live runner. Safe for concurrent use.
type Registry interface {
	// Lookup returns the live runner of (issuer, user) or ErrNotFound.
	Lookup(ctx context.Context, issuer, user string) (Entry, error)
	// Register records e as the owner. ErrStale when an entry with a higher epoch is registered.
	Register(ctx context.Context, e Entry) error
	// Deregister removes the entry of (issuer, user) only if it still has the given epoch.
	Deregister(ctx context.Context, issuer, user string, epoch int64) error
}

var (
	ErrNotFound = errors.New("no live runner")
	ErrStale    = errors.New("stale epoch")
	// ErrUnavailable wraps failures to reach the registry's store (unreachable, timed out, 5xx).
	ErrUnavailable = errors.New("registry unavailable")
)
