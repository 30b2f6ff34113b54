package secrets

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	"golang.org/x/time/rate"
)

// Refresher is a Store that caches and can be asked to look past its cache for one issuer. The token verifier
// calls Refresh when a token names a key id it does not hold or matches none of the held keys, so a rotation in
// the backing store is picked up at once, not when the cache's TTL runs out. Implementations bound how often
// Refresh reaches the backing store, per issuer and in all, so forged tokens cannot turn it into a flood. Safe
// for concurrent use.
type Refresher interface {
	Store
	Refresh(ctx context.Context, issuer string) ([]Key, error)
}

// Cache defaults.
const (
	DefaultCacheTTL        = 5 * time.Minute
	DefaultNegativeTTL     = 10 * time.Second
	DefaultMinRefresh      = time.Second
	DefaultRefreshRate     = 20 // a second, across all issuers
	DefaultFetchTimeout    = 10 * time.Second
	DefaultCacheMaxEntries = 10000
)

// CacheOptions tunes a Cache; zero fields take the defaults above.
type CacheOptions struct {
	// TTL is how long fetched keys are served without asking the backing store. When it has run out and the
	// backing store is unavailable, the issuer is unavailable: secrets are never served past their TTL.
	TTL time.Duration
	// NegativeTTL is how long "unknown issuer" is remembered, so floods of tokens naming one unknown issuer
	// do not each reach the backing store.
	NegativeTTL time.Duration
	// MinRefresh is the least time between two fetches of one issuer caused by Refresh, and between two
	// background refreshes of one issuer.
	MinRefresh time.Duration
	// RefreshRate bounds the fetches Refresh and background refreshes start, across all issuers, per second
	// (a token bucket whose burst is the rate): forged tokens naming many issuers cannot turn refreshes into
	// a flood on the backing store. A Refresh beyond it, or within MinRefresh of the issuer's last, answers
	// like IssuerKeys. Lookups the cache has no fresh answer for are not refreshes and are not bounded by it.
	RefreshRate float64
	// RefreshAhead is how long before an issuer's keys reach their TTL a lookup that is answered from them
	// also starts a background fetch: an issuer in use is refreshed before it expires, so its lookups never
	// wait for the backing store. A failed background fetch changes nothing (the cached keys serve until
	// their TTL) and is tried again at most every MinRefresh. Zero takes TTL/5; negative turns background
	// refresh off.
	RefreshAhead time.Duration
	// FetchTimeout bounds one call to the backing store. The call is detached from the caller's context
	// (its result is shared by every concurrent caller), so this is what stops a hung backend.
	FetchTimeout time.Duration
	// MaxEntries bounds the number of remembered unknown issuers; known issuers are always cached.
	MaxEntries int
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// Cache is a Store that remembers another Store's answers: keys for TTL, unknown issuers for NegativeTTL.
// Concurrent misses for one issuer share one backing call, and keys in use are refreshed in the background
// before they expire (RefreshAhead). Safe for concurrent use; Close waits for background refreshes.
type Cache struct {
	backing Store
	opts    CacheOptions
	group   singleflight.Group
	wg      sync.WaitGroup // background refreshes

	mu        sync.Mutex
	entries   map[string]cacheEntry
	refreshes *rate.Limiter // RefreshRate: every fetch Refresh or a background refresh starts takes a token
	closed    bool
}

// cacheEntry is one issuer's last answer; keys is nil when the answer was "unknown issuer".
type cacheEntry struct {
	keys      []Key
	fetched   time.Time
	tried     time.Time // when a background refresh of these keys last started
	refreshed time.Time // when Refresh last fetched this issuer (kept across fetches)
}

var _ Refresher = (*Cache)(nil)

// NewCache wraps backing.
func NewCache(backing Store, opts CacheOptions) *Cache {
	if opts.TTL <= 0 {
		opts.TTL = DefaultCacheTTL
	}
	if opts.NegativeTTL <= 0 {
		opts.NegativeTTL = DefaultNegativeTTL
	}
	if opts.MinRefresh <= 0 {
		opts.MinRefresh = DefaultMinRefresh
	}
	if opts.RefreshRate <= 0 {
		opts.RefreshRate = DefaultRefreshRate
	}
	if opts.RefreshAhead == 0 {
		opts.RefreshAhead = opts.TTL / 5
	}
	if opts.FetchTimeout <= 0 {
		opts.FetchTimeout = DefaultFetchTimeout
	}
	if opts.MaxEntries <= 0 {
		opts.MaxEntries = DefaultCacheMaxEntries
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	burst := max(1, int(opts.RefreshRate))
	return &Cache{backing: backing, opts: opts, entries: map[string]cacheEntry{},
		refreshes: rate.NewLimiter(rate.Limit(opts.RefreshRate), burst)}
}

// IssuerKeys answers from the cache while the entry is fresh and asks the backing store otherwise. The
// returned slice is the caller's; the secrets it points to are shared and must not be modified.
func (c *Cache) IssuerKeys(ctx context.Context, issuer string) ([]Key, error) {
	now := c.opts.Now()
	if e, ok := c.lookup(issuer); ok {
		if e.keys != nil && now.Before(e.fetched.Add(c.opts.TTL)) {
			c.refreshAhead(issuer, now)
			return cloneKeys(e.keys), nil
		}
		if e.keys == nil && now.Before(e.fetched.Add(c.opts.NegativeTTL)) {
			return nil, unknownIssuer(issuer)
		}
	}
	return c.fetch(ctx, issuer)
}

// Refresh asks the backing store again for an issuer it holds keys of, at once, unless Refresh did so less than
// MinRefresh ago or RefreshRate is spent; then, and for an issuer it holds no keys of (unknown, or not
// looked up yet), it answers like IssuerKeys. When the backing store fails and the cached keys are within
// their TTL, it serves them.
func (c *Cache) Refresh(ctx context.Context, issuer string) ([]Key, error) {
	e, ok := c.startRefresh(issuer, c.opts.Now())
	if !ok {
		return c.IssuerKeys(ctx, issuer)
	}
	keys, err := c.fetch(ctx, issuer)
	if err != nil && !errors.Is(err, ErrUnknownIssuer) && c.opts.Now().Before(e.fetched.Add(c.opts.TTL)) {
		return cloneKeys(e.keys), nil
	}
	return keys, err
}

// startRefresh tells whether Refresh may fetch issuer now: it holds keys of it, Refresh has not fetched it
// within MinRefresh, and RefreshRate has a token left (taken only then). It answers the entry and marks it
// refreshed.
func (c *Cache) startRefresh(issuer string, now time.Time) (cacheEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[issuer]
	if !ok || e.keys == nil || (!e.refreshed.IsZero() && now.Before(e.refreshed.Add(c.opts.MinRefresh))) ||
		!c.refreshes.AllowN(now, 1) {
		return cacheEntry{}, false
	}
	e.refreshed = now
	c.entries[issuer] = e
	return e, true
}

// refreshAhead starts a background fetch of issuer when its cached keys are within RefreshAhead of their TTL
// and no background fetch of them started in the last MinRefresh.
func (c *Cache) refreshAhead(issuer string, now time.Time) {
	if c.opts.RefreshAhead < 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[issuer]
	if c.closed || !ok || e.keys == nil || now.Before(e.fetched.Add(c.opts.TTL-c.opts.RefreshAhead)) ||
		(!e.tried.IsZero() && now.Before(e.tried.Add(c.opts.MinRefresh))) || !c.refreshes.AllowN(now, 1) {
		return
	}
	e.tried = now
	c.entries[issuer] = e
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		_, _ = c.fetch(context.Background(), issuer) // a failure leaves the entry to serve until its TTL
	}()
}

// Close stops starting background refreshes and waits for those running. The Cache still answers from its
// entries and the backing store afterwards. Idempotent.
func (c *Cache) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.wg.Wait()
	return nil
}

// Invalidate forgets what the cache knows about issuer, e.g. after an in-process rotation.
func (c *Cache) Invalidate(issuer string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, issuer)
}

func (c *Cache) lookup(issuer string) (cacheEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[issuer]
	return e, ok
}

// fetch asks the backing store, sharing one call among concurrent callers. A failure other than "unknown
// issuer" is not cached and leaves the previous entry in place.
func (c *Cache) fetch(ctx context.Context, issuer string) ([]Key, error) {
	ch := c.group.DoChan(issuer, func() (any, error) {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opts.FetchTimeout)
		defer cancel()
		keys, err := c.backing.IssuerKeys(fctx, issuer)
		switch {
		case err == nil && len(keys) > 0:
			keys = cloneKeys(keys)
			c.store(issuer, cacheEntry{keys: keys, fetched: c.opts.Now()})
			return keys, nil
		case err == nil || errors.Is(err, ErrUnknownIssuer):
			c.store(issuer, cacheEntry{fetched: c.opts.Now()})
			return nil, unknownIssuer(issuer)
		default:
			return nil, fmt.Errorf("issuer %q keys: %w", issuer, err)
		}
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return nil, r.Err
		}
		return cloneKeys(r.Val.([]Key)), nil
	case <-ctx.Done():
		return nil, fmt.Errorf("issuer %q keys: %w", issuer, ctx.Err())
	}
}

func (c *Cache) store(issuer string, e cacheEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old, ok := c.entries[issuer]
	if !ok && e.keys == nil && len(c.entries) >= c.opts.MaxEntries {
		c.sweepLocked()
		if len(c.entries) >= c.opts.MaxEntries {
			return // full of live entries: do not let unknown issuers grow the map
		}
	}
	e.refreshed = old.refreshed // a fetch does not reset Refresh's per-issuer bound
	c.entries[issuer] = e
}

// sweepLocked drops entries that could no longer be served.
func (c *Cache) sweepLocked() {
	now := c.opts.Now()
	for iss, e := range c.entries {
		ttl := c.opts.TTL
		if e.keys == nil {
			ttl = c.opts.NegativeTTL
		}
		if !now.Before(e.fetched.Add(ttl)) {
			delete(c.entries, iss)
		}
	}
}

func unknownIssuer(issuer string) error {
	return fmt.Errorf("issuer %q: %w", issuer, ErrUnknownIssuer)
}

func cloneKeys(keys []Key) []Key {
	return append([]Key(nil), keys...)
}
