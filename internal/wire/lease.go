package wire

import (
	"time"
)

// Lease is what a scheduler tells a runner after each renewal of its placement's lease
// (docs/ARCHITECTURE.md#leases): the epoch the runner serves and when the lease ends unless renewed again.
// The runner stops itself shortly before Until, so that no other region can claim its user while it still
// serves. PUT /v1/lease on the runner's API, with its bearer key.
type Lease struct {
	Epoch int64     `json:"epoch"`
	Until time.Time `json:"until"`
}

// MaxLeaseBody bounds a Lease request body.
const MaxLeaseBody = 1 << 10

// DecodeLease parses a Lease body: JSON with exactly these fields, a positive epoch and a set Until.
func DecodeLease(b []byte) (Lease, error) {
	var l Lease
	if len(b) > MaxLeaseBody {
		return Lease{}, Errorf(PayloadTooLarge, "lease body over %d bytes", MaxLeaseBody)
	}
	if err := DecodeStrict(b, &l); err != nil {
		return Lease{}, JSONError(err, "lease body")
	}
	if l.Epoch <= 0 || l.Until.IsZero() {
		return Lease{}, Errorf(InvalidArgument, "lease body: epoch and until are required")
	}
	return l, nil
}
