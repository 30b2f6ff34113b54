package session

import "errors"

// Sentinel errors.
var (
	// ErrShuttingDown is the reason a connection is closed when the runner stops (WebSocket 1001).
	ErrShuttingDown = errors.New("runner shutting down")
	// ErrClosed: the hub is closed and accepts no more connections.
	ErrClosed = errors.New("session hub closed")
)
