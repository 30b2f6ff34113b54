package procs

import (
	"context"
	"errors"
	"testing"

	"github.com/warren-mesh/warren/internal/wire"
)

// countingReader records whether anything read it.
type countingReader struct{ read int }

func (c *countingReader) Read(b []byte) (int, error) {
	c.read += len(b)
	return 0, errors.New("read")
}

// A write to stdin queued behind another (which a process that does not read its stdin holds until its
// request ends) does not read its body while it waits: queued writes cannot pile request bodies up in the
// runner's memory.
func TestProcStdinQueuedWriteReadsNothing(t *testing.T) {
	p := &proc{id: "p", stdin: make(chan struct{}, 1)} // the token is taken: another write is pending
	ctx, cancel := context.WithCancel(context.Background())
	body := &countingReader{}
	done := make(chan error)
	go func() { done <- p.writeStdin(ctx, body, false) }()
	cancel()
	if err := <-done; wire.CodeOf(err) != wire.Unavailable {
		t.Fatalf("queued write: %v", err)
	}
	if body.read != 0 {
		t.Fatalf("a queued write read %d bytes of its body", body.read)
	}
}
