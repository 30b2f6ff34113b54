package consul_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/warren-mesh/warren/internal/registry"
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
		w := registry.Warm{Region: "r1", Alloc: fmt.Sprintf("alloc-%d", i), Addr: fmt.Sprintf("127.0.0.1:%d", 20000+i), Key: "k"}
		l, err := runners.HoldWarm(ctx, w)
		if err != nil {
			t.Fatal(err)
		}
		leases[w.Alloc] = l
	}
	// Another region's pool is separate.
	if _, err := runners.HoldWarm(ctx, registry.Warm{Region: "r2", Alloc: "other", Addr: "h:1", Key: "k"}); err != nil {
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
			case errors.Is(err, registry.ErrNoWarm):
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
	l, err := r.HoldWarm(ctx, registry.Warm{Region: "r1", Alloc: "a1", Addr: "h:1", Key: "k"})
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
	if _, err := r.ClaimWarm(ctx, "r1"); !errors.Is(err, registry.ErrNoWarm) {
		t.Fatalf("ClaimWarm of a dead runner = %v, want ErrNoWarm", err)
	}
	if _, err := r.HoldWarm(ctx, registry.Warm{Region: "bad/region", Alloc: "a", Addr: "h:1", Key: "k"}); !errors.Is(err, consul.ErrBadEntry) {
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

// A warm runner that stops without being claimed takes its announcement with it; a key left without a
// session (by an older runner, or by hand) is neither counted nor handed out, and claiming cleans it up.
func TestWarmReleaseAndSessionlessKeys(t *testing.T) {
	srv := testenv.StartConsul(t)
	ctx := context.Background()
	prefix := uniquePrefix()
	r := open(t, srv, prefix, nil)
	raw := rawClient(t, srv)

	l, err := r.HoldWarm(ctx, registry.Warm{Region: "r1", Alloc: "a1", Addr: "h:1", Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := r.CountWarm(ctx, "r1"); err != nil || c != 1 {
		t.Fatalf("CountWarm = %d, %v; want 1", c, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if c, err := r.CountWarm(ctx, "r1"); err != nil || c != 0 {
		t.Fatalf("CountWarm after releasing an unclaimed runner = %d, %v; want 0", c, err)
	}
	if p, _, err := raw.KV().Get(prefix+"warm/r1/a1", nil); err != nil || p != nil {
		t.Fatalf("announcement after Release: %+v, %v; want none", p, err)
	}
	// Releasing twice (the key is gone, so is the session) is fine.
	if err := l.Release(ctx); err != nil {
		t.Fatalf("second Release: %v", err)
	}

	ghost := prefix + "warm/r1/ghost"
	if _, err := raw.KV().Put(&api.KVPair{Key: ghost, Value: []byte(`{"region":"r1","alloc":"ghost","addr":"h:2","key":"k"}`)}, nil); err != nil {
		t.Fatal(err)
	}
	if c, err := r.CountWarm(ctx, "r1"); err != nil || c != 0 {
		t.Fatalf("CountWarm with a sessionless key = %d, %v; want 0", c, err)
	}
	if w, err := r.ClaimWarm(ctx, "r1"); !errors.Is(err, registry.ErrNoWarm) {
		t.Fatalf("ClaimWarm with only a sessionless key = %+v, %v; want ErrNoWarm", w, err)
	}
	if p, _, err := raw.KV().Get(ghost, nil); err != nil || p != nil {
		t.Fatalf("sessionless key after ClaimWarm: %+v, %v; want it deleted", p, err)
	}
}

// Claimed fires when a scheduler takes the runner (its key is deleted), not before.
func TestWarmClaimed(t *testing.T) {
	srv := testenv.StartConsul(t)
	ctx := context.Background()
	prefix := uniquePrefix()
	r := open(t, srv, prefix, nil)
	l, err := r.HoldWarm(ctx, registry.Warm{Region: "r1", Alloc: "a1", Addr: "h:1", Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	other, err := r.HoldWarm(ctx, registry.Warm{Region: "r1", Alloc: "a2", Addr: "h:2", Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release(ctx)
	select {
	case <-l.Claimed():
		t.Fatal("Claimed closed while the announcement is in place")
	default:
	}
	w, err := open(t, srv, prefix, nil).ClaimWarm(ctx, "r1") // oldest first: a1
	if err != nil || w.Alloc != "a1" {
		t.Fatalf("ClaimWarm = %+v, %v; want a1", w, err)
	}
	select {
	case <-l.Claimed():
	case <-time.After(30 * time.Second):
		t.Fatal("Claimed not closed 30 s after the runner was claimed")
	}
	select {
	case <-other.Claimed():
		t.Fatal("claiming one runner closed another's Claimed")
	case <-l.Lost():
		t.Fatal("a claim ended the runner's session")
	default:
	}
}
