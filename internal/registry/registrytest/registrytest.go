// Package registrytest is the contract suite every registry.Registry adapter passes.
package registrytest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/registry"
)

// Options are the hooks of adapters with a server behind them. The zero value runs the cases every
// adapter passes.
type Options struct {
	// Stop and Start stop the adapter's server (clients get errors until Start) and start it again. When
	// set, the outage cases run: while the server is down Lookup and Register fail, within a bounded time,
	// with errors wrapping registry.ErrUnavailable, and after Start registering works again (the server may
	// or may not have kept its state).
	Stop, Start func(t testing.TB)
}

// Run runs the contract against registries made by open (a fresh, empty one per call).
func Run(t *testing.T, open func(t *testing.T) registry.Registry) {
	RunWith(t, open, Options{})
}

// RunWith runs the contract against registries made by open, with the cases opts enables.
func RunWith(t *testing.T, open func(t *testing.T) registry.Registry, opts Options) {
	ctx := context.Background()
	entry := func(user string, epoch int64) registry.Entry {
		return registry.Entry{Issuer: "iss", User: user, Epoch: epoch, Region: "r1", Alloc: fmt.Sprint("a", epoch),
			Addr: fmt.Sprintf("127.0.0.1:%d", 10000+epoch), Key: "k", Since: time.Unix(1700000000, 0)}
	}
	t.Run("LookupMissing", func(t *testing.T) {
		r := open(t)
		if _, err := r.Lookup(ctx, "iss", "nobody"); !errors.Is(err, registry.ErrNotFound) {
			t.Fatalf("Lookup missing = %v, want ErrNotFound", err)
		}
	})
	t.Run("RegisterLookup", func(t *testing.T) {
		r := open(t)
		want := entry("u", 1)
		if err := r.Register(ctx, want); err != nil {
			t.Fatal(err)
		}
		got, err := r.Lookup(ctx, "iss", "u")
		if err != nil {
			t.Fatal(err)
		}
		if got.Addr != want.Addr || got.Epoch != want.Epoch || got.Key != want.Key || got.Alloc != want.Alloc {
			t.Fatalf("Lookup = %+v, want %+v", got, want)
		}
	})
	t.Run("NewerEpochReplaces", func(t *testing.T) {
		r := open(t)
		mustRegister(t, r, entry("u", 1))
		mustRegister(t, r, entry("u", 2))
		if got, _ := r.Lookup(ctx, "iss", "u"); got.Epoch != 2 {
			t.Fatalf("epoch = %d, want 2", got.Epoch)
		}
	})
	t.Run("StaleRegisterRefused", func(t *testing.T) {
		r := open(t)
		mustRegister(t, r, entry("u", 3))
		if err := r.Register(ctx, entry("u", 2)); !errors.Is(err, registry.ErrStale) {
			t.Fatalf("Register stale = %v, want ErrStale", err)
		}
		if got, _ := r.Lookup(ctx, "iss", "u"); got.Epoch != 3 {
			t.Fatalf("epoch = %d after stale register, want 3", got.Epoch)
		}
	})
	t.Run("DeregisterFencedByEpoch", func(t *testing.T) {
		r := open(t)
		mustRegister(t, r, entry("u", 2))
		if err := r.Deregister(ctx, "iss", "u", 1); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Lookup(ctx, "iss", "u"); err != nil {
			t.Fatalf("stale deregister removed the live entry: %v", err)
		}
		if err := r.Deregister(ctx, "iss", "u", 2); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Lookup(ctx, "iss", "u"); !errors.Is(err, registry.ErrNotFound) {
			t.Fatalf("after deregister Lookup = %v, want ErrNotFound", err)
		}
	})
	t.Run("UsersIndependent", func(t *testing.T) {
		r := open(t)
		mustRegister(t, r, entry("a", 1))
		mustRegister(t, r, entry("b", 5))
		_ = r.Deregister(ctx, "iss", "a", 1)
		if got, err := r.Lookup(ctx, "iss", "b"); err != nil || got.Epoch != 5 {
			t.Fatalf("b = %+v, %v", got, err)
		}
	})
	t.Run("ConcurrentRegistersKeepHighest", func(t *testing.T) {
		r := open(t)
		const n = 50
		var wg sync.WaitGroup
		errs := make([]error, n+1)
		for e := int64(1); e <= n; e++ {
			wg.Go(func() { errs[e] = r.Register(ctx, entry("u", e)) })
		}
		wg.Wait()
		for e, err := range errs {
			if err != nil && !errors.Is(err, registry.ErrStale) {
				t.Errorf("Register epoch %d = %v, want nil or ErrStale", e, err)
			}
		}
		if errs[n] != nil {
			t.Errorf("Register of the highest epoch = %v", errs[n])
		}
		got, err := r.Lookup(ctx, "iss", "u")
		if err != nil || got.Epoch != n || got.Alloc != entry("u", n).Alloc {
			t.Fatalf("Lookup = %+v, %v; want epoch %d", got, err, n)
		}
		// Late stragglers of the race are refused and leave the winner alone.
		if err := r.Register(ctx, entry("u", n/2)); !errors.Is(err, registry.ErrStale) {
			t.Fatalf("Register epoch %d after %d = %v, want ErrStale", n/2, n, err)
		}
		if got, err := r.Lookup(ctx, "iss", "u"); err != nil || got.Epoch != n {
			t.Fatalf("after a stale register Lookup = %+v, %v; want epoch %d", got, err, n)
		}
	})
	t.Run("StaleRegisterLeavesNewerIntact", func(t *testing.T) {
		r := open(t)
		newer := entry("u", 7)
		mustRegister(t, r, entry("u", 6))
		mustRegister(t, r, newer)
		for _, stale := range []int64{6, 1} {
			if err := r.Register(ctx, entry("u", stale)); !errors.Is(err, registry.ErrStale) {
				t.Fatalf("Register epoch %d under 7 = %v, want ErrStale", stale, err)
			}
		}
		got, err := r.Lookup(ctx, "iss", "u")
		if err != nil || got.Epoch != newer.Epoch || got.Addr != newer.Addr || got.Alloc != newer.Alloc || got.Key != newer.Key {
			t.Fatalf("Lookup = %+v, %v; want %+v", got, err, newer)
		}
	})
	t.Run("ReRegisterIsIdempotent", func(t *testing.T) {
		r := open(t)
		e := entry("u", 4)
		mustRegister(t, r, e)
		mustRegister(t, r, e)
		if got, err := r.Lookup(ctx, "iss", "u"); err != nil || got.Epoch != 4 || got.Addr != e.Addr {
			t.Fatalf("Lookup = %+v, %v", got, err)
		}
	})
	t.Run("DeregisterOtherEpochsIsNoop", func(t *testing.T) {
		r := open(t)
		if err := r.Deregister(ctx, "iss", "nobody", 1); err != nil {
			t.Fatalf("Deregister of a missing user = %v", err)
		}
		mustRegister(t, r, entry("u", 5))
		for _, epoch := range []int64{4, 1, 6} {
			if err := r.Deregister(ctx, "iss", "u", epoch); err != nil {
				t.Fatalf("Deregister epoch %d = %v", epoch, err)
			}
			if got, err := r.Lookup(ctx, "iss", "u"); err != nil || got.Epoch != 5 {
				t.Fatalf("after Deregister epoch %d Lookup = %+v, %v; want epoch 5", epoch, got, err)
			}
		}
	})
	t.Run("RegisterAfterDeregister", func(t *testing.T) {
		r := open(t)
		mustRegister(t, r, entry("u", 1))
		if err := r.Deregister(ctx, "iss", "u", 1); err != nil {
			t.Fatal(err)
		}
		mustRegister(t, r, entry("u", 2))
		if got, err := r.Lookup(ctx, "iss", "u"); err != nil || got.Epoch != 2 {
			t.Fatalf("Lookup = %+v, %v; want epoch 2", got, err)
		}
	})
	if opts.Stop != nil && opts.Start != nil {
		t.Run("Outage", func(t *testing.T) {
			r := open(t)
			mustRegister(t, r, entry("u", 1))
			opts.Stop(t)
			restarted := false
			defer func() {
				if !restarted {
					opts.Start(t)
				}
			}()
			// Bounded: a call still running when the deadline passes fails with the context's error, not
			// ErrUnavailable.
			bounded, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			if _, err := r.Lookup(bounded, "iss", "nobody"); !errors.Is(err, registry.ErrUnavailable) {
				t.Errorf("Lookup while down = %v, want ErrUnavailable", err)
			}
			if err := r.Register(bounded, entry("v", 1)); !errors.Is(err, registry.ErrUnavailable) {
				t.Errorf("Register while down = %v, want ErrUnavailable", err)
			}
			if err := r.Deregister(bounded, "iss", "v", 1); !errors.Is(err, registry.ErrUnavailable) {
				t.Errorf("Deregister while down = %v, want ErrUnavailable", err)
			}
			opts.Start(t)
			restarted = true
			// Clients may need a moment to notice the server is back: poll, with a generous deadline.
			deadline := time.Now().Add(60 * time.Second)
			for {
				err := r.Register(ctx, entry("u", 2))
				if err == nil {
					break
				}
				if !errors.Is(err, registry.ErrUnavailable) || time.Now().After(deadline) {
					t.Fatalf("Register after restart = %v", err)
				}
				time.Sleep(50 * time.Millisecond)
			}
			if got, err := r.Lookup(ctx, "iss", "u"); err != nil || got.Epoch != 2 {
				t.Fatalf("Lookup after restart = %+v, %v; want epoch 2", got, err)
			}
			mustRegister(t, r, entry("w", 1))
			if got, err := r.Lookup(ctx, "iss", "w"); err != nil || got.Epoch != 1 {
				t.Fatalf("Lookup of a user registered after restart = %+v, %v", got, err)
			}
		})
	}
}

func mustRegister(t *testing.T, r registry.Registry, e registry.Entry) {
	t.Helper()
	if err := r.Register(context.Background(), e); err != nil {
		t.Fatalf("Register %+v: %v", e, err)
	}
}
