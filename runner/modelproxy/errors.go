package modelproxy

import "errors"

var (
	// ErrInvalidConfig: New was given a Config it cannot work with.
	ErrInvalidConfig = errors.New("invalid model proxy config")
	// ErrNotLoopback: Start was asked to listen on an address other than loopback.
	ErrNotLoopback = errors.New("model proxy listens on loopback only")
	// ErrStarted: Start was called twice.
	ErrStarted = errors.New("model proxy already started")
	// ErrClosed: Start was called after Close.
	ErrClosed = errors.New("model proxy closed")
)
