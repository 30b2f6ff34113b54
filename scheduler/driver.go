package scheduler

import (
	"context"
)

// Spec is what a driver needs to start one user's sandbox.
type Spec struct {
	ID     string // stable per (Issuer, User): registry.SandboxID
	Issuer string
	User   string
	Epoch  int64
	Region string
	// Template, when set, is the runner's -template (a valid template name, checked by the token and by
	// the scheduler's API): the workspace template a sandbox without a snapshot of its own starts from.
	Template string
}

// Sandbox is a started runner.
type Sandbox struct {
	Alloc  string          // the driver's id (a pid locally, an allocation id on Nomad)
	Addr   string          // host:port of the runner's internal API
	Key    string          // bearer key the runner requires from the edge
	Exited <-chan struct{} // closed when the runner is gone
}

// Driver starts and stops sandboxes. Safe for concurrent use.
type Driver interface {
	// Start launches a runner for spec and returns once it is listening. It fails when ctx ends first,
	// leaving nothing running.
	Start(ctx context.Context, spec Spec) (Sandbox, error)
	// Stop ends the sandbox alloc and returns once it is gone or ctx ends. Stopping a gone sandbox is nil.
	Stop(ctx context.Context, alloc string) error
}

// Adopter is a Driver that can follow a sandbox another scheduler process started (Scheduler.Adopt).
type Adopter interface {
	// Adopt follows allocation alloc, started for spec, and returns it with Alloc and Exited set (the
	// caller knows the address and key from the registry). An allocation the driver no longer knows is
	// ErrNotFound; one that has ended is returned with Exited already closed.
	Adopt(ctx context.Context, spec Spec, alloc string) (Sandbox, error)
}
