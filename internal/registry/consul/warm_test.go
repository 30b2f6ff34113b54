package consul_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/registry/consul"
	"github.com/warren-mesh/warren/internal/testenv"
)

func TestWarmPool(t *testing.T) {
	srv := testenv.StartConsul(t)
	ctx := context.Background()
	prefix := uniquePrefix()
	runners := open(t, srv, prefix, nil)
	const n = 5
	leases := map[string]*consul.WarmLease{}
	for i := range n {
		w := consul.Warm{Region: "r1", Alloc: fmt.Sprintf("alloc-%d", i), Addr: fmt.Sprintf("127.0.0.1:%d", 20000+i), Key: "k"}
		l, err := runners.HoldWarm(ctx, w)
		if err != nil {
			t.Fatal(err)
		}
		leases[w.Alloc] = l
	}
	// Another region's pool is separate.
	if _, err := runners.HoldWarm(ctx, consul.Warm{Region: "r2", Alloc: "other", Addr: "h:1", Key: "k"}); err != nil {
		t.Fatal(err)
	}
	if c, err := runners.CountWarm(ctx, "r1"); err != nil || c != n {
		t.Fatalf("CountWarm = %d, %v; want %d", c, err, n)
	}

	// Twice as many schedulers as warm runners claim at once: each runner goes to exactly one of them.
	scheds := []*consul.Registry{open(t, srv, prefix, nil), open(t, srv, prefix, nil)}
	var (
		mu      sync.Mutex
		claimed = map[string]int{}
		empty   int
		wg      sync.WaitGroup
	)
	for i := range 2 * n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w, err := scheds[i%2].ClaimWarm(ctx, "r1")
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, consul.ErrNoWarm):
				empty++
			case err != nil:
				t.Errorf("ClaimWarm: %v", err)
			default:
				claimed[w.Alloc]++
				if w.Region != "r1" || w.Key != "k" {
					t.Errorf("claimed %+v", w)
				}
			}
		}()
	}
	wg.Wait()
	if len(claimed) != n || empty != n {
		t.Fatalf("claimed %v (%d distinct), %d empty; want %d distinct runners and %d empty answers", claimed, len(claimed), empty, n, n)
	}
	for a, c := range claimed {
		if c != 1 {
			t.Fatalf("runner %s claimed %d times", a, c)
		}
	}
	if c, _ := runners.CountWarm(ctx, "r1"); c != 0 {
		t.Fatalf("CountWarm after claiming all = %d", c)
	}
	// A claimed runner releases its session without error; the key is already gone.
	for _, l := range leases {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func TestWarmRunnerGoneLeavesThePool(t *testing.T) {
	srv := testenv.StartConsul(t)
	ctx := context.Background()
	prefix := uniquePrefix()
	r := open(t, srv, prefix, nil)
	l, err := r.HoldWarm(ctx, consul.Warm{Region: "r1", Alloc: "a1", Addr: "h:1", Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	// Its session destroyed (the process died, its TTL ran out): Lost fires and nobody can claim it.
	if _, err := rawClient(t, srv).Session().Destroy(sessionOf(t, srv, prefix+"warm/r1/a1"), nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Lost():
	case <-time.After(30 * time.Second):
		t.Fatal("Lost not closed after the session was destroyed")
	}
	if _, err := r.ClaimWarm(ctx, "r1"); !errors.Is(err, consul.ErrNoWarm) {
		t.Fatalf("ClaimWarm of a dead runner = %v, want ErrNoWarm", err)
	}
	if _, err := r.HoldWarm(ctx, consul.Warm{Region: "bad/region", Alloc: "a", Addr: "h:1", Key: "k"}); !errors.Is(err, consul.ErrBadEntry) {
		t.Fatalf("HoldWarm with a bad region = %v, want ErrBadEntry", err)
	}
}

func sessionOf(t *testing.T, srv *testenv.ConsulServer, key string) string {
	t.Helper()
	p, _, err := rawClient(t, srv).KV().Get(key, nil)
	if err != nil || p == nil || p.Session == "" {
		t.Fatalf("key %s: %+v, %v", key, p, err)
	}
	return p.Session
}
