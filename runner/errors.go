package runner

import (
	"errors"

	"github.com/warren-mesh/warren/runner/isolate"
)

// Sentinel errors.
var (
	// ErrConfig: the Config is invalid; the wrapped message says which field.
	ErrConfig = errors.New("invalid runner config")
	// ErrNoBwrap: sandboxing is on but bubblewrap was not found.
	ErrNoBwrap = isolate.ErrNoBwrap
	// ErrAlreadyRunning: Run was called more than once.
	ErrAlreadyRunning = errors.New("runner already running")
	// ErrShuttingDown is the cancellation cause of in-flight work when Run's context ends.
	ErrShuttingDown = errors.New("runner shutting down")
)
