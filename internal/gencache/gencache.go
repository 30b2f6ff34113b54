// Package gencache is a bounded map of short-lived entries kept in two generations, swapped every TTL: an
// entry lives at most two TTLs in the maps, every operation is O(1), and the bound costs no eviction order.
// The edge's admission cache and the token verifier's cache of verified tokens are built on it.
package gencache

import (
	"sync"
	"time"
)

// Cache maps K to V. Once the current generation holds MaxEntries/2 entries (or, with MaxBytes set, entries
// of MaxBytes/2 bytes as their callers counted them), new keys are not kept until the next swap, so a burst
// of keys past the bound is served by the callers' slow path rather than growing the map. Entries carry
// their own expiry if they need one within the TTL; the cache only drops them. The zero value is unusable:
// set TTL (> 0) and MaxEntries (>= 2). Safe for concurrent use.
type Cache[K comparable, V any] struct {
	TTL        time.Duration
	MaxEntries int
	MaxBytes   int // 0: no byte bound

	mu        sync.Mutex
	cur, prev map[K]V
	curBytes  int
	swapAt    time.Time // when cur becomes prev
}

// Get is k's entry, from the current generation or else the older one.
func (c *Cache[K, V]) Get(k K, now time.Time) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rotate(now)
	v, ok := c.cur[k]
	if !ok {
		v, ok = c.prev[k]
	}
	return v, ok
}

// Put keeps v under k in the current generation: it replaces k's entry there, else it is added unless the
// generation is full; n is the entry's size counted against MaxBytes (0 without a byte bound).
func (c *Cache[K, V]) Put(k K, v V, n int, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rotate(now)
	if c.cur == nil {
		c.cur = make(map[K]V)
	}
	if _, ok := c.cur[k]; ok {
		c.cur[k] = v
		return
	}
	if len(c.cur) >= c.MaxEntries/2 || c.MaxBytes > 0 && c.curBytes+n > c.MaxBytes/2 {
		return
	}
	c.cur[k] = v
	c.curBytes += n
}

// Update replaces k's entry in the current generation with f of it; an entry only in the older generation,
// or none, is left as it is (false).
func (c *Cache[K, V]) Update(k K, now time.Time, f func(V) V) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rotate(now)
	v, ok := c.cur[k]
	if ok {
		c.cur[k] = f(v)
	}
	return ok
}

// UpdateAll replaces k's entry in both generations with f of it.
func (c *Cache[K, V]) UpdateAll(k K, f func(V) V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range []map[K]V{c.cur, c.prev} {
		if v, ok := m[k]; ok {
			m[k] = f(v)
		}
	}
}

// Len is the number of entries in both generations.
func (c *Cache[K, V]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.cur) + len(c.prev)
}

// rotate drops the older generation once a TTL has passed since the last swap (two TTLs: both).
func (c *Cache[K, V]) rotate(now time.Time) {
	switch {
	case now.Before(c.swapAt):
	case now.Before(c.swapAt.Add(c.TTL)):
		c.prev, c.cur, c.curBytes = c.cur, nil, 0
		c.swapAt = now.Add(c.TTL)
	default:
		c.prev, c.cur, c.curBytes = nil, nil, 0
		c.swapAt = now.Add(c.TTL)
	}
}
