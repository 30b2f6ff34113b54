package claude

import "errors"

// Sentinel errors.
var (
	// ErrConfig: the Config is unusable.
	ErrConfig = errors.New("invalid claude agent config")
	// ErrClosed: the driver is closed; turns fail with unavailable wrapping it.
	ErrClosed = errors.New("claude agent driver closed")
	// ErrExited: the CLI process ended during a turn; the turn fails with unavailable wrapping it.
	ErrExited = errors.New("agent process exited")
)
