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

// Run runs the contract against registries made by open (a fresh, empty one per call).
func Run(t *testing.T, open func(t *testing.T) registry.Registry) {
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
		var wg sync.WaitGroup
		for e := int64(1); e <= 50; e++ {
			wg.Go(func() { _ = r.Register(ctx, entry("u", e)) })
		}
		wg.Wait()
		if got, _ := r.Lookup(ctx, "iss", "u"); got.Epoch != 50 {
			t.Fatalf("epoch = %d, want 50", got.Epoch)
		}
	})
}

func mustRegister(t *testing.T, r registry.Registry, e registry.Entry) {
	t.Helper()
	if err := r.Register(context.Background(), e); err != nil {
		t.Fatalf("Register %+v: %v", e, err)
	}
}
