package scheduler_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"

	"github.com/warren-mesh/warren/internal/registry/mem"
	"github.com/warren-mesh/warren/scheduler"
	"github.com/warren-mesh/warren/scheduler/sqlite"
)

// specDriver records the specs it is asked to start; its sandboxes run until stopped.
type specDriver struct {
	mu     sync.Mutex
	specs  []scheduler.Spec
	exited map[string]chan struct{}
}

func (d *specDriver) Start(ctx context.Context, spec scheduler.Spec) (scheduler.Sandbox, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.specs = append(d.specs, spec)
	alloc, exited := "a-"+spec.ID, make(chan struct{})
	d.exited[alloc] = exited
	return scheduler.Sandbox{Alloc: alloc, Addr: "127.0.0.1:1", Key: "k", Exited: exited}, nil
}

func (d *specDriver) Stop(ctx context.Context, alloc string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if ch, ok := d.exited[alloc]; ok {
		close(ch)
		delete(d.exited, alloc)
	}
	return nil
}

// sqlitePlacements is a placement store in a temporary file, closed when t ends.
func sqlitePlacements(t *testing.T) *sqlite.Placements {
	t.Helper()
	p, err := sqlite.New(context.Background(), sqlite.Config{Path: filepath.Join(t.TempDir(), "placements.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// The request's template (the token's claim) reaches the driver's Spec, which turns it into the runner's
// -template; a request without one leaves the Spec's empty (the runner's default applies).
func TestEnsurePassesTemplate(t *testing.T) {
	ctx := context.Background()
	placements := sqlitePlacements(t)
	d := &specDriver{exited: map[string]chan struct{}{}}
	s, err := scheduler.New(scheduler.Config{Region: "r1", Placements: placements, Registry: mem.New(), Driver: d})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(ctx, hangCatch)
		defer cancel()
		if err := s.Close(cctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	for _, req := range []scheduler.Request{{Issuer: "iss", User: "py-user", Template: "py"}, {Issuer: "iss", User: "plain"}} {
		if _, err := s.Ensure(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	d.mu.Lock()
	specs := append([]scheduler.Spec(nil), d.specs...)
	d.mu.Unlock()
	if len(specs) != 2 || specs[0].User != "py-user" || specs[0].Template != "py" || specs[1].User != "plain" || specs[1].Template != "" {
		t.Fatalf("driver specs = %+v", specs)
	}
}
