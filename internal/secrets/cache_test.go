package secrets_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/warren-mesh/warren/internal/secrets"
	"github.com/warren-mesh/warren/internal/secrets/file"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// probe wraps the real file store to count calls, hold them until released, and fail like an unreachable
// backend: a failure injector at the process boundary, not a mock.
type probe struct {
	secrets.Store
	calls   atomic.Int64
	down    atomic.Bool
	gate    chan struct{} // when set, calls wait for it to close
	ctxErrs chan error    // when set, receives the context error each call saw on return
}

func (p *probe) IssuerKeys(ctx context.Context, iss string) ([]secrets.Key, error) {
	p.calls.Add(1)
	if p.gate != nil {
		<-p.gate
	}
	if p.ctxErrs != nil {
		p.ctxErrs <- ctx.Err()
	}
	if p.down.Load() {
		return nil, fmt.Errorf("dial secret backend: %w", secrets.ErrUnavailable)
	}
	return p.Store.IssuerKeys(ctx, iss)
}

type fixture struct {
	files *file.Store
	probe *probe
	clock *clock
	cache *secrets.Cache
}

func newFixture(t testing.TB, opts secrets.CacheOptions) *fixture {
	t.Helper()
	fs, err := file.Open(filepath.Join(t.TempDir(), file.DefaultFileName))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.CreateIssuer("acme"); err != nil {
		t.Fatal(err)
	}
	f := &fixture{files: fs, probe: &probe{Store: fs}, clock: &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}}
	opts.Now = f.clock.Now
	f.cache = secrets.NewCache(f.probe, opts)
	t.Cleanup(func() { f.cache.Close() })
	return f
}

func (f *fixture) newest(t testing.TB, get func(context.Context, string) ([]secrets.Key, error)) string {
	t.Helper()
	keys, err := get(context.Background(), "acme")
	if err != nil {
		t.Fatalf("keys: %v", err)
	}
	return keys[0].ID
}

func (f *fixture) wantCalls(t testing.TB, n int64) {
	t.Helper()
	if got := f.probe.calls.Load(); got != n {
		t.Fatalf("backing store called %d times, want %d", got, n)
	}
}

func TestCacheTTL(t *testing.T) {
	f := newFixture(t, secrets.CacheOptions{RefreshAhead: -1}) // only the TTL: TestCacheRefreshAhead does the rest
	if id := f.newest(t, f.cache.IssuerKeys); id != "acme-v1" {
		t.Fatalf("newest = %q", id)
	}
	if _, err := f.files.Rotate("acme"); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(secrets.DefaultCacheTTL - time.Second)
	if id := f.newest(t, f.cache.IssuerKeys); id != "acme-v1" {
		t.Fatalf("within TTL newest = %q, want the cached acme-v1", id)
	}
	f.wantCalls(t, 1)
	f.clock.Advance(time.Second)
	if id := f.newest(t, f.cache.IssuerKeys); id != "acme-v2" {
		t.Fatalf("after TTL newest = %q, want acme-v2", id)
	}
	f.wantCalls(t, 2)
}

func TestCacheReturnsCopies(t *testing.T) {
	f := newFixture(t, secrets.CacheOptions{})
	keys, err := f.cache.IssuerKeys(context.Background(), "acme")
	if err != nil {
		t.Fatal(err)
	}
	keys[0] = secrets.Key{ID: "tampered"}
	if id := f.newest(t, f.cache.IssuerKeys); id != "acme-v1" {
		t.Fatalf("cache changed through a returned slice: %q", id)
	}
}

func TestCacheNegative(t *testing.T) {
	f := newFixture(t, secrets.CacheOptions{})
	for range 3 {
		if _, err := f.cache.IssuerKeys(context.Background(), "late"); !errors.Is(err, secrets.ErrUnknownIssuer) {
			t.Fatalf("unknown issuer: %v", err)
		}
	}
	f.wantCalls(t, 1)
	if _, err := f.files.CreateIssuer("late"); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(secrets.DefaultNegativeTTL - time.Second)
	if _, err := f.cache.IssuerKeys(context.Background(), "late"); !errors.Is(err, secrets.ErrUnknownIssuer) {
		t.Fatalf("within negative TTL: %v, want still unknown", err)
	}
	f.clock.Advance(time.Second)
	if _, err := f.cache.IssuerKeys(context.Background(), "late"); err != nil {
		t.Fatalf("after negative TTL: %v", err)
	}
	f.wantCalls(t, 2)
}

func TestCacheUnavailable(t *testing.T) {
	f := newFixture(t, secrets.CacheOptions{})
	f.newest(t, f.cache.IssuerKeys)
	f.probe.down.Store(true)

	f.clock.Advance(secrets.DefaultCacheTTL - time.Second)
	if id := f.newest(t, f.cache.IssuerKeys); id != "acme-v1" {
		t.Fatalf("backend down, within TTL: %q", id)
	}
	f.clock.Advance(time.Second)
	if _, err := f.cache.IssuerKeys(context.Background(), "acme"); !errors.Is(err, secrets.ErrUnavailable) {
		t.Fatalf("backend down, TTL over: %v, want ErrUnavailable", err)
	}
	if _, err := f.cache.IssuerKeys(context.Background(), "other"); !errors.Is(err, secrets.ErrUnavailable) {
		t.Fatalf("backend down, uncached issuer: %v, want ErrUnavailable (not unknown)", err)
	}
	f.probe.down.Store(false)
	if id := f.newest(t, f.cache.IssuerKeys); id != "acme-v1" {
		t.Fatalf("backend back: %q", id)
	}
}

// TestCacheRefresh: a key rotated a moment after the issuer was fetched is fetched by the first Refresh at
// once (before, Refresh waited for MinRefresh after any fetch, 10 s); Refresh fetches one issuer at most
// once every MinRefresh.
func TestCacheRefresh(t *testing.T) {
	f := newFixture(t, secrets.CacheOptions{})
	f.newest(t, f.cache.IssuerKeys)
	if _, err := f.files.Rotate("acme"); err != nil {
		t.Fatal(err)
	}
	if id := f.newest(t, f.cache.Refresh); id != "acme-v2" {
		t.Fatalf("Refresh right after a rotation = %q, want acme-v2", id)
	}
	if id := f.newest(t, f.cache.IssuerKeys); id != "acme-v2" {
		t.Fatalf("IssuerKeys after Refresh = %q, want acme-v2", id)
	}
	f.wantCalls(t, 2)

	if _, err := f.files.Rotate("acme"); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(secrets.DefaultMinRefresh - time.Millisecond)
	if id := f.newest(t, f.cache.Refresh); id != "acme-v2" {
		t.Fatalf("Refresh within MinRefresh of the last = %q, want cached acme-v2", id)
	}
	f.wantCalls(t, 2)
	f.clock.Advance(time.Millisecond)
	if id := f.newest(t, f.cache.Refresh); id != "acme-v3" {
		t.Fatalf("Refresh after MinRefresh = %q, want acme-v3", id)
	}
	f.wantCalls(t, 3)

	// Backend down: Refresh keeps serving keys within their TTL, and no longer.
	f.probe.down.Store(true)
	f.clock.Advance(secrets.DefaultMinRefresh)
	if id := f.newest(t, f.cache.Refresh); id != "acme-v3" {
		t.Fatalf("Refresh with backend down = %q, want cached acme-v3", id)
	}
	f.clock.Advance(secrets.DefaultCacheTTL)
	if _, err := f.cache.Refresh(context.Background(), "acme"); !errors.Is(err, secrets.ErrUnavailable) {
		t.Fatalf("Refresh with backend down past TTL: %v, want ErrUnavailable", err)
	}
}

// TestCacheRefreshFlood is the hostile case: a flood of Refresh calls (what forged tokens cause) for one
// issuer, for many known issuers and for unknown ones reaches the backing store at most once per issuer
// every MinRefresh and at most RefreshRate times a second in all; unknown issuers never refresh.
func TestCacheRefreshFlood(t *testing.T) {
	// Unknown issuers are remembered for the whole test, so every backing call counted below is a refresh.
	f := newFixture(t, secrets.CacheOptions{RefreshAhead: -1, NegativeTTL: time.Hour})
	ctx := context.Background()
	const known, unknown = 100, 100
	for i := range known {
		if _, err := f.files.CreateIssuer(fmt.Sprintf("known-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range known {
		if _, err := f.cache.IssuerKeys(ctx, fmt.Sprintf("known-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range unknown {
		if _, err := f.cache.IssuerKeys(ctx, fmt.Sprintf("unknown-%d", i)); !errors.Is(err, secrets.ErrUnknownIssuer) {
			t.Fatalf("unknown issuer: %v", err)
		}
	}
	f.wantCalls(t, known+unknown)
	base := f.probe.calls.Load()
	f.clock.Advance(11 * time.Second) // past any per-issuer bound: only the global one holds the flood

	flood := func() {
		t.Helper()
		for range 10 {
			for i := range known {
				if _, err := f.cache.Refresh(ctx, fmt.Sprintf("known-%d", i)); err != nil {
					t.Fatal(err)
				}
			}
			for i := range unknown {
				if _, err := f.cache.Refresh(ctx, fmt.Sprintf("unknown-%d", i)); !errors.Is(err, secrets.ErrUnknownIssuer) {
					t.Fatalf("Refresh of an unknown issuer: %v", err)
				}
			}
		}
	}
	flood()
	f.wantCalls(t, base+secrets.DefaultRefreshRate) // the burst, then nothing
	f.clock.Advance(secrets.DefaultMinRefresh)
	flood()
	f.wantCalls(t, base+2*secrets.DefaultRefreshRate) // a second's worth more

	// One issuer alone: once every MinRefresh, however many calls.
	f.clock.Advance(time.Minute) // the global bucket is full again
	f.newest(t, f.cache.IssuerKeys)
	base = f.probe.calls.Load()
	for range 1000 {
		if _, err := f.cache.Refresh(ctx, "acme"); err != nil {
			t.Fatal(err)
		}
	}
	f.wantCalls(t, base+1)
}

func TestCacheInvalidate(t *testing.T) {
	f := newFixture(t, secrets.CacheOptions{})
	f.newest(t, f.cache.IssuerKeys)
	if _, err := f.files.Rotate("acme"); err != nil {
		t.Fatal(err)
	}
	f.cache.Invalidate("acme")
	if id := f.newest(t, f.cache.IssuerKeys); id != "acme-v2" {
		t.Fatalf("after Invalidate = %q, want acme-v2", id)
	}
}

func TestCacheMaxEntries(t *testing.T) {
	f := newFixture(t, secrets.CacheOptions{MaxEntries: 2})
	f.newest(t, f.cache.IssuerKeys) // acme: positive, always kept
	for _, iss := range []string{"u1", "u2", "u2"} {
		if _, err := f.cache.IssuerKeys(context.Background(), iss); !errors.Is(err, secrets.ErrUnknownIssuer) {
			t.Fatal(err)
		}
	}
	// u1 took the last slot; u2 is not remembered, so both lookups of it reached the backend.
	f.wantCalls(t, 4)
	f.clock.Advance(secrets.DefaultNegativeTTL) // u1 expires and is swept to make room
	for range 2 {
		if _, err := f.cache.IssuerKeys(context.Background(), "u2"); !errors.Is(err, secrets.ErrUnknownIssuer) {
			t.Fatal(err)
		}
	}
	f.wantCalls(t, 5)
}

func TestCacheSingleflight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, secrets.CacheOptions{})
		f.probe.gate = make(chan struct{})
		const n = 10
		results := make(chan error, n)
		for range n {
			go func() {
				_, err := f.cache.IssuerKeys(context.Background(), "acme")
				results <- err
			}()
		}
		synctest.Wait() // every caller is blocked: one in the backend, the rest on its result
		f.wantCalls(t, 1)
		close(f.probe.gate)
		for range n {
			if err := <-results; err != nil {
				t.Fatal(err)
			}
		}
		f.wantCalls(t, 1)
	})
}

// A caller that gives up does not cancel the shared fetch other callers wait for.
func TestCacheCallerCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, secrets.CacheOptions{})
		f.probe.gate = make(chan struct{})
		f.probe.ctxErrs = make(chan error, 1)
		ctx, cancel := context.WithCancel(context.Background())
		first := make(chan error, 1)
		go func() {
			_, err := f.cache.IssuerKeys(ctx, "acme")
			first <- err
		}()
		synctest.Wait()
		second := make(chan error, 1)
		go func() {
			_, err := f.cache.IssuerKeys(context.Background(), "acme")
			second <- err
		}()
		synctest.Wait()
		cancel()
		if err := <-first; !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled caller: %v", err)
		}
		close(f.probe.gate)
		if err := <-f.probe.ctxErrs; err != nil {
			t.Fatalf("backend saw a cancelled context: %v", err)
		}
		if err := <-second; err != nil {
			t.Fatalf("second caller: %v", err)
		}
		f.wantCalls(t, 1)
	})
}

// Keys in use are refreshed in the background before their TTL: lookups keep being answered from the cache
// and see a rotation without ever waiting for the backing store. A failed background refresh is retried at
// most every MinRefresh, and the cached keys serve until their TTL and no longer.
func TestCacheRefreshAhead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, secrets.CacheOptions{})
		ahead := secrets.DefaultCacheTTL / 5 // the default RefreshAhead
		f.newest(t, f.cache.IssuerKeys)
		if _, err := f.files.Rotate("acme"); err != nil {
			t.Fatal(err)
		}

		f.clock.Advance(secrets.DefaultCacheTTL - ahead - time.Second)
		if id := f.newest(t, f.cache.IssuerKeys); id != "acme-v1" {
			t.Fatalf("before the refresh window: %q", id)
		}
		synctest.Wait()
		f.wantCalls(t, 1)

		f.clock.Advance(time.Second) // in the window: answered from the cache, refreshed behind it
		f.probe.gate = make(chan struct{})
		if id := f.newest(t, f.cache.IssuerKeys); id != "acme-v1" {
			t.Fatalf("lookup starting the refresh: %q, want the cached acme-v1 at once", id)
		}
		synctest.Wait() // the refresh is blocked in the backing store; lookups do not wait for it
		f.wantCalls(t, 2)
		if id := f.newest(t, f.cache.IssuerKeys); id != "acme-v1" {
			t.Fatalf("lookup during the refresh: %q", id)
		}
		close(f.probe.gate)
		synctest.Wait()
		f.probe.gate = nil
		if id := f.newest(t, f.cache.IssuerKeys); id != "acme-v2" {
			t.Fatalf("after the background refresh: %q, want acme-v2", id)
		}
		f.wantCalls(t, 2)

		// Backend down: the refreshed entry (fetched at TTL-ahead) serves until its own TTL.
		f.probe.down.Store(true)
		f.clock.Advance(secrets.DefaultCacheTTL - ahead)
		f.newest(t, f.cache.IssuerKeys)
		synctest.Wait()
		f.wantCalls(t, 3) // the background refresh failed
		for range 3 {
			if id := f.newest(t, f.cache.IssuerKeys); id != "acme-v2" {
				t.Fatalf("backend down, within TTL: %q", id)
			}
		}
		synctest.Wait()
		f.wantCalls(t, 3) // no new attempt within MinRefresh
		f.clock.Advance(secrets.DefaultMinRefresh)
		f.newest(t, f.cache.IssuerKeys)
		synctest.Wait()
		f.wantCalls(t, 4)
		f.clock.Advance(ahead - secrets.DefaultMinRefresh)
		if _, err := f.cache.IssuerKeys(context.Background(), "acme"); !errors.Is(err, secrets.ErrUnavailable) {
			t.Fatalf("backend down, TTL over: %v, want ErrUnavailable", err)
		}
	})
}

func TestCacheCloseStopsRefresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, secrets.CacheOptions{})
		f.newest(t, f.cache.IssuerKeys)
		f.cache.Close()
		f.cache.Close() // idempotent
		f.clock.Advance(secrets.DefaultCacheTTL - time.Second)
		f.newest(t, f.cache.IssuerKeys)
		synctest.Wait()
		f.wantCalls(t, 1)
	})
}
