package runner

import (
	"bytes"
	"context"
)

// chunk is one read of a streamed command's stdout or stderr.
type chunk struct {
	event string // wire.EventStdout or wire.EventStderr
	data  []byte
}

// chunkWriter hands each write to the streaming handler, blocking (and so back-pressuring the command)
// until the handler takes it or ctx ends.
type chunkWriter struct {
	ctx   context.Context
	event string
	ch    chan<- chunk
}

func (c chunkWriter) Write(p []byte) (int, error) {
	select {
	case c.ch <- chunk{event: c.event, data: bytes.Clone(p)}:
		return len(p), nil
	case <-c.ctx.Done():
		return 0, c.ctx.Err()
	}
}
