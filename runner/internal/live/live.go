// Package live holds what the tables of programs that outlive requests (background processes in
// runner/procs, terminals in runner/terms) share: a table keeping a bounded number running plus as many
// exited ones, counting its starts, ending with the sandbox; and why the runner ends such a program.
package live

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-mesh/warren/internal/wire"
)

// Causes with which the runner ends the programs of a table.
var (
	// ErrShuttingDown is the cancellation cause of in-flight work when the runner stops.
	ErrShuttingDown = errors.New("runner shutting down")
	// ErrWorkspaceFull is the cause of a program killed because the workspace grew past its limit.
	ErrWorkspaceFull = errors.New("the workspace is over its size limit")
)

// Why the runner ended a program (wire.ProcInfo.Ended, wire.TermInfo.Ended).
const (
	EndedKilled        = "killed"
	EndedSandbox       = "sandbox_stopped"
	EndedWorkspaceFull = "workspace_full"
)

// EndedBy is why the end of ctx (a program's lifetime) ended the program.
func EndedBy(ctx context.Context) string {
	if errors.Is(context.Cause(ctx), ErrWorkspaceFull) {
		return EndedWorkspaceFull
	}
	return EndedSandbox
}

// DrainWait bounds how long a program's output is read after it exited (a descendant that escaped its
// group in insecure mode may hold the pipes).
const DrainWait = 2 * time.Second

// Item is a program a table holds. Its methods may be called concurrently.
type Item interface {
	comparable
	// ID is the item's id, unique in its table.
	ID() string
	// Exited reports whether the program has exited (and its output was read).
	Exited() bool
	// Done is closed once the program has exited.
	Done() <-chan struct{}
	// Stop ends the program with cause; Done is closed once it has.
	Stop(cause error)
}

// Table holds the programs of one kind, in start order. Its methods may be called concurrently.
type Table[T Item] struct {
	noun   string // "process", "terminal": in errors
	starts *prometheus.CounterVec

	mu     sync.Mutex // guards items and closed
	items  []T
	closed bool
}

// NewTable makes a table of noun (as errors name it), registering in reg its start counter (by outcome:
// ok, refused, error) and a gauge of the items running.
func NewTable[T Item](noun string, reg prometheus.Registerer, starts prometheus.CounterOpts, running prometheus.GaugeOpts) *Table[T] {
	t := &Table[T]{noun: noun, starts: prometheus.NewCounterVec(starts, []string{"outcome"})}
	reg.MustRegister(t.starts, prometheus.NewGaugeFunc(running, func() float64 { return float64(t.Running()) }))
	return t
}

// Running counts the items that have not exited.
func (t *Table[T]) Running() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n, _ := t.censusLocked()
	return n
}

// censusLocked counts the running items and finds the oldest exited one (-1: none).
func (t *Table[T]) censusLocked() (running, oldestExited int) {
	oldestExited = -1
	for i, it := range t.items {
		if !it.Exited() {
			running++
		} else if oldestExited < 0 {
			oldestExited = i
		}
	}
	return running, oldestExited
}

// Counted records the outcome of a start request and returns err.
func (t *Table[T]) Counted(err error) error {
	switch {
	case err == nil:
		t.starts.WithLabelValues("ok").Inc()
	case wire.CodeOf(err) == wire.Internal:
		t.starts.WithLabelValues("error").Inc()
	default:
		t.starts.WithLabelValues("refused").Inc()
	}
	return err
}

// Add starts an item with start and keeps it, with the table locked: unavailable once the table is
// closed, full(limit) while limit items run. start is told which ids are taken. Once 2*limit items are
// kept, the oldest exited one is dropped to make room.
func (t *Table[T]) Add(limit int, full func(limit int) error, start func(taken func(id string) bool) (T, error)) (T, error) {
	var zero T
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return zero, wire.Errorf(wire.Unavailable, "the sandbox is stopping")
	}
	running, oldestExited := t.censusLocked()
	if running >= limit {
		return zero, full(limit)
	}
	it, err := start(func(id string) bool {
		for _, x := range t.items {
			if x.ID() == id {
				return true
			}
		}
		return false
	})
	if err != nil {
		return zero, err
	}
	if len(t.items) >= 2*limit && oldestExited >= 0 {
		t.items = append(t.items[:oldestExited], t.items[oldestExited+1:]...)
	}
	t.items = append(t.items, it)
	return it, nil
}

// Restore appends items kept from before a sleep (exited), before the runner serves.
func (t *Table[T]) Restore(items []T) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.items = append(t.items, items...)
}

// Get finds an item by id (not_found).
func (t *Table[T]) Get(id string) (T, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, it := range t.items {
		if it.ID() == id {
			return it, nil
		}
	}
	var zero T
	return zero, t.notFound(id)
}

func (t *Table[T]) notFound(id string) error {
	if len(id) > 64 {
		id = id[:64] + "..."
	}
	return wire.Errorf(wire.NotFound, "no %s %q in this sandbox", t.noun, id)
}

// Items is every item, oldest first.
func (t *Table[T]) Items() []T {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]T(nil), t.items...)
}

// Remove forgets the item of id (not_found when there is none) unless removable, called with the table
// locked, refuses with an error.
func (t *Table[T]) Remove(id string, removable func(T) error) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, it := range t.items {
		if it.ID() != id {
			continue
		}
		if err := removable(it); err != nil {
			return err
		}
		t.items = append(t.items[:i], t.items[i+1:]...)
		return nil
	}
	return t.notFound(id)
}

// Forget drops it from the table, if it is still there.
func (t *Table[T]) Forget(it T) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, x := range t.items {
		if x == it {
			t.items = append(t.items[:i], t.items[i+1:]...)
			return
		}
	}
}

// Close refuses new items and ends every one (cause ErrShuttingDown), waiting until ctx ends for them to
// exit; what names them in the error.
func (t *Table[T]) Close(ctx context.Context, what string) error {
	t.mu.Lock()
	t.closed = true
	items := append([]T(nil), t.items...)
	t.mu.Unlock()
	for _, it := range items {
		it.Stop(ErrShuttingDown)
	}
	for _, it := range items {
		select {
		case <-it.Done():
		case <-ctx.Done():
			return fmt.Errorf("stop %s: %w", what, ctx.Err())
		}
	}
	return nil
}
