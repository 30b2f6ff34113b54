package modelserver

import "errors"

var (
	// ErrStarted is returned by Start when the server is already serving.
	ErrStarted = errors.New("model server already started")
	// ErrClosed is returned by Start after Close.
	ErrClosed = errors.New("model server closed")
)
