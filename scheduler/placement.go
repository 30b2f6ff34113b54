package scheduler

import (
	"context"
	"time"
)

// State of a placement (DESIGN.md §4).
type State string

const (
	StateStarting State = "starting"
	StateRunning  State = "running"
	StateAsleep   State = "asleep"
)

// Placement says which region owns (Issuer, User), under which epoch, and in what state. Epoch is the
// fencing token: it only grows, by one per claim.
type Placement struct {
	Issuer  string
	User    string
	Region  string
	Epoch   int64
	State   State
	Alloc   string
	Updated time.Time
}

// Placements stores placements. Implementations are safe for concurrent use by many processes.
type Placements interface {
	// Get returns the placement of (issuer, user) or ErrNotFound.
	Get(ctx context.Context, issuer, user string) (Placement, error)
	// Claim atomically moves the placement to {region, epoch: expect+1, state: starting, alloc: ""} if its
	// stored epoch is expect (0 meaning no row yet), and returns it. ErrConflict when another claim won.
	Claim(ctx context.Context, issuer, user, region string, expect int64) (Placement, error)
	// Update sets state and alloc if the stored epoch equals epoch; ErrStaleEpoch otherwise.
	Update(ctx context.Context, issuer, user string, epoch int64, state State, alloc string) error
}
