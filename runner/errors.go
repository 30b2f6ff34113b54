package runner

import (
	"errors"

	"github.com/warren-mesh/warren/runner/internal/live"
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
	ErrShuttingDown = live.ErrShuttingDown
	// ErrIdle is the stop cause when the sandbox goes to sleep after IdleTimeout.
	ErrIdle = errors.New("runner idle")
	// ErrFencedOff is the stop cause when a newer epoch owns the sandbox (a snapshot write was fenced).
	ErrFencedOff = errors.New("runner fenced off by a newer epoch")
)
