package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/warren-mesh/warren/billing"
)

// State of a placement (docs/ARCHITECTURE.md#placements).
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
	Meter   Meter // as last set by SetMeter; zero after a claim
	// Lease is when the owner's hold on a starting or running placement lapses unless renewed (zero:
	// never held). Until then no other region may claim it (docs/ARCHITECTURE.md#leases).
	Lease time.Time
}

// Placements stores placements. Implementations are safe for concurrent use by many processes.
type Placements interface {
	// Get returns the placement of (issuer, user) or ErrNotFound.
	Get(ctx context.Context, issuer, user string) (Placement, error)
	// Claim atomically moves the placement to {region, epoch: expect+1, state: starting, alloc: "", lease}
	// if its stored epoch is expect (0 meaning no row yet), and returns it. ErrConflict when another claim
	// won. A placement that another region holds (starting or running, its lease not lapsed by the
	// claimant's clock) is not claimed: *OwnedError (errors.Is ErrOwned) names the region.
	Claim(ctx context.Context, issuer, user, region string, expect int64, lease time.Time) (Placement, error)
	// Renew extends the lease of the placement to lease if its stored epoch is epoch (a lease is never
	// shortened: renewals that overlap leave the latest end); ErrStaleEpoch otherwise, ErrNotFound without
	// a placement.
	Renew(ctx context.Context, issuer, user string, epoch int64, lease time.Time) error
	// Update sets state and alloc if the stored epoch equals epoch; ErrStaleEpoch otherwise.
	Update(ctx context.Context, issuer, user string, epoch int64, state State, alloc string) error
	// SetMeter stores m with the placement if its stored epoch is epoch; ErrStaleEpoch otherwise,
	// ErrNotFound without a placement. A claim clears it.
	SetMeter(ctx context.Context, issuer, user string, epoch int64, m Meter) error
	// Active lists region's placements in state starting or running, with their meters; a meter that
	// cannot be read is returned unset.
	Active(ctx context.Context, region string) ([]Placement, error)
}

// Meter is what a running sandbox's compute is charged to: its user's account window, the token's window
// anchor and the compute seconds allowed in a window. It is stored with the placement (SetMeter) so that a
// scheduler that restarts can resume metering the runners it left serving (Scheduler.Adopt).
type Meter struct {
	Window      billing.Window `json:"window"`
	WindowStart time.Time      `json:"window_start,omitzero"` // the account's window start when Anchor is zero
	Anchor      time.Time      `json:"anchor,omitzero"`       // non-zero: the window rolls over from it
	Limit       int64          `json:"limit"`                 // compute seconds of a window; < 0 unlimited, 0 not enforced
	// Bucket is the length in seconds of the metering buckets of the scheduler that stored the meter: a
	// successor re-meters the recent past only under the same buckets (0: none known).
	Bucket int64 `json:"bucket_s,omitempty"`
}

// Set reports whether m names an account (placements written before meters were stored have none).
func (m Meter) Set() bool { return m.Window != "" }

// Equal reports whether m and o charge the same (times compared as instants, as a store returns them).
func (m Meter) Equal(o Meter) bool {
	return m.Window == o.Window && m.WindowStart.Equal(o.WindowStart) && m.Anchor.Equal(o.Anchor) &&
		m.Limit == o.Limit && m.Bucket == o.Bucket
}

// EncodeMeter is how adapters store m: JSON, or "" for an unset meter.
func EncodeMeter(m Meter) (string, error) {
	if !m.Set() {
		return "", nil
	}
	if !m.Window.Valid() {
		return "", fmt.Errorf("meter: unknown window %q", m.Window)
	}
	b, err := json.Marshal(m)
	return string(b), err
}

// DecodeMeter reads what EncodeMeter wrote.
func DecodeMeter(s string) (Meter, error) {
	var m Meter
	if s == "" {
		return m, nil
	}
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return Meter{}, fmt.Errorf("stored meter: %w", err)
	}
	return m, nil
}
