package nomad

import "errors"

var (
	// ErrUnavailable: Nomad could not be reached, answered 5xx or 429, or timed out. Retrying later may work.
	ErrUnavailable = errors.New("nomad unavailable")
	// ErrNoCapacity: no Nomad client can place the sandbox (resources exhausted, no node with the driver).
	ErrNoCapacity = errors.New("no nomad client can place the sandbox")
	// ErrAllocationFailed: the sandbox's allocation stopped (task failed, allocation failed or lost) before
	// its runner was ready. The error message carries the task's last events.
	ErrAllocationFailed = errors.New("sandbox allocation failed")
	// ErrInvalidSpec: the spec cannot become a job (malformed sandbox id, epoch, or user strings that Nomad
	// would interpolate at run time).
	ErrInvalidSpec = errors.New("invalid sandbox spec")
)
