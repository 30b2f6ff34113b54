package consul_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/testenv"
)

// Close's releases are bounded by its context: once it has ended, Close does not talk to Consul and
// returns its error, the held lease is lost to its holder, and the owner key is left for the session's
// TTL to end.
func TestCloseBoundedByContext(t *testing.T) {
	srv := testenv.StartConsul(t)
	ctx := context.Background()
	prefix := uniquePrefix()
	r := open(t, srv, prefix, nil)
	l, err := r.Hold(ctx, entry("u", 1, "a1"))
	if err != nil {
		t.Fatal(err)
	}
	ended, cancel := context.WithCancel(ctx)
	cancel()
	closed := make(chan error, 1)
	go func() { closed <- r.Close(ended) }()
	select {
	case err := <-closed:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Close with an ended context = %v, want its error", err)
		}
	case <-time.After(30 * time.Second): // only catches a hang
		t.Fatal("Close did not return")
	}
	if !isClosed(l.Lost()) {
		t.Fatal("Close did not close the Hold lease's Lost")
	}
	// Not released: another registry on the prefix still finds the runner (until the session's TTL).
	if _, err := open(t, srv, prefix, nil).Lookup(ctx, "iss", "u"); err != nil {
		t.Fatalf("Lookup after a Close whose context had ended = %v, want the lease still registered", err)
	}
}
