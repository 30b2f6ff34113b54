// Package previewstest is the contract suite for previews.Store: every adapter's tests call Run.
package previewstest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/previews"
)

// Run runs the suite. open returns a new, empty store and arranges its closing.
func Run(t *testing.T, open func(t *testing.T) previews.Store) {
	ctx := context.Background()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	mk := func(user string, port int, ttl time.Duration) previews.Preview {
		return previews.Preview{ID: previews.NewID(), Issuer: "acme", User: user, Port: port, Public: port%2 == 0,
			Created: now, Expires: now.Add(ttl), Grant: "grant-of-" + user}
	}
	t.Run("KeyIsMadeOnceAndShared", func(t *testing.T) {
		s := open(t)
		var wg sync.WaitGroup
		keys := make([][]byte, 8)
		for i := range keys {
			wg.Add(1)
			go func() {
				defer wg.Done()
				k, err := s.Key(ctx)
				if err != nil {
					t.Error(err)
				}
				keys[i] = k
			}()
		}
		wg.Wait()
		for _, k := range keys {
			if len(k) != previews.KeyBytes || string(k) != string(keys[0]) {
				t.Fatalf("keys differ or are short: %x vs %x", k, keys[0])
			}
		}
	})
	t.Run("CreateGetListRevoke", func(t *testing.T) {
		s := open(t)
		a, b, other := mk("alice", 8000, time.Hour), mk("alice", 8001, 2*time.Hour), mk("bob", 8000, time.Hour)
		for _, p := range []previews.Preview{a, b, other} {
			if err := s.Create(ctx, p, 5); err != nil {
				t.Fatal(err)
			}
		}
		got, err := s.Get(ctx, a.ID)
		if err != nil || got != a {
			t.Fatalf("get %+v, %v; want %+v", got, err, a)
		}
		list, err := s.List(ctx, "acme", "alice", now)
		if err != nil || len(list) != 2 || list[0].ID != a.ID && list[1].ID != a.ID {
			t.Fatalf("list %+v, %v", list, err)
		}
		if err := s.Revoke(ctx, "acme", "bob", a.ID); !errors.Is(err, previews.ErrNotFound) {
			t.Fatalf("another user revoked alice's preview: %v", err)
		}
		if err := s.Revoke(ctx, "acme", "alice", a.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(ctx, a.ID); !errors.Is(err, previews.ErrNotFound) {
			t.Fatalf("revoked preview: %v", err)
		}
		if err := s.Revoke(ctx, "acme", "alice", a.ID); !errors.Is(err, previews.ErrNotFound) {
			t.Fatalf("second revoke: %v", err)
		}
		if list, _ := s.List(ctx, "acme", "alice", now.Add(90*time.Minute)); len(list) != 1 || list[0].ID != b.ID {
			t.Fatalf("list after revoke: %+v", list)
		}
		if list, _ := s.List(ctx, "acme", "alice", now.Add(3*time.Hour)); len(list) != 0 {
			t.Fatalf("expired previews listed: %+v", list)
		}
	})
	t.Run("LimitCountsLivePreviewsOnly", func(t *testing.T) {
		s := open(t)
		for i := range 3 {
			if err := s.Create(ctx, mk("alice", 3000+i, time.Minute), 3); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Create(ctx, mk("alice", 4000, time.Hour), 3); !errors.Is(err, previews.ErrLimit) {
			t.Fatalf("fourth preview: %v", err)
		}
		if err := s.Create(ctx, mk("bob", 4000, time.Hour), 3); err != nil {
			t.Fatalf("another user's preview: %v", err)
		}
		later := mk("alice", 4000, time.Hour)
		later.Created, later.Expires = now.Add(2*time.Minute), now.Add(time.Hour)
		if err := s.Create(ctx, later, 3); err != nil {
			t.Fatalf("a preview once the others expired: %v", err)
		}
	})
	t.Run("ConcurrentCreatesHoldTheLimit", func(t *testing.T) {
		s := open(t)
		var wg sync.WaitGroup
		var mu sync.Mutex
		ok := 0
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := s.Create(ctx, mk("carol", 5000+i, time.Hour), 3)
				switch {
				case err == nil:
					mu.Lock()
					ok++
					mu.Unlock()
				case !errors.Is(err, previews.ErrLimit):
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		if ok != 3 {
			t.Fatalf("%d creates succeeded, want 3", ok)
		}
	})
}
