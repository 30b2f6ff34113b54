package live

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-mesh/warren/internal/wire"
)

// item is a program of the tests: it runs until stopped.
type item struct {
	id    string
	done  chan struct{}
	cause error
}

func newItem(id string) *item         { return &item{id: id, done: make(chan struct{})} }
func (i *item) ID() string            { return i.id }
func (i *item) Done() <-chan struct{} { return i.done }
func (i *item) Exited() bool          { return isClosed(i.done) }
func (i *item) Stop(cause error)      { i.exit(cause) }
func (i *item) exit(cause error)      { i.cause = cause; close(i.done) }
func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
func full(limit int) error { return wire.Errorf(wire.ResourceExhausted, "%d running", limit) }
func start(id string) func(func(string) bool) (*item, error) {
	return func(func(string) bool) (*item, error) { return newItem(id), nil }
}

func newTestTable(t *testing.T) (*Table[*item], *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	return NewTable[*item]("thing", reg, prometheus.CounterOpts{Name: "starts"}, prometheus.GaugeOpts{Name: "running"}), reg
}

// The table keeps at most limit running items and as many exited ones: past the limit a start is refused
// with what full says, and once 2*limit are kept the oldest exited one makes room.
func TestTableBoundsRunningAndKept(t *testing.T) {
	tb, _ := newTestTable(t)
	const limit = 2
	var items []*item
	for i := range limit {
		it, err := tb.Add(limit, full, start(fmt.Sprint(i)))
		if err != nil {
			t.Fatal(err)
		}
		items = append(items, it)
	}
	if _, err := tb.Add(limit, full, start("x")); wire.CodeOf(err) != wire.ResourceExhausted {
		t.Fatalf("start past the limit: %v", err)
	}
	items[0].exit(nil)
	items[1].exit(nil)
	for i := limit; i < 2*limit; i++ {
		if _, err := tb.Add(limit, full, start(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(tb.Items()); n != 2*limit {
		t.Fatalf("%d kept, want %d", n, 2*limit)
	}
	// Two running (2, 3): no room; one exits, and the next start drops the oldest exited (0).
	tb.Items()[2].exit(nil)
	if _, err := tb.Add(limit, full, start("4")); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, it := range tb.Items() {
		ids = append(ids, it.ID())
	}
	if fmt.Sprint(ids) != "[1 2 3 4]" {
		t.Fatalf("kept %v, want [1 2 3 4]", ids)
	}
	if tb.Running() != 2 {
		t.Fatalf("%d running, want 2", tb.Running())
	}
}

// start is told which ids are taken, kept items included; a failed start keeps nothing.
func TestTableAddSeesTakenIDs(t *testing.T) {
	tb, _ := newTestTable(t)
	tb.Restore([]*item{newItem("a")})
	_, err := tb.Add(4, full, func(taken func(string) bool) (*item, error) {
		if !taken("a") || taken("b") {
			t.Errorf("taken(a) = %v, taken(b) = %v", taken("a"), taken("b"))
		}
		return nil, errors.New("no")
	})
	if err == nil || len(tb.Items()) != 1 {
		t.Fatalf("failed start: %v, %d kept", err, len(tb.Items()))
	}
}

// Get and Remove answer not_found naming the noun, with a long id cut; Remove asks removable first.
func TestTableGetRemove(t *testing.T) {
	tb, _ := newTestTable(t)
	it, _ := tb.Add(4, full, start("a"))
	long := strings.Repeat("x", 100)
	if _, err := tb.Get(long); wire.CodeOf(err) != wire.NotFound || strings.Contains(err.Error(), long) ||
		!strings.Contains(err.Error(), `no thing "`+long[:64]+`..."`) {
		t.Fatalf("Get of an unknown long id: %v", err)
	}
	busy := wire.Errorf(wire.Conflict, "running")
	if err := tb.Remove("a", func(*item) error { return busy }); !errors.Is(err, busy) || len(tb.Items()) != 1 {
		t.Fatalf("refused remove: %v, %d kept", err, len(tb.Items()))
	}
	if err := tb.Remove("a", func(*item) error { return nil }); err != nil || len(tb.Items()) != 0 {
		t.Fatalf("remove: %v, %d kept", err, len(tb.Items()))
	}
	tb.Restore([]*item{it})
	tb.Forget(it)
	if got, err := tb.Get("a"); err == nil {
		t.Fatalf("forgotten item still found: %v", got)
	}
}

// Close stops every item with ErrShuttingDown, waits for them, and refuses later starts with unavailable;
// a program that does not exit in time is an error once ctx ends.
func TestTableClose(t *testing.T) {
	tb, _ := newTestTable(t)
	a, _ := tb.Add(4, full, start("a"))
	if err := tb.Close(context.Background(), "things"); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(a.cause, ErrShuttingDown) {
		t.Fatalf("stopped with %v", a.cause)
	}
	if _, err := tb.Add(4, full, start("b")); wire.CodeOf(err) != wire.Unavailable {
		t.Fatalf("start after close: %v", err)
	}

	stuck := &stuckItem{item: newItem("s")}
	tb3 := NewTable[*stuckItem]("thing", prometheus.NewRegistry(), prometheus.CounterOpts{Name: "s"}, prometheus.GaugeOpts{Name: "r"})
	tb3.Restore([]*stuckItem{stuck})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := tb3.Close(ctx, "things"); !errors.Is(err, context.Canceled) {
		t.Fatalf("close of a stuck item: %v", err)
	}
}

// stuckItem ignores Stop.
type stuckItem struct{ *item }

func (s *stuckItem) Stop(error) {}

// Counted counts ok, refused (a wire error other than internal) and error outcomes; the gauge counts the
// running items.
func TestTableCounted(t *testing.T) {
	tb, reg := newTestTable(t)
	_, _ = tb.Add(4, full, start("a"))
	_ = tb.Counted(nil)
	_ = tb.Counted(wire.Errorf(wire.ResourceExhausted, "full"))
	_ = tb.Counted(errors.New("boom"))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				key += "/" + l.GetValue()
			}
			got[key] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	want := map[string]float64{"starts/ok": 1, "starts/refused": 1, "starts/error": 1, "running": 1}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("metrics %v, want %v", got, want)
	}
}
